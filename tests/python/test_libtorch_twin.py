"""Tests for the libtorch twins (baselines/libtorch: build/libtorch_linreg, build/libtorch_mlp).

Without torch (CI): `make libtorch` prints one line saying why it built nothing and succeeds, and
`make test` runs it. Where the twins are built (`make libtorch`, torch importable): bad input gets
the project's one-line errors and exit codes before any GPU is touched (2 usage, 4 bad data / init /
order file, 6 output not writable), and valid input without a GPU exits 3. With a GPU as well (the
GPU smoke the bench scripts run): short runs of both implementations with --validate write valid
schema-v1 records, and eager and graph agree step for step with dropout 0.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "baselines" / "pytorch"))
import common as nbc  # noqa: E402
from idx_fixtures import write_dataset  # noqa: E402

LINREG = REPO / "build" / "libtorch_linreg"
MLP = REPO / "build" / "libtorch_mlp"


def _runnable():
    """Both twins built, and they start here (--help exits 0: libtorch's shared libraries load)."""
    if not (LINREG.exists() and MLP.exists()):
        return False
    for b in (LINREG, MLP):
        try:
            if subprocess.run([str(b), "--help"], capture_output=True, timeout=120).returncode != 0:
                return False
        except (OSError, subprocess.SubprocessError):
            return False
    return True


BUILT = _runnable()
needs_build = pytest.mark.skipif(
    not BUILT, reason="libtorch twins not built or cannot start here (make libtorch needs an importable torch)")


def _have_gpu():
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


HAVE_GPU = _have_gpu()
needs_gpu = pytest.mark.skipif(not (BUILT and HAVE_GPU), reason="needs the built twins and a GPU")


def run(binary, *args, cwd=None, timeout=600):
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def assert_one_line_error(p, code):
    assert p.returncode == code, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr


# ----------------------------------------------------------------------------- synthetic inputs
def write_init(d, layers, seed=1):
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    for l in range(len(layers) - 1):
        bound = 1.0 / np.sqrt(layers[l])
        np.save(d / f"W{l}.npy", rng.uniform(-bound, bound, (layers[l + 1], layers[l])).astype(np.float32))
        np.save(d / f"b{l}.npy", rng.uniform(-bound, bound, layers[l + 1]).astype(np.float32))
    return d


def write_points(path, n, seed=3):
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 10, n, endpoint=False, dtype=np.float64)
    y = 0.7 * x + 0.3 + 0.5 * rng.standard_normal(n)
    np.save(path, np.stack([x, y], axis=1).astype(np.float32))
    return path


# ----------------------------------------------------------------------------- make (no torch needed)
def test_make_libtorch_without_torch_is_one_line_and_succeeds():
    # A make of its own: under `make -jN test` the parent's jobserver flags would reach it without
    # their descriptors, and make would print a warning of its own beside the one line.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    p = subprocess.run(["make", "-s", "--no-print-directory", "libtorch", "PYTHON=false"], cwd=REPO,
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    lines = [l for l in (p.stdout + p.stderr).splitlines() if l.strip()]
    assert len(lines) == 1, lines
    assert "not built" in lines[0] and "not importable" in lines[0]


def test_make_test_runs_the_libtorch_hook_and_all_does_not_build_it():
    lines = (REPO / "Makefile").read_text().splitlines()
    i = next(k for k, l in enumerate(lines) if l.startswith("test:"))
    rule = [lines[i].split(":", 1)[1]]  # prerequisites, then the recipe's lines
    for l in lines[i + 1:]:
        if not l.startswith("\t"):
            break
        rule.append(l)
    assert "test-libtorch" in " ".join(rule).split()
    all_lines = [l for l in lines if l.startswith("all:")]
    assert all_lines and all("libtorch" not in l for l in all_lines)


def test_sources_open_with_header_cards():
    for name in ("linreg.cpp", "mlp.cpp"):
        lines = (REPO / "baselines" / "libtorch" / name).read_text().splitlines()
        card = 0
        for l in lines:
            if not l.startswith("//"):
                break
            card += 1
        assert 10 <= card <= 45, (name, card)


