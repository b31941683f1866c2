"""Tests for the PyTorch linear-regression twin (baselines/pytorch/linreg.py) and the shared twin
helpers (baselines/pytorch/common.py): run records in schema v1, the device slug rule, the
statistics, the train/test layout, the float64 reference and the data-file checks run without
torch (CI has none). Tests that train need torch (CPU) or a CUDA device and skip with the reason
when it is absent.
"""
import json
import math
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "baselines" / "pytorch"))
import common as nbc  # noqa: E402
import linreg  # noqa: E402

from torch_env import HAVE_CUDA, HAVE_TORCH, needs_cuda, needs_torch  # noqa: E402,F401


# ----------------------------------------------------------------------------- helpers
def make_points(n, seed=1):
    """A data set in the phases' layout (linreg_data.h): x_p = float(10 p / n), y = 0.7 x + 0.3 +
    0.5 z (numpy noise here, not cuRAND's), stored train points (p % 5 != 4) first, then test."""
    rng = np.random.default_rng(seed)
    p = np.arange(n, dtype=np.float64)
    x = (10.0 * p / n).astype(np.float32)
    y = (0.7 * x.astype(np.float64) + 0.3 + 0.5 * rng.standard_normal(n)).astype(np.float32)
    order = np.concatenate([np.nonzero(np.arange(n) % 5 != 4)[0], np.nonzero(np.arange(n) % 5 == 4)[0]])
    return np.ascontiguousarray(np.stack([x[order], y[order]], axis=1))


def minimal_record():
    rec = nbc.new_record("pytorch_linreg", "linreg", "pytorch-cpu", {"n": 7})
    rec["device"] = {"name": "Some CPU", "slug": "nvidia-h100-80gb-hbm3"}
    rec["timing"] = nbc.timing_json("host-steady-clock", "training", "loading", 1, [2.0, 1.0, 3.0])
    return rec


# ----------------------------------------------------------------------------- slug, stats
@pytest.mark.parametrize(
    "name,slug",
    [
        ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
        ("NVIDIA H200", "nvidia-h200"),
        ("NVIDIA A100-SXM4-40GB", "nvidia-a100-sxm4-40gb"),
        ("  Tesla  V100 -- (PCIe)/16GB  ", "tesla-v100-pcie-16gb"),
        ("Intel(R) Xeon(R) CPU @ 2.20GHz", "intel-r-xeon-r-cpu-2-20ghz"),
        ("", "unknown-device"),
        ("***", "unknown-device"),
        ("caf\u00e9 GPU", "caf-gpu"),
    ],
)
def test_device_slug_matches_the_cuda_side(name, slug):
    # Same cases as tests/host/test_device_info.cpp: twin records must land in the same folder.
    assert nbc.device_slug(name) == slug


def test_summarize_median_and_non_finite():
    s = nbc.summarize([3.0, 1.0, 2.0, 10.0])
    assert s["median"] == 2.5 and s["min"] == 1.0 and s["max"] == 10.0 and s["mean"] == 4.0
    assert s["samples"] == [3.0, 1.0, 2.0, 10.0]  # in the order taken
    assert nbc.summarize([5.0, 1.0, 3.0])["median"] == 3.0
    bad = nbc.summarize([1.0, float("nan"), 2.0])
    assert bad["max"] is None and bad["median"] == 2.0 and bad["samples"][1] is None
    assert nbc.summarize([])["samples"] == []


# ----------------------------------------------------------------------------- records
def test_new_record_has_every_required_field():
    rec = minimal_record()
    assert nbc.validate_record(rec) == ""
    for k in ("schema", "schema_version", "phase", "workload", "implementation", "config", "git", "utc_time",
              "host", "software", "status", "notes"):
        assert k in rec
    assert rec["schema"] == "cuda-notebook-run-record" and rec["schema_version"] == 1
    t = rec["utc_time"]
    assert len(t) == 20 and t[4] == "-" and t[10] == "T" and t.endswith("Z")
    assert rec["timing"]["repeats"] == 3 and rec["timing"]["total_ms"]["median"] == 2.0


def test_validate_record_names_the_problem():
    rec = minimal_record()
    del rec["device"]
    assert "device" in nbc.validate_record(rec)
    rec = minimal_record()
    rec["schema_version"] = 2
    assert "schema_version" in nbc.validate_record(rec)
    rec = minimal_record()
    rec["status"] = "fine"
    assert "status" in nbc.validate_record(rec)


