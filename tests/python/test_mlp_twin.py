"""Tests for the PyTorch MLP twin (baselines/pytorch/mlp.py).

Without torch (CI): the IDX reader's strictness, the init/order hand-over files (including the ones
phase4_mlp and phase5_batched write, which they do before looking for a GPU), the schedule and
usage errors, the loss.per_step shape shared with the CUDA side, and the float64 reference
against finite differences. With torch: the twin's model equals the reference on one step (CPU,
float64). With a CUDA device: a short training run of every mode writing valid records.
"""
import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "baselines" / "pytorch"))
import common as nbc  # noqa: E402
import mlp  # noqa: E402

from idx_fixtures import idx_bytes, write_dataset  # noqa: E402
from torch_env import HAVE_CUDA, HAVE_TORCH, needs_cuda, needs_torch  # noqa: E402,F401


# ----------------------------------------------------------------------------- synthetic data


def code_of(argv):
    return nbc.guarded_main(mlp.main, argv)


# ----------------------------------------------------------------------------- pure helpers
def test_per_step_json_matches_the_cuda_shape():
    losses = [float(i) for i in range(250)]
    j = mlp.per_step_json(losses)
    assert j["every"] == 100 and j["reduce"] == "mean"
    assert j["first_exact"] == [float(i) for i in range(20)]
    assert j["values"] == [49.5, 149.5, 224.5]  # the last window holds 50 steps
    j = mlp.per_step_json([1.0, float("nan")])
    assert j["first_exact"] == [1.0, None] and j["values"] == [None]


def test_workload_inference():
    assert mlp.infer_workload("auto", "adam", [784, 128, 64, 10]) == "mlp_w1"
    assert mlp.infer_workload("auto", "sgd", [784, 128, 64, 10]) == "mlp_w2"
    assert mlp.infer_workload("auto", "adam", [784, 256, 10]) == "mlp_w2"
    assert mlp.infer_workload("mlp_batch_sweep", "adam", [784, 128, 64, 10]) == "mlp_batch_sweep"


def test_schedule_drops_the_partial_batch():
    assert mlp.schedule(60000, 32, 5, 0) == (1875, 9375, 5)
    assert mlp.schedule(60000, 8192, 2, 0) == (7, 14, 2)
    assert mlp.schedule(60000, 32, 5, 5000) == (1875, 5000, 3)
    with pytest.raises(nbc.NbError) as e:
        mlp.schedule(100, 101, 1, 0)
    assert e.value.code == nbc.EXIT_USAGE


# ----------------------------------------------------------------------------- IDX reader
def test_idx_reader_reads_and_refuses(tmp_path):
    d = write_dataset(tmp_path / "ok")
    tr_x, tr_y, te_x, te_y = mlp.load_dataset(str(d), "mnist")
    assert tr_x.shape == (100, 784) and tr_x.dtype == np.uint8 and te_y.shape == (30,)
    bad = tmp_path / "bad.gz"
    raw = idx_bytes("images", np.zeros((3, 784)))
    for payload, what in [
        (raw[:-1], "payload"),                       # truncated
        (raw + b"\0", "payload"),                    # trailing byte
        ((2049).to_bytes(4, "big") + raw[4:], "magic"),
        (raw[:8] + (27).to_bytes(4, "big") + raw[12:], "28x28"),
    ]:
        bad.write_bytes(gzip.compress(payload))
        with pytest.raises(nbc.NbError) as e:
            mlp.read_idx(str(bad), "images")
        assert e.value.code == nbc.EXIT_DATA and what in str(e.value)
    bad.write_bytes(gzip.compress(idx_bytes("labels", [1, 2, 10])))
    with pytest.raises(nbc.NbError) as e:
        mlp.read_idx(str(bad), "labels")
    assert "outside 0..9" in str(e.value)
    bad.write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(nbc.NbError) as e:
        mlp.read_idx(str(bad), "labels")
    assert e.value.code == nbc.EXIT_DATA