# ----------------------------------------------------------------------------- bad input (built twins)
@needs_build
@pytest.mark.parametrize(
    "args,code",
    [
        ([], 2),  # --data is required
        (["--data", "x.npy", "--bogus"], 2),
        (["--data", "x.npy", "--lr", "-1"], 2),
        (["--data", "x.npy", "--impl", "compile"], 2),
        (["--data", "x.npy", "--epochs", "0"], 2),
        (["--data", "nope.npy"], 4),
    ],
)
def test_linreg_bad_arguments(tmp_path, args, code):
    assert_one_line_error(run(LINREG, *args, "--out", tmp_path / "rec", cwd=tmp_path), code)
    assert not list((tmp_path / "rec").glob("*.json"))


@needs_build
def test_linreg_bad_data_files(tmp_path):
    np.save(tmp_path / "flat.npy", np.zeros(10, np.float32))
    np.save(tmp_path / "int.npy", np.zeros((10, 2), np.int32))
    (tmp_path / "junk.npy").write_bytes(b"not an npy file at all")
    for f in ("flat.npy", "int.npy", "junk.npy"):
        assert_one_line_error(run(LINREG, "--data", tmp_path / f, "--out", tmp_path / "rec"), 4)
    write_points(tmp_path / "p.npy", 100)
    assert_one_line_error(run(LINREG, "--data", tmp_path / "p.npy", "--n", "99", "--out", tmp_path / "rec"), 4)
    (tmp_path / "file").write_text("x")
    assert_one_line_error(run(LINREG, "--data", tmp_path / "p.npy", "--out", tmp_path / "file" / "sub"), 6)


@needs_build
def test_mlp_bad_arguments_and_files(tmp_path):
    data = write_dataset(tmp_path / "data", n_train=96, n_test=40)
    out = ["--out", tmp_path / "rec", "--data", data]
    for args in (["--layers", "100,10"], ["--layers", "784,64,9"], ["--dropout", "1"], ["--impl", "eager,x"],
                 ["--optimizer", "lbfgs"], ["--precision", "bf16"], ["--batch", "1000"]):
        assert_one_line_error(run(MLP, *args, *out), 2)
    assert_one_line_error(run(MLP, "--out", tmp_path / "rec", "--data", tmp_path / "missing"), 4)
    init = write_init(tmp_path / "init", [784, 128, 64, 10])
    np.save(init / "W1.npy", np.zeros((64, 127), np.float32))
    assert_one_line_error(run(MLP, *out, "--init", init), 4)
    init = write_init(tmp_path / "init2", [784, 128, 64, 10])
    np.save(init / "W3.npy", np.zeros((10, 10), np.float32))
    assert_one_line_error(run(MLP, *out, "--init", init), 4)
    np.save(tmp_path / "order.npy", np.full((2, 96), 96, np.int32))  # index outside 0..95
    assert_one_line_error(run(MLP, *out, "--epochs", "2", "--order", tmp_path / "order.npy"), 4)
    np.save(tmp_path / "order64.npy", np.zeros((2, 96), np.int64))
    assert_one_line_error(run(MLP, *out, "--epochs", "2", "--order", tmp_path / "order64.npy"), 4)
    (tmp_path / "file").write_text("x")
    assert_one_line_error(run(MLP, "--data", data, "--out", tmp_path / "file" / "sub"), 6)
    assert not list((tmp_path / "rec").glob("*.json"))


@pytest.mark.skipif(not BUILT or HAVE_GPU, reason="only where the twins are built and no GPU is visible")
def test_no_gpu_exits_3(tmp_path):
    write_points(tmp_path / "p.npy", 100)
    assert_one_line_error(run(LINREG, "--data", tmp_path / "p.npy", "--out", tmp_path / "rec"), 3)


# ----------------------------------------------------------------------------- GPU smoke
def load_records(d, phase):
    recs = {}
    for f in sorted(Path(d).glob(f"{phase}__*.json")):
        rec = json.loads(f.read_text())
        assert nbc.validate_record(rec) == "", f
        recs[rec["implementation"]] = rec
    return recs