def test_write_record_atomic_path_and_content(tmp_path):
    rec = minimal_record()
    rec["metrics"] = {"w": float("nan")}  # not finite: must become null, not NaN
    rec["metrics"]["w"] = nbc.finite_or_null(rec["metrics"]["w"])
    path = nbc.write_record(rec, str(tmp_path / "recs"), "ignored-slug", "pytorch_linreg", "headline-eager")
    assert path == str(tmp_path / "recs" / "pytorch_linreg__headline-eager.json")
    back = json.loads(Path(path).read_text())
    assert back["metrics"]["w"] is None and back["phase"] == "pytorch_linreg"
    assert sorted(os.listdir(tmp_path / "recs")) == ["pytorch_linreg__headline-eager.json"]  # no temp left
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_write_record_default_folder_is_profiles_slug(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = nbc.write_record(minimal_record(), "", "nvidia-h100-80gb-hbm3", "pytorch_linreg", "t")
    assert path == os.path.join("profiles", "nvidia-h100-80gb-hbm3", "pytorch_linreg__t.json")
    assert (tmp_path / path).is_file()


def test_write_record_refuses_bad_names_invalid_records_and_unwritable_dirs(tmp_path):
    with pytest.raises(nbc.NbError) as e:
        nbc.write_record(minimal_record(), str(tmp_path), "s", "pytorch_linreg", "a/b")
    assert e.value.code == nbc.EXIT_OUTPUT
    bad = minimal_record()
    del bad["timing"]
    with pytest.raises(nbc.NbError):
        nbc.write_record(bad, str(tmp_path), "s", "pytorch_linreg", "t")
    assert not list(tmp_path.iterdir())
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(nbc.NbError) as e:
        nbc.write_record(minimal_record(), str(blocker / "sub"), "s", "pytorch_linreg", "t")
    assert e.value.code == nbc.EXIT_OUTPUT and str(blocker) in str(e.value)


def test_existing_record_is_replaced_whole(tmp_path):
    first = minimal_record()
    first["notes"] = ["first"]
    p = nbc.write_record(first, str(tmp_path), "s", "pytorch_linreg", "t")
    second = minimal_record()
    second["notes"] = ["second"]
    nbc.write_record(second, str(tmp_path), "s", "pytorch_linreg", "t")
    assert json.loads(Path(p).read_text())["notes"] == ["second"]


def test_kernel_summary_from_a_profiler_trace():
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k1", "dur": 2.0, "args": {"grid": [4, 1, 1], "block": [256, 1, 1]}},
            {"ph": "X", "cat": "kernel", "name": "k1", "dur": 4.0, "args": {}},
            {"ph": "X", "cat": "kernel", "name": "k2", "dur": 10.0, "args": {}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "dur": 50.0},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "dur": 1.5, "args": {"bytes": 64}},
            {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "dur": 0.5, "args": {"bytes": 8}},
        ]
    }
    ks = nbc.kernel_summary_from_chrome_trace(trace)
    assert [k["name"] for k in ks] == ["k2", "k1"]  # by total time
    k1 = ks[1]
    assert k1["calls"] == 2 and k1["total_ns"] == 6000 and k1["min_ns"] == 2000 and k1["max_ns"] == 4000
    assert k1["mean_ns"] == 3000 and k1["grid"] == [4, 1, 1] and k1["block"] == [256, 1, 1]
    mem = {m["kind"]: m for m in nbc.memcpy_summary_from_chrome_trace(trace)}
    assert mem["HtoD"]["bytes"] == 64 and mem["HtoD"]["total_ns"] == 1500 and mem["memset"]["calls"] == 1


# ----------------------------------------------------------------------------- layout, reference
def test_split_counts_match_the_storage_rule():
    # linreg_data.h: test points are the original indices p % 5 == 4 (p < n).
    for n in list(range(1, 200)) + [999983, 5000001]:
        test = sum(1 for p in range(n) if p % 5 == 4) if n < 200 else len(range(4, n, 5))
        assert linreg.linreg_test_count(n) == test
        assert linreg.linreg_train_count(n) == n - test
    assert linreg.linreg_train_count(1) == 1 and linreg.linreg_test_count(1) == 0
    assert linreg.linreg_train_count(5000000) == 4000000


