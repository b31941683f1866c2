"""The quick notebook's records: `make run` (scripts/run_all.sh, quick by default) writes them to
profiles/<slug>/quick/, and report/records.py load_profiles reads that folder beside the device's
own, a full run's record winning wherever both fill one slot (device, phase, tag).

The record trees are built in tmp_path from the committed fixture records (tests/fixtures/records);
run_all.sh runs against fake nvidia-smi, make, bench scripts and tools in a scratch copy of the layout.
"""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT_DIR = os.path.join(ROOT, "report")
from report_fixtures import FIXTURES, H100  # noqa: E402
sys.path.insert(0, REPORT_DIR)

import records as R  # noqa: E402


def _fixture(name):
    with open(os.path.join(FIXTURES, H100, name), encoding="utf-8") as f:
        return json.load(f)


def _write(path, rec):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))


def _quick(rec, median=None):
    q = json.loads(json.dumps(rec))
    q["run_mode"] = "quick"
    q["utc_time"] = "2027-01-01T00:00:00Z"      # newer than the full record: the slot still goes to the full one
    if median is not None:
        q["timing"]["total_ms"]["median"] = median
    return q


def _tree(tmp_path):
    """profiles/<H100>/ with two full records, profiles/<H100>/quick/ with a quick record of one of
    their slots, a quick record of a slot no full record fills, a trace and run_all__quick.json."""
    dev = tmp_path / "profiles" / H100
    p1 = _fixture("phase1_naive__headline.json")
    eager = _fixture("pytorch_linreg__headline-eager.json")
    _write(dev / "phase1_naive__headline.json", p1)
    _write(dev / "pytorch_linreg__headline-eager.json", eager)
    _write(dev / "quick" / "phase1_naive__headline.json", _quick(p1, 99.0))
    _write(dev / "quick" / "phase2_shared_mem__headline.json",
           _quick(dict(_fixture("phase2_shared_mem__headline.json"))))
    (dev / "quick" / "phase3_fused_streams__headline.trace.json").write_text('{"traceEvents": []}')
    run_all = json.loads(json.dumps(p1))
    run_all.update(phase="run_all", workload="run_all", implementation="script", run_mode="quick")
    _write(dev / "quick" / "run_all__quick.json", run_all)
    return tmp_path / "profiles", dev


def test_load_profiles_reads_the_quick_folder_and_a_full_record_wins_its_slot(tmp_path):
    profiles, dev = _tree(tmp_path)
    shadowed = []
    records, skipped, others = R.load_profiles(str(profiles), shadowed=shadowed)
    assert skipped == []
    by_path = {r.path: r for r in records}
    # repository-relative paths, the quick folder named in them
    assert set(by_path) == {f"profiles/{H100}/phase1_naive__headline.json",
                            f"profiles/{H100}/pytorch_linreg__headline-eager.json",
                            f"profiles/{H100}/quick/phase2_shared_mem__headline.json",
                            f"profiles/{H100}/quick/run_all__quick.json"}
    assert others == [f"profiles/{H100}/quick/phase3_fused_streams__headline.trace.json"]
    # the full phase-1 headline wins over the newer quick one of the same phase and tag
    p1 = by_path[f"profiles/{H100}/phase1_naive__headline.json"]
    assert not p1.quick and p1.data.get("run_mode") != "quick" and p1.total_ms() != 99.0
    assert [s.path for s in shadowed] == [f"profiles/{H100}/quick/phase1_naive__headline.json"]
    assert shadowed[0].quick and shadowed[0].total_ms() == 99.0
    # a quick record of a slot no full record fills is read, marked quick, on its device, without problems
    p2 = by_path[f"profiles/{H100}/quick/phase2_shared_mem__headline.json"]
    assert p2.quick and p2.data["run_mode"] == "quick" and p2.slug == H100 and p2.folder_slug == H100
    assert p2.problems == [] and p2.file == "phase2_shared_mem__headline.json"
    assert os.path.samefile(p2.abspath, dev / "quick" / "phase2_shared_mem__headline.json")
    # without the list the shadowed record is simply left out
    assert [r.path for r in R.load_profiles(str(profiles))[0]] == sorted(by_path)


def test_the_folder_decides_what_is_quick(tmp_path):
    profiles, dev = _tree(tmp_path)
    # a full record that did not finish keeps no slot: the quick record of that slot is read too
    p1 = _fixture("phase1_naive__headline.json")
    p1["status"] = "failed"
    _write(dev / "phase1_naive__headline.json", p1)
    # a quick record in the device folder (written before the quick folder existed) is no full record
    q = _quick(_fixture("pytorch_linreg__headline-eager.json"))
    _write(dev / "pytorch_linreg__headline-eager.json", q)
    _write(dev / "quick" / "pytorch_linreg__headline-eager.json", q)
    # a record under quick/ that says it is a full run's counts as quick, with the mismatch noted
    mislabeled = _fixture("phase3_fused_streams__headline.json")
    mislabeled["run_mode"] = "full"
    _write(dev / "quick" / "phase3_fused_streams__headline.json", mislabeled)
    shadowed = []
    records, skipped, _ = R.load_profiles(str(profiles), shadowed=shadowed)
    paths = {r.path: r for r in records}
    assert shadowed == [] and skipped == []
    assert f"profiles/{H100}/phase1_naive__headline.json" in paths
    assert f"profiles/{H100}/quick/phase1_naive__headline.json" in paths
    assert f"profiles/{H100}/pytorch_linreg__headline-eager.json" in paths
    assert f"profiles/{H100}/quick/pytorch_linreg__headline-eager.json" in paths
    m = paths[f"profiles/{H100}/quick/phase3_fused_streams__headline.json"]
    assert m.quick and m.data["run_mode"] == "quick"
    assert m.problems == [f'stored under profiles/{H100}/quick/ but run_mode is "full"']
    # an unreadable quick record is named with its quick path
    (dev / "quick" / "phase2_shared_mem__broken.json").write_text("{")
    _, skipped, _ = R.load_profiles(str(profiles))
    assert [s.path for s in skipped] == [f"profiles/{H100}/quick/phase2_shared_mem__broken.json"]


