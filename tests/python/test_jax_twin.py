"""Tests for the JAX twins (baselines/jax: linreg.py, mlp.py, jaxtwin.py).

Without JAX (CI): usage errors and bad files exit with their documented codes before JAX is needed,
the jax.profiler trace parser and the time account it feeds, XLA's kernel names in the shared kernel
classes. With JAX on a CPU: the twins' arithmetic on tiny awkward shapes against the float64
reference (linreg over 200 epochs; the MLP's steps through the PyTorch twin's validate_steps), the
three MLP modes giving the same losses, and a broken optimizer failing that validation.
"""
import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "baselines" / "jax"))
import jaxtwin  # noqa: E402

nbc = jaxtwin.nbc

try:
    import jax  # noqa: F401
    import optax  # noqa: F401

    HAVE_JAX = True
except ImportError:
    HAVE_JAX = False
needs_jax = pytest.mark.skipif(not HAVE_JAX, reason="JAX (with optax) is not installed here")


def load(name):
    spec = importlib.util.spec_from_file_location(f"jax_{name}", REPO / "baselines" / "jax" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


jlin, jmlp = load("linreg"), load("mlp")


def code_of(mod, argv):
    return nbc.guarded_main(mod.main, argv)


# ----------------------------------------------------------------------------- no JAX needed
def test_usage_errors_exit_2():
    assert code_of(jmlp, ["--layers", "784,10,11"]) == nbc.EXIT_USAGE
    assert code_of(jmlp, ["--impl", "jit-nope"]) == nbc.EXIT_USAGE
    assert code_of(jmlp, ["--xla", "fastest"]) == nbc.EXIT_USAGE
    assert code_of(jmlp, ["--params", "both"]) == nbc.EXIT_USAGE
    with pytest.raises(SystemExit) as e:  # argparse's own exit for linreg, as the PyTorch linreg twin
        jlin.main(["--data", "x.npy", "--impl", "graph"])
    assert e.value.code == 2


def test_bad_files_exit_4_before_jax(tmp_path):
    assert code_of(jlin, ["--data", str(tmp_path / "none.npy")]) == nbc.EXIT_DATA
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((5, 3), np.float32))
    assert code_of(jlin, ["--data", str(bad)]) == nbc.EXIT_DATA
    assert code_of(jmlp, ["--data", str(tmp_path / "nodata")]) == nbc.EXIT_DATA


def test_unknown_xla_preset_is_a_usage_error():
    with pytest.raises(nbc.NbError) as e:
        jaxtwin.configure("turbo")
    assert e.value.code == nbc.EXIT_USAGE


def test_file_tags_match_the_pytorch_twin():
    assert jlin.ptl.file_tag("headline", 5, "jit-run") == "headline-jit-run"
    assert jmlp.ptm.file_tag("w1-{impl}", "jit-epoch") == "w1-jit-epoch"


def test_xla_kernel_names_have_classes():
    assert nbc.kernel_class("gemm_fusion_dot_general_17") == "gemm"
    assert nbc.kernel_class("loop_add_fusion_3") == "elementwise"
    assert nbc.kernel_class("input_reduce_fusion_1") == "reduction"
    assert nbc.kernel_class("loop_dynamic_update_slice_fusion") == "copy"
    assert nbc.kernel_class("memcpy32_post") == "copy"
    # PyTorch's and ours unchanged
    assert nbc.kernel_class("triton_poi_fused_relu_0") == "elementwise"
    assert nbc.kernel_class("p5_update_pair") == "optimizer"