@needs_gpu
def test_gpu_linreg_both_impls_validate(tmp_path):
    write_points(tmp_path / "p.npy", 10007)
    p = run(LINREG, "--data", tmp_path / "p.npy", "--epochs", "50", "--impl", "eager,graph", "--validate",
            "--warmup", "1", "--repeats", "2", "--tag", "smoke", "--out", tmp_path / "rec")
    assert p.returncode == 0, p.stdout + p.stderr
    recs = load_records(tmp_path / "rec", "libtorch_linreg")
    assert set(recs) == {"libtorch-eager", "libtorch-graph"}
    assert (tmp_path / "rec" / "libtorch_linreg__smoke-graph.json").exists()
    for rec in recs.values():
        assert rec["phase"] == "libtorch_linreg" and rec["workload"] == "linreg" and rec["status"] == "ok"
        assert rec["validation"]["performed"] and rec["validation"]["passed"]
        assert rec["timing"]["method"] == "cuda-events" and rec["timing"]["repeats"] == 2
        assert len(rec["loss"]["per_epoch"]) == 50
    assert recs["libtorch-graph"]["timing"]["capture_ms"] > 0
    assert recs["libtorch-eager"]["metrics"]["w"] == pytest.approx(recs["libtorch-graph"]["metrics"]["w"], rel=1e-5)


@needs_gpu
# fp16 with Adam on random pixels: no --validate (Adam normalises the near-zero fp16 gradients of
# noise, so the parameter change is off by more than the 5e-2 that real images stay within).
@pytest.mark.parametrize("optimizer,precision,check", [("adam", "fp32", True), ("sgd", "fp32", True),
                                                       ("sgd", "fp16", True), ("adam", "fp16", False)])
def test_gpu_mlp_eager_and_graph_agree(tmp_path, optimizer, precision, check):
    data = write_dataset(tmp_path / "data", n_train=256, n_test=64)
    init = write_init(tmp_path / "init", [784, 128, 64, 10])
    lr = "0.001" if optimizer == "adam" else "0.05"
    p = run(MLP, "--data", data, "--init", init, "--batch", "16", "--epochs", "2", "--dropout", "0",
            "--optimizer", optimizer, "--lr", lr, "--precision", precision, "--impl", "eager,graph",
            *(["--validate"] if check else []), "--warmup", "1", "--tag", "smoke", "--out", tmp_path / "rec")
    assert p.returncode == 0, p.stdout + p.stderr
    recs = load_records(tmp_path / "rec", "libtorch_mlp")
    assert set(recs) == {"libtorch-eager", "libtorch-graph"}
    for rec in recs.values():
        assert rec["phase"] == "libtorch_mlp" and rec["status"] == "ok"
        assert rec["validation"]["passed"] is (True if check else None)
        if check:
            assert set(rec["validation"]["errors"]) == {"loss", "gradients", "parameter_update"}
        assert rec["metrics"]["steps"] == 32 and len(rec["timing"]["per_epoch_ms"]) == 2
        assert rec["metrics"]["param_checksum"].startswith("fnv1a64:")
    a = recs["libtorch-eager"]["loss"]["per_step"]["first_exact"]
    b = recs["libtorch-graph"]["loss"]["per_step"]["first_exact"]
    tol = 1e-2 if precision == "fp16" else 1e-4
    assert a == pytest.approx(b, rel=tol)


@needs_gpu
def test_gpu_mlp_dropout_graph_runs(tmp_path):
    data = write_dataset(tmp_path / "data", n_train=256, n_test=64)
    p = run(MLP, "--data", data, "--batch", "32", "--epochs", "1", "--impl", "graph", "--out", tmp_path / "rec")
    assert p.returncode == 0, p.stdout + p.stderr
    rec = load_records(tmp_path / "rec", "libtorch_mlp")["libtorch-graph"]
    assert any("no --init" in n for n in rec["notes"]) and rec["config"]["dropout"] == 0.2