def test_reference_matches_a_pointwise_float64_descent():
    pts = make_points(101)
    nt = linreg.linreg_train_count(101)
    x, y = pts[:nt, 0].astype(np.float64), pts[:nt, 1].astype(np.float64)
    w, b = linreg.f32(0.83), linreg.f32(0.7645)
    losses = []
    for _ in range(25):
        r = w * x + b - y
        losses.append(np.mean(r * r))
        w, b = w - 0.01 * np.mean(2 * r * x), b - 0.01 * np.mean(2 * r)
    rw, rb, rl = linreg.reference(pts[:nt, 0], pts[:nt, 1], 0.01, 25)
    assert abs(rw - w) < 1e-12 and abs(rb - b) < 1e-12
    assert np.allclose(rl, losses, rtol=1e-12, atol=0)
    assert rl[0] > rl[-1]  # it descends


def test_validate_passes_on_the_reference_and_fails_on_errors(capsys):
    pts = make_points(999)
    nt = linreg.linreg_train_count(999)
    w, b, losses = linreg.reference(pts[:nt, 0], pts[:nt, 1], 0.01, 50)
    test = linreg.mse64(pts[nt:, 0], pts[nt:, 1], w, b)
    good = {"w": w, "b": b, "loss": losses, "test_loss": test}
    v, ok = linreg.validate(pts, 0.01, 50, good)
    assert ok and v["passed"] and v["errors"]["w_rel"] == 0 and "test_loss_rel" in v["errors"]
    assert "PASS" in capsys.readouterr().out
    for bad in (
        dict(good, w=w * (1 + 2e-4)),
        dict(good, b=b * (1 - 2e-4)),
        dict(good, loss=losses[:-1] + [losses[-1] * 1.01]),
        dict(good, loss=[math.nan] + losses[1:]),
        dict(good, loss=losses[:-1]),
        dict(good, test_loss=test * 1.01),
    ):
        _, ok = linreg.validate(pts, 0.01, 50, bad)
        assert not ok


def test_load_points_rejects_what_phase1_would_not_write(tmp_path):
    good = tmp_path / "good.npy"
    np.save(good, make_points(7))
    assert linreg.load_points(str(good), 7).shape == (7, 2)
    assert linreg.load_points(str(good), None).shape == (7, 2)
    cases = {
        "missing.npy": None,
        "f64.npy": make_points(7).astype(np.float64),
        "shape.npy": np.zeros((7, 3), np.float32),
        "flat.npy": np.zeros(14, np.float32),
    }
    for name, arr in cases.items():
        if arr is not None:
            np.save(tmp_path / name, arr)
        with pytest.raises(nbc.NbError) as e:
            linreg.load_points(str(tmp_path / name), None)
        assert e.value.code == nbc.EXIT_DATA and name in str(e.value)
    with pytest.raises(nbc.NbError) as e:
        linreg.load_points(str(good), 8)
    assert e.value.code == nbc.EXIT_DATA and "7 points" in str(e.value)
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"not a numpy file")
    with pytest.raises(nbc.NbError) as e:
        linreg.load_points(str(junk), None)
    assert e.value.code == nbc.EXIT_DATA


def test_record_tags_and_usage_errors(tmp_path):
    assert linreg.file_tag("headline", 5, "eager") == "headline-eager"
    assert linreg.file_tag("sweep-n{n}", 500, "graph") == "sweep-n500-graph"
    assert linreg.file_tag("x-{impl}-{n}", 7, "cpu") == "x-cpu-7"
    p = linreg.parser()
    for bad in (["--data", "f", "--impl", "tpu"], ["--data", "f", "--lr", "-1"], ["--data", "f", "--tag", "a/b"],
                ["--impl", "cpu"], ["--data", "f", "--n", "0"]):
        with pytest.raises(SystemExit) as e:
            p.parse_args(bad)
        assert e.value.code == nbc.EXIT_USAGE
    # Several sizes need {n} in the data path and the tag.
    rc = nbc.guarded_main(linreg.main, ["--data", str(tmp_path / "d.npy"), "--n", "5,7", "--impl", "cpu"])
    assert rc == nbc.EXIT_USAGE