# ----------------------------------------------------------------------------- init / order files
def write_init(d, layers, rng):
    d.mkdir(parents=True, exist_ok=True)
    for l in range(len(layers) - 1):
        np.save(d / f"W{l}.npy", rng.standard_normal((layers[l + 1], layers[l])).astype(np.float32))
        np.save(d / f"b{l}.npy", rng.standard_normal(layers[l + 1]).astype(np.float32))


def test_init_files_are_checked(tmp_path):
    rng = np.random.default_rng(1)
    write_init(tmp_path / "i", [784, 30, 10], rng)
    init = mlp.load_init(str(tmp_path / "i"), [784, 30, 10])
    assert [w.shape for w, _ in init] == [(30, 784), (10, 30)]
    for layers in ([784, 31, 10], [784, 10]):
        with pytest.raises(nbc.NbError) as e:
            mlp.load_init(str(tmp_path / "i"), layers)
        assert e.value.code == nbc.EXIT_DATA
    np.save(tmp_path / "i" / "b1.npy", np.zeros(10, np.float64))
    with pytest.raises(nbc.NbError):
        mlp.load_init(str(tmp_path / "i"), [784, 30, 10])
    with pytest.raises(nbc.NbError):
        mlp.load_init(str(tmp_path / "missing"), [784, 30, 10])


def test_order_files_are_checked(tmp_path):
    n, B = 100, 8  # 12 steps per epoch, 4 images dropped each epoch
    perms = np.stack([np.random.default_rng(e).permutation(n) for e in range(3)]).astype(np.int32)
    np.save(tmp_path / "o.npy", perms)
    flat = mlp.load_order(str(tmp_path / "o.npy"), n, B, 3, 0)
    assert flat.shape == (3 * 12 * B,)
    assert (flat[: 12 * B] == perms[0, : 12 * B]).all() and (flat[12 * B : 24 * B] == perms[1, : 12 * B]).all()
    with pytest.raises(nbc.NbError):  # 4 epochs asked, 3 stored
        mlp.load_order(str(tmp_path / "o.npy"), n, B, 4, 0)
    np.save(tmp_path / "s.npy", np.arange(50 * B, dtype=np.int32) % n)
    assert mlp.load_order(str(tmp_path / "s.npy"), n, B, 1, 50).shape == (50 * B,)
    with pytest.raises(nbc.NbError):
        mlp.load_order(str(tmp_path / "s.npy"), n, B, 1, 51)
    np.save(tmp_path / "bad.npy", np.full((1, n), n, np.int32))
    with pytest.raises(nbc.NbError) as e:
        mlp.load_order(str(tmp_path / "bad.npy"), n, B, 1, 0)
    assert "outside" in str(e.value)
    np.save(tmp_path / "i64.npy", perms.astype(np.int64))
    with pytest.raises(nbc.NbError):
        mlp.load_order(str(tmp_path / "i64.npy"), n, B, 1, 0)


@pytest.mark.parametrize("phase", ["phase4_mlp", "phase5_batched"])
def test_cuda_side_hand_over_files_are_accepted(tmp_path, phase):
    """The phases write --save-init/--save-order before they look for a GPU, so this runs in CI."""
    exe = REPO / "build" / phase
    if not exe.exists():
        pytest.skip(f"build/{phase} not built (make {phase})")
    d = write_dataset(tmp_path / "data", n_train=100, n_test=30)
    layers = [784, 30, 20, 10]
    args = [str(exe), "--data", str(d), "--layers", ",".join(map(str, layers)), "--batch", "8", "--epochs", "2",
            "--save-init", str(tmp_path / "init"), "--save-order", str(tmp_path / "order.npy"), "--out",
            str(tmp_path / "rec"), "--seed", "7", "--no-cupti", "--warmup", "0"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 3), p.stderr  # 3: no CUDA device here, the files are written anyway
    init = mlp.load_init(str(tmp_path / "init"), layers)
    for (W, b), fan_in in zip(init, layers[:-1]):
        bound = 1 / math.sqrt(fan_in)
        assert np.abs(W).max() <= bound and np.abs(b).max() <= bound
        assert np.abs(W).max() > 0.9 * bound  # uniform over the whole interval
        assert abs(float(W.mean())) < 0.1 * bound
    order = np.load(tmp_path / "order.npy")
    assert order.shape == (2, 100) and order.dtype == np.int32
    for row in order:
        assert sorted(row.tolist()) == list(range(100))
    assert (order[0] != order[1]).any()
    flat = mlp.load_order(str(tmp_path / "order.npy"), 100, 8, 2, 0)
    assert flat.shape == (2 * 12 * 8,)
    # --steps: the flat order of exactly the images each step trains on, epochs in turn.
    args_s = [a for a in args] + ["--steps", "20", "--save-order", str(tmp_path / "steps.npy")]
    p = subprocess.run(args_s, capture_output=True, text=True, timeout=120)
    assert p.returncode in (0, 3), p.stderr
    s = np.load(tmp_path / "steps.npy")
    assert s.shape == (20 * 8,)
    assert (s[: 12 * 8] == order[0, : 12 * 8]).all() and (s[12 * 8 :] == order[1, : 8 * 8]).all()