def test_the_report_draws_the_full_record_and_links_quick_ones_by_their_path(tmp_path):
    import make_report as M  # noqa: PLC0415
    profiles, dev = _tree(tmp_path)
    out = tmp_path / "out"
    assert M.main(["--profiles", str(profiles), "--out", str(out)]) == 0
    app = (out / "APPENDIX.md").read_text()
    report = (out / "REPORT.md").read_text() + app
    assert f"(../profiles/{H100}/phase1_naive__headline.json)" in report
    assert f"(../profiles/{H100}/quick/phase2_shared_mem__headline.json)" in report
    assert f"profiles/{H100}/quick/phase1_naive__headline.json" not in report     # the full record's slot
    assert "99.00 ms" not in report


# ------------------------------------------------------------------ scripts/run_all.sh: where the records go

FAKE_SMI = """#!/bin/bash
case "$*" in *query-gpu=name*) echo "NVIDIA H100 80GB HBM3";; *-L*) echo "GPU 0: NVIDIA H100 80GB HBM3";; esac
"""


def _sandbox(tmp_path):
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "scripts", "run_all.sh"), root / "scripts" / "run_all.sh")
    (root / "baselines" / "pytorch").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "baselines", "pytorch", "common.py"), root / "baselines" / "pytorch" / "common.py")
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in (("nvidia-smi", FAKE_SMI), ("make", '#!/bin/bash\necho "make $*" >> "$PWD/steps.log"\n')):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    for b in ("bench_linreg", "bench_mlp"):
        (root / "scripts" / f"{b}.sh").write_text(
            f'echo "{b} records=${{RECORDS_DIR:-}} jax_headline=${{HEADLINE_JAX_IMPLS:-}} parts=${{SWEEP_PARTS:-}} '
            f'jax_w1=${{JAX_W1_IMPLS:-}} jax_w2=${{JAX_W2_IMPLS:-}} poll=${{P3_POLL_CANDIDATES:-}}" >> "$PWD/steps.log"\n')
    (root / "build" / "tools").mkdir(parents=True)
    (root / "build" / "tools" / "tracer_overhead").write_text('#!/bin/bash\necho "tracer_overhead $*" >> "$PWD/steps.log"\n')
    (root / "build" / "tools" / "tracer_overhead").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:/usr/bin:/bin", JOBS="2")
    env.pop("RECORDS_DIR", None)

    def run(**extra):
        return subprocess.run(["bash", str(root / "scripts" / "run_all.sh")], capture_output=True, text=True,
                              env=dict(env, **extra), timeout=120)
    return root, run


def test_run_all_quick_writes_every_record_to_the_quick_folder(tmp_path):
    root, run = _sandbox(tmp_path)
    p = run()
    assert p.returncode == 0, p.stdout + p.stderr
    steps = (root / "steps.log").read_text().splitlines()
    quick = f"profiles/{H100}/quick"
    assert f"tracer_overhead --out {quick}" in steps
    lin = next(x for x in steps if x.startswith("bench_linreg"))
    mlp = next(x for x in steps if x.startswith("bench_mlp"))
    assert f"records={quick} " in lin and f"records={quick} " in mlp
    # one JAX mode a stage; no JAX sweep; one --poll-ns candidate
    assert "jax_headline=jit-run " in lin and "parts=p1 p2 p3 " in lin and "poll=400" in lin
    assert "jax_w1=jit-epoch " in mlp and "jax_w2=jit-run " in mlp
    assert (root / quick / "run_all__quick.json").exists()
    assert not (root / "profiles" / H100 / "run_all__quick.json").exists()
    assert f"records of the run are in {quick}/" in p.stdout
    # a caller's RECORDS_DIR wins
    (root / "steps.log").unlink()
    p = run(RECORDS_DIR="elsewhere")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "tracer_overhead --out elsewhere" in (root / "steps.log").read_text()
    assert (root / "elsewhere" / "run_all__quick.json").exists()


def test_run_all_full_keeps_writing_the_device_folder(tmp_path):
    root, run = _sandbox(tmp_path)
    p = run(FULL="1")
    assert p.returncode == 0, p.stdout + p.stderr
    steps = (root / "steps.log").read_text().splitlines()
    assert "tracer_overhead " in steps
    assert all("records= " in x for x in steps if x.startswith("bench_"))
    assert (root / "profiles" / H100 / "run_all__full.json").exists()
    assert not (root / "profiles" / H100 / "quick").exists()


def test_run_all_is_valid_bash():
    for s in ("run_all.sh", "bench_linreg.sh", "bench_mlp.sh"):
        p = subprocess.run(["bash", "-n", os.path.join(ROOT, "scripts", s)], capture_output=True, text=True)
        assert p.returncode == 0, s + ": " + p.stderr