def synthetic_trace():
    """Two steps as jax.profiler's perfetto trace lays them out: kernels on a GPU stream line, the
    same time again on the GPU's XLA Ops line, host events on /host:CPU."""
    ev = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 14, "args": {"name": "Stream #14(Compute)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 99, "args": {"name": "XLA Ops"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 3, "args": {"name": "python3"}},
    ]
    t = 0.0
    for _ in range(2):
        for name, dur in (("gemm_fusion_dot_5", 4.0), ("loop_add_fusion", 1.0), ("memcpy32_post", 0.5)):
            ev.append({"ph": "X", "pid": 1, "tid": 14, "ts": t, "dur": dur, "name": name})
            ev.append({"ph": "X", "pid": 1, "tid": 99, "ts": t, "dur": dur, "name": name.upper()})
            t += dur + 1.0
        ev.append({"ph": "X", "pid": 7, "tid": 3, "ts": t, "dur": 2.0, "name": "cuLaunchKernel"})
        ev.append({"ph": "X", "pid": 7, "tid": 3, "ts": t, "dur": 5.0, "name": "PjitFunction(jit(step))"})
    return {"traceEvents": ev}


def test_trace_parser_counts_stream_lines_once(tmp_path):
    acc, ks, ms = jaxtwin.account_from_trace(synthetic_trace(), "step", 2, unit_ms=0.010)
    assert {k["name"] for k in ks} == {"gemm_fusion_dot_5", "loop_add_fusion"}  # not the XLA Ops copies
    assert acc["launches_per_unit"] == 2.0 and acc["copies_per_unit"] == 1.0
    assert acc["kernel_ms_per_unit"] == pytest.approx(0.005)
    assert acc["busy_ms_per_unit"] == pytest.approx(0.0055)
    assert acc["idle_ms_per_unit"] == pytest.approx(0.0045)
    assert acc["by_category_ms_per_unit"]["gemm"] == pytest.approx(0.004)
    assert acc["by_category_ms_per_unit"]["elementwise"] == pytest.approx(0.001)
    assert acc["launch_calls_per_unit"] == 1.0
    # the same from a gzipped file, as jax.profiler writes it
    import gzip

    p = tmp_path / "perfetto_trace.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(synthetic_trace(), f)
    acc2, _, _ = jaxtwin.account_from_trace(str(p), "step", 2, unit_ms=0.010)
    assert acc2 == acc


def test_account_gives_the_timed_unit_the_profiled_busy_share():
    # profiled run 0.008 ms a step against a timed 0.004: stretched 2x, so busy is halved (the same
    # share of the timed step) and never exceeds it; the raw value stays beside it
    acc, _, _ = jaxtwin.account_from_trace(synthetic_trace(), "step", 2, unit_ms=0.004, profiled_ms=0.016)
    assert acc["profiler_stretch"] == pytest.approx(2.0)
    assert acc["busy_ms_per_unit_profiled"] == pytest.approx(0.0055)
    assert acc["busy_ms_per_unit"] == pytest.approx(0.00275)
    assert acc["idle_ms_per_unit"] == pytest.approx(0.004 - 0.00275)
    # a profiled run no slower than the timed one keeps the measured busy time
    acc, _, _ = jaxtwin.account_from_trace(synthetic_trace(), "step", 2, unit_ms=0.010, profiled_ms=0.016)
    assert acc["busy_ms_per_unit"] == pytest.approx(0.0055)


def test_params_auto_picks_by_parameter_count():
    args = jmlp.parser().parse_args(["--layers", "784,128,64,10"])
    assert args.params == "auto"
    note = jmlp.resolve_params(args)
    assert args.params == "flat" and "flat" in note[0]
    args = jmlp.parser().parse_args(["--layers", "784,8192,8192,8192,10"])
    jmlp.resolve_params(args)
    assert args.params == "tree"
    args = jmlp.parser().parse_args(["--layers", "784,8192,8192,8192,10", "--params", "flat"])
    assert jmlp.resolve_params(args) == [] and args.params == "flat"


# ----------------------------------------------------------------------------- with JAX (CPU)
@pytest.fixture(scope="module")
def jax_cpu():
    if not HAVE_JAX:
        pytest.skip("JAX is not installed here")
    return jaxtwin.configure("default", need_gpu=False)