def test_both_phases_write_the_same_order_and_init(tmp_path):
    exes = [REPO / "build" / p for p in ("phase4_mlp", "phase5_batched")]
    if not all(e.exists() for e in exes):
        pytest.skip("phase4_mlp and phase5_batched not both built")
    d = write_dataset(tmp_path / "data", n_train=64, n_test=10)
    for i, exe in enumerate(exes):
        subprocess.run([str(exe), "--data", str(d), "--batch", "16", "--epochs", "1", "--save-init",
                        str(tmp_path / f"init{i}"), "--save-order", str(tmp_path / f"o{i}.npy"), "--out",
                        str(tmp_path / "rec"), "--no-cupti", "--warmup", "0"], capture_output=True, timeout=120)
    assert (np.load(tmp_path / "o0.npy") == np.load(tmp_path / "o1.npy")).all()
    for name in ("W0.npy", "b0.npy", "W2.npy"):
        assert (np.load(tmp_path / "init0" / name) == np.load(tmp_path / "init1" / name)).all()


# ----------------------------------------------------------------------------- usage / data errors
def test_usage_and_data_errors_need_no_gpu(tmp_path):
    d = write_dataset(tmp_path / "data")
    assert code_of(["--data", str(d), "--layers", "100,10"]) == nbc.EXIT_USAGE
    assert code_of(["--data", str(d), "--layers", "784,20,9"]) == nbc.EXIT_USAGE
    assert code_of(["--data", str(d), "--dropout", "1"]) == nbc.EXIT_USAGE
    assert code_of(["--data", str(d), "--lr", "nan"]) == nbc.EXIT_USAGE
    assert code_of(["--data", str(d), "--impl", "tensorrt"]) == nbc.EXIT_USAGE
    assert code_of(["--data", str(d), "--bogus"]) == nbc.EXIT_USAGE
    assert code_of(["--data", str(d), "--batch", "101"]) == nbc.EXIT_USAGE
    assert code_of(["--data", str(tmp_path / "nothing")]) == nbc.EXIT_DATA
    assert code_of(["--data", str(d), "--init", str(tmp_path / "noinit")]) == nbc.EXIT_DATA
    assert code_of(["--data", str(d), "--order", str(tmp_path / "no.npy")]) == nbc.EXIT_DATA
    assert code_of(["--data", str(d), "--impl", "compiled-graph", "--graph-steps", "-1"]) == nbc.EXIT_USAGE
    assert code_of(["--data", str(d), "--impl", "compiled-graph", "--compile-mode", "fast"]) == nbc.EXIT_USAGE
    assert code_of(["--data", str(d), "--tf32", "--precision", "fp16"]) == nbc.EXIT_USAGE
    assert code_of(["--data", str(d), "--tf32", "--validate"]) == nbc.EXIT_USAGE
    if not HAVE_TORCH:
        assert code_of(["--data", str(d), "--out", str(tmp_path / "rec")]) == nbc.EXIT_NO_DEVICE
        assert code_of(["--data", str(d), "--impl", "compiled-graph"]) == nbc.EXIT_NO_DEVICE


def test_compiled_graph_flags():
    a = mlp.parser().parse_args(["--impl", "graph,compiled-graph", "--graph-steps", "75"])
    assert a.impl == ["graph", "compiled-graph"] and a.graph_steps == 75 and a.compile_mode == "auto"
    a = mlp.parser().parse_args(["--impl", "compiled-graph", "--compile-mode", "default"])
    assert a.graph_steps == 0 and a.compile_mode == "default"


