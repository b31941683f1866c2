"""Tests of the report's layout rules: the appendix's size and links, only committed files listed,
percentages that never exceed 100% unexplained, and sweep figures that join only consecutive points."""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT_DIR = os.path.join(ROOT, "report")
from report_fixtures import FIXTURES, H100  # noqa: E402
sys.path.insert(0, REPORT_DIR)

import analysis as A  # noqa: E402
import figures as F  # noqa: E402
import make_report as M  # noqa: E402

LINK = re.compile(r"\]\(")


@pytest.fixture(autouse=True)
def every_file_afterwards():
    """build() sets which files the report reads; other tests call analysis directly."""
    yield
    A.set_tracked(None)


def _read(name):
    with open(os.path.join(REPORT_DIR, name), encoding="utf-8") as f:
        return f.read()


@pytest.mark.skipif(not os.path.exists(os.path.join(REPORT_DIR, "APPENDIX.md")), reason="no generated appendix")
def test_generated_appendix_is_short_and_links_the_phase_notes():
    app = _read("APPENDIX.md")
    assert len(app.splitlines()) <= 3000
    for name in ("APPENDIX.md", "REPORT.md"):
        for i, line in enumerate(_read(name).splitlines()):
            assert len(LINK.findall(line)) < 25, f"{name}:{i + 1} carries {len(LINK.findall(line))} links"
    notes = os.path.join(REPORT_DIR, "phase_notes")
    for n in sorted(os.listdir(notes)):
        if n.endswith(".md"):
            assert f"](phase_notes/{n})" in app          # linked ...
            with open(os.path.join(notes, n), encoding="utf-8") as f:
                para = f.read().strip().split("\n\n")[0]
            assert para not in app                        # ... not pasted


def test_note_contents_lists_headings_else_bold_openers():
    assert M.note_contents("**What it adds.** x\n\n**Predicted** (H100). y\n") == ["What it adds", "Predicted"]
    assert M.note_contents("# A\n**B.** x\n## C (x)\n") == ["A", "C"]


def test_busy_share_over_100_is_never_a_percentage():
    assert A.busy_text(64.71) == "64.7%"
    over = A.busy_text(111.0, "epoch")
    assert "%" not in over and "1.11×" in over and "epoch" in over
    assert A.busy_text(None) == "—"
    assert A.pct_text(0.036) == "0.0360%" and A.pct_text(466.4) == "466%"
    assert M.copy_rate_text(64.4) == "64.4% of copy bandwidth" and M.copy_rate_text(466.4) == "4.66× the HBM copy rate"


def test_a_point_without_a_measured_neighbour_is_a_marker():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    grid = [128, 256, 512, 1024]
    F._plot_runs(ax, [(128, 1.0), (1024, 2.0)], grid, marker="o", linestyle="-", label="two ends")
    F._plot_runs(ax, [(128, 1.0), (256, 1.5), (1024, 2.0)], grid, marker="s", linestyle="-", label="a run and a point")
    F._plot_runs(ax, [(512, 3.0)], grid, marker="^", linestyle="-", label="one width")
    lines = ax.get_lines()
    styles = [(list(ln.get_xdata()), ln.get_linestyle()) for ln in lines]
    assert styles == [([128], "None"), ([1024], "None"), ([128, 256], "-"), ([1024], "None"), ([512], "None")]
    # the legend of a points-only mode shows a marker, not a line
    labelled = {ln.get_label(): ln.get_linestyle() for ln in lines if not ln.get_label().startswith("_")}
    assert labelled == {"two ends": "None", "a run and a point": "-", "one width": "None"}
    plt.close(fig)


def _git(cwd, *args):
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_only_files_git_tracks_are_read(tmp_path):
    repo = tmp_path / "repo"
    dev = repo / "profiles" / H100
    dev.mkdir(parents=True)
    shutil.copy(os.path.join(FIXTURES, H100, "phase1_naive__headline.json"), dev)
    assert _git(repo, "init", "-q").returncode == 0
    _git(repo, "add", "profiles")
    # made here, never added: a record, a trace and another JSON file
    shutil.copy(os.path.join(FIXTURES, H100, "phase2_shared_mem__headline.json"), dev)
    (dev / "pytorch_linreg__headline-eager.trace.json").write_text('{"traceEvents": []}')
    (dev / "other.json").write_text("{}")
    out = tmp_path / "out"
    assert M.main(["--profiles", str(repo / "profiles"), "--out", str(out)]) == 0
    text = (out / "APPENDIX.md").read_text() + (out / "REPORT.md").read_text()
    assert "phase1_naive__headline.json" in text
    for untracked in ("phase2_shared_mem__headline.json", ".trace.json", "other.json"):
        assert untracked not in text
    # --untracked reads them too (a preview before they are committed)
    out2 = tmp_path / "out2"
    assert M.main(["--profiles", str(repo / "profiles"), "--out", str(out2), "--untracked"]) == 0
    assert "phase2_shared_mem__headline.json" in (out2 / "APPENDIX.md").read_text()


def test_without_git_every_file_that_exists_is_read(tmp_path):
    dev = tmp_path / "profiles" / H100   # not inside a work tree
    dev.mkdir(parents=True)
    for n in ("phase1_naive__headline.json", "phase2_shared_mem__headline.json"):
        shutil.copy(os.path.join(FIXTURES, H100, n), dev)
    assert A.git_tracked(str(tmp_path / "profiles")) is None
    out = tmp_path / "out"
    assert M.main(["--profiles", str(tmp_path / "profiles"), "--out", str(out)]) == 0
    text = (out / "APPENDIX.md").read_text()
    assert "phase1_naive__headline.json" in text and "phase2_shared_mem__headline.json" in text
