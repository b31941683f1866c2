"""--deterministic: two runs of a phase with the same seed give bit-identical loss curves
and final metrics (linreg: w, b, train and test loss; MLP: losses, accuracies, and a parameter
checksum when the record has one). Needs a GPU and the built phases; skips with the reason
otherwise. The cost of --deterministic is measured by `bash scripts/harden.sh determinism`
(record profiles/<device>/determinism__all.json), not here: timing claims stay out of tests.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
LINREG = ["phase1_naive", "phase2_shared_mem", "phase3_fused_streams"]
MLP = ["phase4_mlp", "phase5_batched"]

# Metrics that measure time or memory, not results: left out of the comparison.
NOT_RESULTS = ("_ms", "per_s", "time", "seconds", "memory")


def have_gpu():
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


pytestmark = pytest.mark.skipif(not have_gpu(), reason="needs an NVIDIA GPU (nvidia-smi -L failed)")


def mnist_dir():
    for d in [os.environ.get("DATA_DIR", ""), os.environ.get("DATA_SRC", ""), str(ROOT / "data"),
              str(ROOT.parent / "shared" / "data")]:
        if d and (Path(d) / "mnist" / "train-images-idx3-ubyte.gz").is_file():
            return Path(d) / "mnist"
    return None


def results(rec):
    """The parts of a record two deterministic runs must agree on, bit for bit (JSON numbers are
    written with round-trip precision, so == on the parsed values is equality of the doubles)."""
    metrics = {k: v for k, v in (rec.get("metrics") or {}).items() if not any(w in k for w in NOT_RESULTS)}
    return {"loss": rec.get("loss"), "metrics": metrics, "status": rec.get("status")}


def first_difference(a, b, path=""):
    if type(a) is not type(b):
        return f"{path or '/'}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}/{k}: present in one run only"
            d = first_difference(a[k], b[k], f"{path}/{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def run_twice(phase, args, tmp_path):
    exe = BUILD / phase
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        pytest.skip(f"build/{phase} is not built (make {phase})")
    recs = []
    for tag in ("det_a", "det_b"):
        out = tmp_path / tag
        r = subprocess.run([str(exe)] + args + ["--deterministic", "--seed", "1234", "--no-cupti", "--warmup", "0",
                                                "--repeats", "1", "--out", str(out), "--tag", tag],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{phase} {tag}: exit {r.returncode}: {r.stderr}"
        recs.append(json.loads((out / f"{phase}__{tag}.json").read_text()))
    return recs


@pytest.mark.parametrize("phase", LINREG)
def test_linreg_deterministic_runs_are_bit_identical(phase, tmp_path):
    a, b = run_twice(phase, ["--n", "999983", "--epochs", "200"], tmp_path)
    ra, rb = results(a), results(b)
    assert len(ra["loss"]["per_epoch"]) == 200
    assert ra["metrics"]["w"] is not None and ra["metrics"]["b"] is not None
    assert first_difference(ra, rb) is None, first_difference(ra, rb)


@pytest.mark.parametrize("phase", MLP)
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_mlp_deterministic_runs_are_bit_identical(phase, precision, tmp_path):
    data = mnist_dir()
    if data is None:
        pytest.skip("MNIST not found (make data, or set DATA_DIR)")
    a, b = run_twice(phase, ["--data", str(data), "--precision", precision, "--steps", "600"], tmp_path)
    ra, rb = results(a), results(b)
    assert ra["loss"], "the record holds no loss curve to compare"
    assert first_difference(ra, rb) is None, first_difference(ra, rb)