# ----------------------------------------------------------------------------- the reference
def test_reference_step_is_gradient_descent_on_the_loss():
    """SGD: the parameter change is -lr * gradient; check it against central differences."""
    rng = np.random.default_rng(3)
    layers = [784, 7, 5, 10]
    params = [[rng.standard_normal((layers[l + 1], layers[l])) * 0.1, rng.standard_normal(layers[l + 1]) * 0.1]
              for l in range(3)]
    x = rng.random((6, 784))
    y = rng.integers(0, 10, 6)

    def loss_at(ps):
        return mlp.ref_step([[w.copy(), b.copy()] for w, b in ps], x, y, 0.0, "sgd", None)

    before = [[w.copy(), b.copy()] for w, b in params]
    lr = 0.5
    mlp.ref_step(params, x, y, lr, "sgd", None)
    for l, j, idx in [(0, 0, (3, 400)), (1, 0, (2, 4)), (2, 1, (7,)), (1, 1, (0,))]:
        g = -(params[l][j][idx] - before[l][j][idx]) / lr
        h = 1e-6
        plus = [[w.copy(), b.copy()] for w, b in before]
        minus = [[w.copy(), b.copy()] for w, b in before]
        plus[l][j][idx] += h
        minus[l][j][idx] -= h
        num = (loss_at(plus) - loss_at(minus)) / (2 * h)
        assert abs(g - num) <= 1e-6 * max(1.0, abs(num)), (l, j, idx, g, num)


def test_reference_adam_first_step_moves_by_lr():
    rng = np.random.default_rng(4)
    params = [[rng.standard_normal((10, 784)) * 0.05, np.zeros(10)]]
    before = params[0][0].copy()
    state = {"t": 0, "m": [[np.zeros((10, 784)), np.zeros(10)]], "v": [[np.zeros((10, 784)), np.zeros(10)]]}
    x = rng.random((4, 784)) + 0.1  # no zero pixel: every weight gets a gradient
    mlp.ref_step(params, x, rng.integers(0, 10, 4), 1e-3, "adam", state)
    step = np.abs(params[0][0] - before)
    assert np.allclose(step, 1e-3, rtol=1e-3)  # |g| >> eps: Adam's first step is lr * sign(g)


def simulated_twin(layers, batch, optimizer, lr, fault, seed=7, dtype=np.float32):
    """A twin step in float32 numpy (what the GPU twin does, rounding included), with one fault on
    purpose. Returns (initial flat params, step(k)) for mlp.validate_steps."""
    rng = np.random.default_rng(seed)
    P = [[(rng.standard_normal((layers[l + 1], layers[l])) * (1.0 / math.sqrt(layers[l]))).astype(dtype),
          (rng.standard_normal(layers[l + 1]) * 0.05).astype(dtype)] for l in range(len(layers) - 1)]
    m = [[np.zeros_like(W), np.zeros_like(b)] for W, b in P]
    v = [[np.zeros_like(W), np.zeros_like(b)] for W, b in P]
    initial = mlp.flatten_params(P)

    def step(k):
        x = rng.random((batch, layers[0])).astype(dtype)
        y = rng.integers(0, layers[-1], batch)
        acts = [x]
        for l, (W, b) in enumerate(P):
            z = acts[-1] @ W.T + b
            acts.append(np.maximum(z, 0).astype(dtype) if l + 1 < len(P) else z)
        z = acts[-1].astype(dtype)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        loss = float(np.mean(-np.log(p[np.arange(batch), y])))
        g = p.copy()
        g[np.arange(batch), y] -= 1
        g = (g / (batch if fault != "scale" else batch - 1)).astype(dtype)
        grads = [None] * len(P)
        for l in range(len(P) - 1, -1, -1):
            gb = g.sum(axis=0) if fault != "no_bias" or l != 0 else np.zeros(layers[l + 1], dtype)
            grads[l] = [(g.T @ acts[l]).astype(dtype), gb.astype(dtype)]
            if l > 0:
                g = ((g @ P[l][0]) * (acts[l] > 0)).astype(dtype)
        flat_grads = mlp.flatten_params(grads)
        rate = lr * (1.01 if fault == "lr_off" else 1.0)
        b2 = 0.99 if fault == "adam_beta2" else 0.999
        t = k + 1
        for l in range(len(P)):
            for j in range(2):
                gr = grads[l][j]
                if optimizer == "adam":
                    m[l][j] = (0.9 * m[l][j] + 0.1 * gr).astype(dtype)
                    v[l][j] = (b2 * v[l][j] + (1 - b2) * gr * gr).astype(dtype)
                    mh = m[l][j] / dtype(1 - 0.9**t)
                    vh = v[l][j] / dtype(1 - 0.999**t)
                    P[l][j] = (P[l][j] - dtype(rate) * mh / (np.sqrt(vh) + dtype(1e-8))).astype(dtype)
                else:
                    P[l][j] = (P[l][j] - dtype(rate) * gr).astype(dtype)
        return {"loss": loss, "x": x.astype(np.float64), "y": y, "grads": flat_grads, "params": mlp.flatten_params(P)}

    return initial, step