def test_compiled_graph_flags():
    p = linreg.parser()
    a = p.parse_args(["--data", "f", "--impl", "eager,compiled-graph"])
    assert a.impl == ["eager", "compiled-graph"] and a.compile_mode == "auto"
    a = p.parse_args(["--data", "f", "--impl", "compiled-graph", "--compile-mode", "max-autotune-no-cudagraphs"])
    assert a.compile_mode == "max-autotune-no-cudagraphs"
    for bad in (["--data", "f", "--compile-mode", "reduce-overhead"], ["--data", "f", "--impl", "compiled_graph"]):
        with pytest.raises(SystemExit) as e:
            p.parse_args(bad)
        assert e.value.code == nbc.EXIT_USAGE
    # One replay trains every epoch: no loss.item() between epochs (refused before torch is needed).
    rc = nbc.guarded_main(linreg.main, ["--data", "f.npy", "--impl", "compiled-graph", "--sync-every-epoch"])
    assert rc == nbc.EXIT_USAGE


# ----------------------------------------------------------------------------- training (torch)
@needs_torch
def test_cpu_twin_trains_validates_and_writes_its_record(tmp_path):
    for n in (1, 7, 999):
        data = tmp_path / f"d{n}.npy"
        np.save(data, make_points(n, seed=n))
    rc = nbc.guarded_main(
        linreg.main,
        ["--data", str(tmp_path / "d{n}.npy"), "--n", "1,7,999", "--impl", "cpu", "--epochs", "200",
         "--validate", "--out", str(tmp_path / "recs"), "--tag", "t-n{n}", "--repeats", "2", "--warmup", "0"],
    )
    assert rc == 0
    for n in (1, 7, 999):
        rec = json.loads((tmp_path / "recs" / f"pytorch_linreg__t-n{n}-cpu.json").read_text())
        assert nbc.validate_record(rec) == ""
        assert rec["implementation"] == "pytorch-cpu" and rec["status"] == "ok"
        assert rec["validation"]["passed"] is True and len(rec["loss"]["per_epoch"]) == 200
        assert rec["timing"]["repeats"] == 2 and rec["timing"]["method"] == "host-steady-clock"
        assert rec["data"]["train"] == linreg.linreg_train_count(n)


@needs_torch
def test_sync_every_epoch_is_reported_as_such(tmp_path):
    np.save(tmp_path / "d.npy", make_points(50))
    rc = nbc.guarded_main(
        linreg.main,
        ["--data", str(tmp_path / "d.npy"), "--impl", "cpu", "--epochs", "5", "--sync-every-epoch",
         "--out", str(tmp_path), "--tag", "s", "--warmup", "0"],
    )
    assert rc == 0
    rec = json.loads((tmp_path / "pytorch_linreg__s-cpu-sync-every-epoch.json").read_text())
    assert rec["implementation"] == "pytorch-cpu-sync-every-epoch"


@needs_torch
def test_diverging_run_is_recorded_and_exits_7(tmp_path):
    np.save(tmp_path / "d.npy", make_points(50))
    rc = nbc.guarded_main(
        linreg.main,
        ["--data", str(tmp_path / "d.npy"), "--impl", "cpu", "--epochs", "400", "--lr", "5",
         "--out", str(tmp_path), "--tag", "div", "--warmup", "0"],
    )
    assert rc == nbc.EXIT_DIVERGED
    rec = json.loads((tmp_path / "pytorch_linreg__div-cpu.json").read_text())
    assert rec["status"] == "diverged"


@needs_cuda
@pytest.mark.parametrize("impl", ["eager", "graph", "compile", "compiled-graph"])
def test_gpu_twins_match_the_float64_reference(tmp_path, impl):
    np.save(tmp_path / "d.npy", make_points(100003))
    rc = nbc.guarded_main(
        linreg.main,
        ["--data", str(tmp_path / "d.npy"), "--impl", impl, "--validate", "--out", str(tmp_path), "--tag", "g",
         "--compile-mode", "default"],
    )
    assert rc == 0
    rec = json.loads((tmp_path / f"pytorch_linreg__g-{impl}.json").read_text())
    assert rec["validation"]["passed"] is True and rec["timing"]["method"] == "cuda-events"
    assert len(rec["loss"]["per_epoch"]) == 200 and all(math.isfinite(v) for v in rec["loss"]["per_epoch"])
    if impl == "compiled-graph":
        assert rec["config"]["compile_mode"] == "default"
        assert rec["timing"]["compile_ms"] > 0 and rec["timing"]["capture_ms"] > 0


