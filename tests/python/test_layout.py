"""The chapters' conventions that a reader relies on, checked on the tree itself (no GPU, no build):
every phase's main.cu opens with a header card of at most 45 comment lines that names the record
folder its measurement came from; no phase includes another phase's folder (phases depend on
common/ only); and the README's layout section names every source file of the phase folders and of
common/mlp/, so the table matches the tree."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PHASES = ["phase1_naive", "phase2_shared_mem", "phase3_fused_streams", "phase4_mlp", "phase5_batched"]
SOURCE = re.compile(r"\.(cu|cuh|h|cpp)$")


def sources(folder):
    out = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
        out += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in files if SOURCE.search(f)]
    return sorted(out)


def header_card(path):
    card = []
    with open(os.path.join(ROOT, path)) as f:
        for line in f:
            if not line.startswith("//"):
                break
            card.append(line)
    return card


def test_every_phase_opens_with_a_header_card_that_names_its_records():
    for phase in PHASES:
        card = header_card(os.path.join(phase, "main.cu"))
        assert 10 <= len(card) <= 45, (phase, len(card))
        text = "".join(card)
        assert re.search(r"profiles/[a-z0-9-]+/", text), (phase, "the card names no record folder")
        assert re.search(r"\b(MEASURED|[Mm]easured)\b", text), (phase, "the card has no measurement")


def test_phases_depend_on_common_only():
    include = re.compile(r'#\s*include\s*"([^"]+)"')
    for phase in PHASES:
        for path in sources(phase):
            with open(os.path.join(ROOT, path)) as f:
                for target in include.findall(f.read()):
                    others = [p for p in PHASES if p != phase and p in target]
                    assert not others and not target.startswith("../"), (path, target)


def readme_layout():
    text = open(os.path.join(ROOT, "README.md")).read()
    start = text.index("## Layout")
    end = text.index("\n## ", start + 1)
    section = text[start:end]
    # brace lists name several files: 5c_persistent.{h,cu,cuh}
    return re.sub(r"([\w./-]+)\.\{([\w,]+)\}",
                  lambda m: " ".join(m.group(1) + "." + e for e in m.group(2).split(",")), section)


def test_readme_layout_names_every_chapter_and_library_file():
    section = readme_layout()
    missing = []
    for folder in PHASES + ["common/mlp"]:
        for path in sources(folder):
            name = os.path.basename(path)
            stem = name.rsplit(".", 1)[0]
            if not re.search(r"(?<![\w.])(" + re.escape(name) + r"|" + re.escape(stem) + r")(?![\w])", section):
                missing.append(path)
    assert not missing, "README's layout section does not name: " + ", ".join(missing)


def test_readme_layout_files_exist():
    # every `path/` or `file.ext` in the table's first column is in the tree
    for row in readme_layout().splitlines():
        if not row.startswith("| `"):
            continue
        for p in re.findall(r"`([^`]+)`", row.split("|")[1]):
            if "…" in p:
                continue
            assert os.path.exists(os.path.join(ROOT, p)), p