@needs_jax
@pytest.mark.parametrize("impl", jlin.IMPLS)
def test_linreg_matches_float64(jax_cpu, impl):
    rng = np.random.default_rng(3)
    n = 1003
    x = rng.standard_normal(n).astype(np.float32)
    pts = np.stack([x, (1.7 * x - 0.4 + 0.05 * rng.standard_normal(n)).astype(np.float32)], 1)
    tr = jlin.Trainer(jax_cpu, impl, pts, 0.01, 200)
    tr.reset()
    tr.run()
    got = tr.results()
    v, ok = jlin.ptl.validate(pts, 0.01, 200, got)
    assert ok, v["errors"]
    assert len(got["loss"]) == 200 and all(math.isfinite(val) for val in got["loss"])


def tiny_mlp_case(precision, optimizer, params):
    rng = np.random.default_rng(0)
    n = 301
    data = (rng.integers(0, 256, (n, 784), dtype=np.uint8), rng.integers(0, 10, n).astype(np.uint8),
            rng.integers(0, 256, (37, 784), dtype=np.uint8), rng.integers(0, 10, 37).astype(np.uint8))
    args = jmlp.parser().parse_args(["--layers", "784,30,17,10", "--batch", "7", "--epochs", "2", "--precision", precision,
                                     "--optimizer", optimizer, "--dropout", "0", "--params", params])
    jmlp.ptm.check_args(args)
    spe, total, n_epochs = jmlp.ptm.schedule(n, 7, 2, 0)
    init, order = jmlp.default_inputs(args, n, spe, total, n_epochs)
    return args, data, init, order, spe, total, n_epochs


@needs_jax
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("params", ["tree", "flat"])
def test_mlp_step_matches_float64(jax_cpu, precision, optimizer, params):
    args, data, init, order, *_ = tiny_mlp_case(precision, optimizer, params)
    v, ok = jmlp.validate(jax_cpu, args, data, init, order)
    assert ok, v["errors"]


@needs_jax
def test_mlp_modes_agree(jax_cpu):
    args, data, init, order, spe, total, n_epochs = tiny_mlp_case("fp32", "adam", "flat")
    losses = {}
    for impl in jmlp.IMPLS:
        tr = jmlp.Trainer(jax_cpu, impl, args, data, init, order)
        if impl == "jit-run":
            tr.run_steps(0, total)
        else:
            for e in range(n_epochs):
                tr.run_steps(e * spe, min(total, (e + 1) * spe))
        losses[impl] = np.array(tr.losses(0, total))
    assert np.isfinite(losses["jit-step"]).all()
    for impl in jmlp.IMPLS:
        np.testing.assert_array_equal(losses[impl], losses["jit-step"])


@needs_jax
def test_jit_epoch_compiles_one_executable_per_epoch_length(jax_cpu):
    # each scan length is a compilation of its own (about 4 s at W1 on an H200): the warm-up runs the
    # epochs' executables and the profiled run is one epoch, so nothing else is compiled
    args, data, init, order, spe, total, n_epochs = tiny_mlp_case("fp32", "sgd", "flat")
    args.profile = True
    tr = jmlp.Trainer(jax_cpu, "jit-epoch", args, data, init, order)
    assert set(tr.exes) == {spe} and tr.profile_steps() == spe
    assert jmlp.Trainer(jax_cpu, "jit-run", args, data, init, order).profile_steps() == total


@needs_jax
def test_a_broken_optimizer_fails_validation(jax_cpu, monkeypatch):
    args, data, init, order, *_ = tiny_mlp_case("fp32", "adam", "flat")
    real = jmlp.adam
    monkeypatch.setattr(jmlp, "adam", lambda lr, b1, b2, eps: real(lr * 1.001, b1, b2, eps))  # 0.1% too large a step
    v, ok = jmlp.validate(jax_cpu, args, data, init, order)
    assert not ok and v["errors"]["parameter_update"] > v["tolerances"]["parameter_update"]