def test_fresh_function_is_the_same_function_with_its_own_code_object():
    # torch.compile caches per code object: the compiled-graph twin compiles each inductor mode (and
    # each sweep size) from such a copy, so no mode or size reuses another's compilation.
    a = nbc.fresh_function(linreg.Trainer._epoch_math, "epoch_a")
    b = nbc.fresh_function(linreg.Trainer._epoch_math, "epoch_b")
    assert a.__code__ is not b.__code__ and a.__code__.co_name == "epoch_a"
    assert a.__code__.co_code == linreg.Trainer._epoch_math.__code__.co_code

    class T(np.ndarray):  # enough of a tensor for the epoch's arithmetic: w, b updated in place
        def sub_(self, d):
            self[...] -= d

    x, y = np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.5])
    w, bb = np.array(0.5).view(T), np.array(0.1).view(T)
    loss = a(w, bb, x, y, 0.1)
    r = 0.5 * x + 0.1 - y
    assert loss == pytest.approx((r * r).mean())
    assert float(w) == pytest.approx(0.5 - 0.1 * 2 * (r * x).mean()) and float(bb) == pytest.approx(0.1 - 0.1 * 2 * r.mean())


def fp32_run(pts, lr, epochs):
    """Full-batch gradient descent in float32 arithmetic, as the twins and the phases compute it."""
    nt = linreg.linreg_train_count(pts.shape[0])
    x, y = pts[:nt, 0].astype(np.float32), pts[:nt, 1].astype(np.float32)
    w, b = np.float32(linreg.INIT_W), np.float32(linreg.INIT_B)
    losses = []
    for _ in range(epochs):
        r = w * x + b - y
        losses.append(float(np.mean(r * r, dtype=np.float32)))
        w = np.float32(w - np.float32(lr) * np.float32(2) * np.mean(r * x, dtype=np.float32))
        b = np.float32(b - np.float32(lr) * np.float32(2) * np.mean(r, dtype=np.float32))
    return {"w": float(w), "b": float(b), "loss": losses, "test_loss": math.nan}


def test_validate_judges_a_vanishing_loss_by_fp32_rounding():
    # n = 1 fits its one point exactly: the loss falls to ~1e-10, all fp32 rounding, and a 1e-3
    # relative tolerance alone failed a correct run (lr 0.025, as phase 3's --check runs it). The
    # floor of common/linreg_harness.h lets it pass; a loss off by more than rounding still fails.
    for n in (1,):
        pts = make_points(n, seed=n)
        nt = linreg.linreg_train_count(n)
        got = fp32_run(pts, 0.025, 200)
        ref_w, ref_b, ref_loss = linreg.reference(pts[:nt, 0], pts[:nt, 1], 0.025, 200)
        assert min(ref_loss) < 1e-8   # the point is fitted: the loss vanishes
        v, ok = linreg.validate(pts, 0.025, 200, got)
        assert ok, (n, v["errors"])
        late = dict(got, loss=got["loss"][1:] + got["loss"][-1:])  # every loss one epoch late
        assert not linreg.validate(pts, 0.025, 200, late)[1]
        off = dict(got, loss=[l + 1e-9 for l in got["loss"]])      # far above fp32 rounding of ~1e-10 losses
        assert not linreg.validate(pts, 0.025, 200, off)[1]


def test_laps_split_a_mode_into_its_parts_and_name_the_process_start(monkeypatch):
    """nbc.Laps: each lap closes the part since the previous one; line() names every part in order,
    their sum, and how long the process ran before the mode (Linux /proc)."""
    clock = iter([10.0, 12.5, 12.75, 20.0])
    laps = nbc.Laps("pytorch-eager")
    monkeypatch.setattr(laps, "_clock", lambda: next(clock))
    laps._t = next(clock)  # 10.0: the mode starts
    laps.lap("setup and compile")  # 2.5 s
    laps.lap("timed runs")  # 0.25 s
    laps.lap("record")  # 7.25 s
    assert [n for n, _ in laps.parts] == ["setup and compile", "timed runs", "record"]
    assert [s for _, s in laps.parts] == pytest.approx([2.5, 0.25, 7.25])
    line = laps.line()
    assert line.startswith("[pytorch-eager] wall 10.0 s: setup and compile 2.5, timed runs 0.2, record 7.2")
    age = nbc.process_age_s()
    if sys.platform.startswith("linux"):
        assert age is not None and 0.0 <= age < 86400.0
        assert "process started" in line