@pytest.mark.parametrize("layers,batch,optimizer,lr", [([784, 37, 10], 17, "adam", 1e-3),
                                                       ([784, 200, 200, 10], 100, "sgd", 0.01),
                                                       ([50, 12, 3], 1, "sgd", 0.05)])
def test_validate_steps_passes_a_correct_twin_at_awkward_shapes(layers, batch, optimizer, lr):
    initial, step = simulated_twin(layers, batch, optimizer, lr, fault=None)
    errors, tols, ok = mlp.validate_steps(step, layers, batch, False, optimizer, lr, initial, 3)
    assert ok, (errors, tols)
    assert set(errors) == {"loss", "gradients", "parameter_update"}
    # the tolerances are the shape's: 2 u (sum sqrt fan-in + sum sqrt fan-out above layer 0 + sqrt B)
    t = mlp.mlp_tolerances(layers, batch, False)
    assert tols["gradients"] == pytest.approx(2 * 2.0**-24 * t["reductions"])
    assert 1e-7 < tols["gradients"] < 1e-4


@pytest.mark.parametrize("fault,optimizer,broken", [("scale", "sgd", "gradients"), ("no_bias", "adam", "gradients"),
                                                    ("lr_off", "sgd", "parameter_update"),
                                                    ("adam_beta2", "adam", "parameter_update")])
def test_validate_steps_catches_a_broken_twin(fault, optimizer, broken):
    layers, batch, lr = [784, 37, 10], 33, (1e-3 if optimizer == "adam" else 0.01)
    initial, step = simulated_twin(layers, batch, optimizer, lr, fault=fault)
    errors, tols, ok = mlp.validate_steps(step, layers, batch, False, optimizer, lr, initial, 3)
    assert not ok
    assert errors[broken] > tols[broken], (errors, tols)


def test_mlp_tolerances_match_the_cuda_side_formula():
    t32 = mlp.mlp_tolerances([784, 128, 64, 10], 32, False)
    want = math.sqrt(32) + math.sqrt(784) + math.sqrt(128) + math.sqrt(64) + math.sqrt(64) + math.sqrt(10)
    assert t32["reductions"] == pytest.approx(want)
    assert t32["loss"] == pytest.approx(2 * 2.0**-24 * want)
    t16 = mlp.mlp_tolerances([784, 128, 64, 10], 32, True)
    assert t16["loss"] == pytest.approx(2 * 2.0**-11 * want)
    assert t16["update_u"] == 2.0**-24


@needs_torch
def test_twin_model_matches_the_reference_one_step():
    import torch

    rng = np.random.default_rng(5)
    layers = [784, 13, 10]
    init = [(rng.standard_normal((13, 784)).astype(np.float32) * 0.05, rng.standard_normal(13).astype(np.float32) * 0.05),
            (rng.standard_normal((10, 13)).astype(np.float32) * 0.2, rng.standard_normal(10).astype(np.float32) * 0.2)]
    model, lins = mlp.build_model(torch, layers, 0.0, init, "cpu", dtype=torch.float64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = rng.random((9, 784))
    y = rng.integers(0, 10, 9)
    loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
    loss.backward()
    opt.step()
    ref = [[w.astype(np.float64), b.astype(np.float64)] for w, b in init]
    state = {"t": 0, "m": [[np.zeros_like(w), np.zeros_like(b)] for w, b in ref],
             "v": [[np.zeros_like(w), np.zeros_like(b)] for w, b in ref]}
    ref_loss = mlp.ref_step(ref, x, y, 1e-3, "adam", state)
    assert abs(float(loss) - ref_loss) <= 1e-12 * abs(ref_loss)
    for lin, (w, b) in zip(lins, ref):
        assert np.allclose(lin.weight.detach().numpy(), w, rtol=0, atol=1e-12)
        assert np.allclose(lin.bias.detach().numpy(), b, rtol=0, atol=1e-12)


@needs_cuda
def test_every_mode_trains_and_writes_a_valid_record(tmp_path):
    d = write_dataset(tmp_path / "data", n_train=256, n_test=40)
    rng = np.random.default_rng(6)
    layers = [784, 32, 16, 10]
    init_dir = tmp_path / "init"
    init_dir.mkdir()
    for l in range(3):
        bound = 1 / math.sqrt(layers[l])
        np.save(init_dir / f"W{l}.npy", rng.uniform(-bound, bound, (layers[l + 1], layers[l])).astype(np.float32))
        np.save(init_dir / f"b{l}.npy", rng.uniform(-bound, bound, layers[l + 1]).astype(np.float32))
    np.save(tmp_path / "order.npy", np.stack([rng.permutation(256) for _ in range(2)]).astype(np.int32))
    out = tmp_path / "rec"
    rc = code_of(["--data", str(d), "--layers", "784,32,16,10", "--batch", "16", "--epochs", "2", "--dropout", "0",
                  "--init", str(init_dir), "--order", str(tmp_path / "order.npy"), "--impl", "eager,graph",
                  "--out", str(out), "--tag", "t", "--warmup", "1", "--validate"])
    assert rc == 0
    recs = {}
    for impl in ("eager", "graph"):
        rec = json.loads((out / f"pytorch_mlp__t-{impl}.json").read_text())
        assert nbc.validate_record(rec) == ""
        assert rec["implementation"] == f"pytorch-{impl}" and rec["phase"] == "pytorch_mlp"
        assert rec["validation"]["passed"] is True
        assert rec["metrics"]["steps"] == 32 and rec["metrics"]["peak_device_memory_bytes"] > 0
        assert len(rec["loss"]["per_step"]["first_exact"]) == 20
        recs[impl] = rec
    a, b = recs["eager"]["loss"]["per_step"]["first_exact"], recs["graph"]["loss"]["per_step"]["first_exact"]
    assert max(abs(x - y) / abs(y) for x, y in zip(a, b)) <= 1e-5  # same init, order, no dropout
    # compiled-graph with 5 steps per graph: 16 steps an epoch = 3 replays + a 1-step remainder graph.
    rc = code_of(["--data", str(d), "--layers", "784,32,16,10", "--batch", "16", "--epochs", "2", "--dropout", "0",
                  "--init", str(init_dir), "--order", str(tmp_path / "order.npy"), "--impl", "compiled-graph",
                  "--graph-steps", "5", "--compile-mode", "default", "--out", str(out), "--tag", "t", "--warmup", "1"])
    assert rc == 0
    rec = json.loads((out / "pytorch_mlp__t-compiled-graph.json").read_text())
    assert nbc.validate_record(rec) == "" and rec["implementation"] == "pytorch-compiled-graph"
    assert rec["config"]["graph_steps"] == 5 and rec["config"]["compile_mode"] == "default"
    assert rec["timing"]["compile_ms"] > 0 and rec["timing"]["capture_ms"] > 0 and rec["metrics"]["steps"] == 32
    c = rec["loss"]["per_step"]["first_exact"]
    assert max(abs(x - y) / abs(y) for x, y in zip(c, a)) <= 1e-4  # inductor's sums differ from eager's in rounding
