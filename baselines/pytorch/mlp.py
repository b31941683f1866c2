#!/usr/bin/env python3
"""PyTorch twin of phases 4-5: the MNIST MLP, the same work done the way PyTorch users write it.

Same start, same order, same math as the CUDA phases:
  * the same initial weights: --init DIR reads W<l>.npy [out, in] and b<l>.npy [out] (float32),
    written by `phase4_mlp --save-init DIR` / `phase5_batched --save-init DIR`;
  * the same batch order: --order FILE reads the int32 .npy written by --save-order: [epochs, n]
    (one permutation per epoch; an epoch trains floor(n / batch) batches, the partial last batch is
    dropped as on the CUDA side) or, with --steps, [steps * batch];
  * the same model: Linear layers, ReLU after every hidden layer, inverted dropout (nn.Dropout, its
    own RNG: the masks differ from the CUDA side's, so losses are compared with --dropout 0), mean
    softmax cross-entropy, Adam (lr, betas 0.9/0.999, eps 1e-8) or plain SGD; pixels x/255;
  * fp32 matrix products without TF32 (--tf32 allows it: a comparison row, never the fp32 yardstick);
    --precision fp16: autocast to float16 around the forward and the loss (fp32 master weights, no
    loss scaling, as on the CUDA side).
Without --init/--order the twin draws its own (a note says so): only for experiments.

Implementations (--impl, comma-separated to run several in one process):
  eager                  plain eager PyTorch
  compile                the model through torch.compile (default mode); backward via AOTAutograd,
                         the optimizer eager; compilation happens before the warm-up and is timed
                         separately (timing.compile_ms)
  compile-max-autotune   the same with mode="max-autotune"
  graph                  the whole step (batch gather from the order on the device, forward,
                         backward, capturable Adam/SGD, loss into its slot, step counter += 1)
                         captured once with torch.cuda.graph and replayed every step
  compiled-graph         the fastest PyTorch we can write for this model: the step's forward (the
                         batch gathered from the order by a device-side step counter, bytes to
                         x/255, the model, dropout, autocast to fp16 where --precision says, the
                         loss into its slot, counter += 1) through torch.compile(fullgraph=True,
                         dynamic=False), its backward compiled by AOTAutograd, the fused
                         optimizer (Adam or SGD, fused=True, capturable), gradients set to None
                         each step (no zeroing kernels: the backward writes them afresh), and
                         --graph-steps K steps captured into one CUDA graph (default: the whole
                         epoch, up to 2000 steps; a shorter remainder gets its own graph).
                         --compile-mode picks inductor's mode (default | max-autotune-no-cudagraphs);
                         auto (the default) compiles both, times replays of each and keeps the
                         faster (config.compile_mode, timing.mode_trial_ms). Compilation, warm-up
                         and capture are outside the timed region (timing.compile_ms, capture_ms).
Data preloaded on the GPU (images as bytes, converted per batch), warm-up excluded (--warmup N:
N x 50 untimed steps, then parameters and optimizer state are restored), CUDA events around each
epoch's steps; evaluation and the once-per-epoch loss read-back are not timed. Step losses stay on
the device in a preallocated tensor. Peak device memory: torch.cuda.max_memory_allocated().

Records: profiles/<gpu-slug>/pytorch_mlp__<tag>-<impl>.json (or the tag with {impl} replaced),
phase "pytorch_mlp", implementation "pytorch-<impl>", schema v1 (profiles/README.md).
loss.per_step has the CUDA side's shape: {every: 100, reduce: "mean", first_exact: [steps 0..19],
values: [100-step means]}.

Exit codes as the CUDA programs (common/errors.h): 1 validation failed, 2 usage, 3 no CUDA device,
4 bad data/init/order file, 5 out of GPU memory, 6 output not writable, 7 diverged.
"""
from __future__ import annotations

import argparse
import gzip
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as nbc  # noqa: E402

PHASE = "pytorch_mlp"
IMPLS = ("eager", "compile", "compile-max-autotune", "graph", "compiled-graph")
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
MAX_GRAPH_STEPS = 2000
PROFILE_STEPS = 200
EXACT_STEPS, LOSS_WINDOW = 20, 100
EVAL_ROWS = 2048
WARMUP_STEPS = 50


# ----------------------------------------------------------------------------- data (no torch)
def read_idx(path, kind):
    """MNIST IDX (gzip or plain): images -> uint8 [count, 784], labels -> uint8 [count].
    Strict like common/idx.cpp: magic, dimensions, exact payload length, labels 0..9."""
    import numpy as np  # noqa: PLC0415

    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: no such file (run `make data`)") from None
    except OSError as e:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: cannot read: {e.strerror}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, ValueError) as e:
            raise nbc.NbError(nbc.EXIT_DATA, f"{path}: corrupt gzip stream: {e}") from None
    want_magic = 2051 if kind == "images" else 2049
    header = 16 if kind == "images" else 8
    if len(raw) < header:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: truncated header ({len(raw)} bytes)")
    magic = int.from_bytes(raw[0:4], "big")
    if magic != want_magic:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: bad magic {magic}, expected {want_magic} ({kind})")
    count = int.from_bytes(raw[4:8], "big")
    if kind == "images":
        rows, cols = int.from_bytes(raw[8:12], "big"), int.from_bytes(raw[12:16], "big")
        if (rows, cols) != (28, 28):
            raise nbc.NbError(nbc.EXIT_DATA, f"{path}: images are {rows}x{cols}, expected 28x28")
        need = count * 784
    else:
        need = count
    payload = len(raw) - header
    if payload != need:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: payload is {payload} bytes, the header says {need}")
    a = np.frombuffer(raw, dtype=np.uint8, offset=header)
    if kind == "images":
        return a.reshape(count, 784)
    if count and int(a.max()) > 9:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: label {int(a.max())} outside 0..9")
    return a


def load_dataset(d, name):
    if not os.path.isdir(d):
        raise nbc.NbError(nbc.EXIT_DATA, f"{d}: no such data directory (run `make data` to fetch {name})")
    tr_x = read_idx(os.path.join(d, "train-images-idx3-ubyte.gz"), "images")
    tr_y = read_idx(os.path.join(d, "train-labels-idx1-ubyte.gz"), "labels")
    te_x = read_idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"), "images")
    te_y = read_idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz"), "labels")
    if len(tr_x) != len(tr_y) or len(te_x) != len(te_y):
        raise nbc.NbError(nbc.EXIT_DATA, f"{d}: image and label counts disagree")
    return tr_x, tr_y, te_x, te_y


def load_npy(path, what):
    import numpy as np  # noqa: PLC0415

    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: no such file ({what})") from None
    except (OSError, ValueError) as e:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: not a readable .npy file: {e}") from None


def load_init(d, layers):
    """[(W [out,in] float32, b [out] float32)] from --init DIR; NbError(4) on any mismatch."""
    import numpy as np  # noqa: PLC0415

    out = []
    for l in range(len(layers) - 1):
        fan_in, fan_out = layers[l], layers[l + 1]
        W = load_npy(os.path.join(d, f"W{l}.npy"), "initial weights: phase4_mlp --save-init DIR")
        b = load_npy(os.path.join(d, f"b{l}.npy"), "initial biases: phase4_mlp --save-init DIR")
        if W.dtype != np.float32 or W.shape != (fan_out, fan_in):
            raise nbc.NbError(nbc.EXIT_DATA, f"{d}/W{l}.npy: expected float32 {(fan_out, fan_in)}, got {W.dtype} {W.shape}")
        if b.dtype != np.float32 or b.shape != (fan_out,):
            raise nbc.NbError(nbc.EXIT_DATA, f"{d}/b{l}.npy: expected float32 {(fan_out,)}, got {b.dtype} {b.shape}")
        if not (np.isfinite(W).all() and np.isfinite(b).all()):
            raise nbc.NbError(nbc.EXIT_DATA, f"{d}: layer {l} holds non-finite values")
        out.append((np.ascontiguousarray(W), np.ascontiguousarray(b)))
    extra = os.path.join(d, f"W{len(layers) - 1}.npy")
    if os.path.exists(extra):
        raise nbc.NbError(nbc.EXIT_DATA, f"{extra}: more layers in {d} than --layers has")
    return out


def schedule(n_train, batch, epochs, steps):
    """(steps_per_epoch, total_steps, epochs touched), as mlp_common.h's make_schedule."""
    if batch > n_train:
        raise nbc.NbError(nbc.EXIT_USAGE, f"--batch: {batch} exceeds the {n_train} training images")
    spe = n_train // batch
    total = steps if steps > 0 else spe * epochs
    return spe, total, (total + spe - 1) // spe


def load_order(path, n_train, batch, epochs, steps):
    """The flat image order of every step (int64 [total_steps * batch])."""
    import numpy as np  # noqa: PLC0415

    spe, total, n_epochs = schedule(n_train, batch, epochs, steps)
    a = load_npy(path, "batch order: phase4_mlp --save-order FILE")
    if a.dtype != np.int32:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: expected int32, got {a.dtype}")
    if steps > 0:
        if a.ndim != 1 or a.shape[0] < total * batch:
            raise nbc.NbError(nbc.EXIT_DATA, f"{path}: expected int32 [>= {total * batch}] for --steps {steps}, got {a.shape}")
        flat = a[: total * batch]
    else:
        if a.ndim != 2 or a.shape[0] < n_epochs or a.shape[1] != n_train:
            raise nbc.NbError(nbc.EXIT_DATA, f"{path}: expected int32 [>= {n_epochs}, {n_train}], got {a.shape}")
        flat = a[:n_epochs, : spe * batch].reshape(-1)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= n_train):
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: image index outside 0..{n_train - 1}")
    return flat.astype(np.int64)


def infer_workload(workload, optimizer, layers):
    if workload != "auto":
        return workload
    return "mlp_w1" if optimizer == "adam" and list(layers) == [784, 128, 64, 10] else "mlp_w2"


def per_step_json(losses):
    """The CUDA side's loss.per_step (nb::per_step_json, common/record.h)."""
    first = [float(v) for v in losses[:EXACT_STEPS]]
    means = []
    for i in range(0, len(losses), LOSS_WINDOW):
        w = [float(v) for v in losses[i : i + LOSS_WINDOW]]
        means.append(sum(w) / len(w))
    return {"every": LOSS_WINDOW, "reduce": "mean", "first_exact": nbc.finite_array(first), "values": nbc.finite_array(means)}


# ----------------------------------------------------------------------------- float64 reference
def ref_forward_backward(params, x, y):
    """The float64 reference's forward and backward pass (common/reference.h in numpy), dropout
    off. params: [[W, b]] float64 arrays. Returns (batch loss, [(dW, db)] per layer)."""
    import numpy as np  # noqa: PLC0415

    acts = [x]
    for l, (W, b) in enumerate(params):
        z = acts[-1] @ W.T + b
        acts.append(np.maximum(z, 0.0) if l + 1 < len(params) else z)
    z = acts[-1]
    mx = z.max(axis=1, keepdims=True)
    lse = mx + np.log(np.exp(z - mx).sum(axis=1, keepdims=True))
    B = x.shape[0]
    loss = float(np.mean(lse[:, 0] - z[np.arange(B), y]))
    g = np.exp(z - lse)
    g[np.arange(B), y] -= 1.0
    g /= B
    grads = [None] * len(params)
    for l in range(len(params) - 1, -1, -1):
        W, _ = params[l]
        grads[l] = (g.T @ acts[l], g.sum(axis=0))
        if l > 0:
            g = (g @ W) * (acts[l] > 0)
    return loss, grads


def ref_update(params, grads, lr, optimizer, adam_state):
    """The optimizer in float64, in place: SGD, or Adam (betas 0.9, 0.999, eps 1e-8) whose moments
    live in adam_state {"t", "m", "v"}."""
    import numpy as np  # noqa: PLC0415

    if optimizer == "adam":
        adam_state["t"] += 1
        t = adam_state["t"]
        for l, (gW, gb) in enumerate(grads):
            for j, gr in enumerate((gW, gb)):
                m, v = adam_state["m"][l][j], adam_state["v"][l][j]
                m *= 0.9
                m += 0.1 * gr
                v *= 0.999
                v += 0.001 * gr * gr
                p = params[l][j]
                p -= lr / (1 - 0.9**t) * m / (np.sqrt(v) / math.sqrt(1 - 0.999**t) + 1e-8)
    else:
        for l, (gW, gb) in enumerate(grads):
            params[l][0] -= lr * gW
            params[l][1] -= lr * gb


def ref_step(params, x, y, lr, optimizer, adam_state):
    """One step of the float64 reference, dropout off: params updated in place; returns the batch
    loss before the update."""
    loss, grads = ref_forward_backward(params, x, y)
    ref_update(params, grads, lr, optimizer, adam_state)
    return loss


def mlp_tolerances(layers, batch, half_operands):
    """The shape-aware tolerances of common/mlp/validate.h (mlp_tolerances), the same formula: a sum
    of n products rounded to unit roundoff u errs by about u*sqrt(n) relative; a step reduces over
    every layer's fan-in (forward), every fan-out above the first layer (backward data) and the
    batch (weight gradients), so loss and gradients get 2*u*(sum sqrt(K_l) + sum sqrt(N_l) +
    sqrt(B)), u = 2^-24 for fp32 operands, 2^-11 for fp16 ones (autocast). The update's tolerance,
    u*(8 + ||p||/||dp||) with the fp32 optimizer's u, is per step (validate_steps)."""
    u = 2.0**-11 if half_operands else 2.0**-24
    s = math.sqrt(batch)
    for l in range(len(layers) - 1):
        s += math.sqrt(layers[l])
        if l > 0:
            s += math.sqrt(layers[l + 1])
    return {"u": u, "reductions": s, "loss": 2 * u * s, "gradients": 2 * u * s, "update_u": 2.0**-24}


def flatten_params(params):
    """[[W, b]] -> one float64 vector in the reference's order (W0, b0, W1, b1, ...)."""
    import numpy as np  # noqa: PLC0415

    return np.concatenate([np.concatenate([np.asarray(W, np.float64).ravel(), np.asarray(b, np.float64).ravel()])
                           for W, b in params])


def unflatten_params(layers, flat):
    import numpy as np  # noqa: PLC0415

    out, at = [], 0
    for l in range(len(layers) - 1):
        nw, nb_ = layers[l + 1] * layers[l], layers[l + 1]
        out.append([np.array(flat[at:at + nw], np.float64).reshape(layers[l + 1], layers[l]),
                    np.array(flat[at + nw:at + nw + nb_], np.float64)])
        at += nw + nb_
    if at != len(flat):
        raise ValueError("unflatten_params: parameter count does not match the layers")
    return out


def validate_steps(step, layers, batch, half_operands, optimizer, lr, initial, k_steps):
    """common/mlp/validate.h's validate_steps for the twins. step(k) runs the twin's step k and
    returns {"loss": the batch loss it computed, "x": the float64 inputs [B, in], "y": the labels,
    "grads": its gradients, "params": its parameters after the step} (flat, reference order).
    Each step is judged on its own, the reference re-anchored at the twin's parameters before it:
    loss and gradients against the float64 forward/backward there, the parameter change against the
    float64 optimizer applied to the twin's own gradients (Adam's moments from them). Returns
    (errors, tolerances, passed) with keys loss, gradients, parameter_update."""
    import numpy as np  # noqa: PLC0415

    tol = mlp_tolerances(layers, batch, half_operands)
    before = np.asarray(initial, np.float64)
    shapes = unflatten_params(layers, before)
    adam = {"t": 0, "m": [[np.zeros_like(W), np.zeros_like(b)] for W, b in shapes],
            "v": [[np.zeros_like(W), np.zeros_like(b)] for W, b in shapes]}
    e_loss = e_grad = 0.0
    e_update, tol_update, worst = 0.0, 0.0, -1.0

    def worse(a, b):
        return math.nan if (a != a or b != b) else max(a, b)

    for k in range(k_steps):
        seen = step(k)
        at = unflatten_params(layers, before)
        ref_loss, ref_grads = ref_forward_backward(at, np.asarray(seen["x"], np.float64), np.asarray(seen["y"]))
        g_dev = unflatten_params(layers, np.asarray(seen["grads"], np.float64))
        expect = [[W.copy(), b.copy()] for W, b in at]
        ref_update(expect, [(W, b) for W, b in g_dev], lr, optimizer, adam)
        pe = flatten_params(expect)
        after = np.asarray(seen["params"], np.float64)
        d_exp, d_dev = pe - before, after - before
        dn = float(np.linalg.norm(d_exp))
        tu = tol["update_u"] * (8.0 + (float(np.linalg.norm(before)) / dn if dn > 0 else 0.0))
        loss = float(seen["loss"])
        el = abs(loss - ref_loss) / abs(ref_loss) if ref_loss else (0.0 if loss == 0 else math.inf)
        if not (math.isfinite(loss) and math.isfinite(ref_loss)):
            el = math.nan
        eg = rel_error(seen["grads"], flatten_params(ref_grads))
        eu = rel_error(d_dev, d_exp)
        print(f"  step {k}: loss {loss:.7f} (ref {ref_loss:.7f})  rel.err loss {el:.2e} grad {eg:.2e} "
              f"update {eu:.2e} (tol {tu:.1e})")
        e_loss, e_grad = worse(e_loss, el), worse(e_grad, eg)
        ratio = eu / tu if eu == eu else math.nan
        if worst == worst and (ratio != ratio or ratio > worst):
            worst, e_update, tol_update = ratio, eu, tu
        before = after
    errors = {"loss": e_loss, "gradients": e_grad, "parameter_update": e_update}
    tols = {"loss": tol["loss"], "gradients": tol["gradients"], "parameter_update": tol_update}
    passed = all(errors[k] == errors[k] and math.isfinite(errors[k]) and errors[k] <= tols[k] for k in tols)
    for k in tols:
        print(f"  validate {k:<22} rel.err {errors[k]:.3e}  (tol {tols[k]:.1e})  "
              f"{'ok' if math.isfinite(errors[k]) and errors[k] <= tols[k] else 'FAIL'}")
    return errors, tols, passed


def rel_error(a, b):
    import numpy as np  # noqa: PLC0415

    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return math.nan
    nb_ = float(np.linalg.norm(b))
    d = float(np.linalg.norm(a - b))
    return (0.0 if d == 0 else math.inf) if nb_ == 0 else d / nb_


# ----------------------------------------------------------------------------- the model (torch)
def build_model(torch, layers, dropout, init, device, dtype=None):
    nn = torch.nn
    mods = []
    for l in range(len(layers) - 1):
        lin = nn.Linear(layers[l], layers[l + 1])
        if l + 1 < len(layers) - 1:
            mods += [lin, nn.ReLU()] + ([nn.Dropout(dropout)] if dropout > 0 else [])
        else:
            mods.append(lin)
    model = nn.Sequential(*mods).to(device=device, dtype=dtype or torch.float32)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    if init is not None:
        with torch.no_grad():
            for lin, (W, b) in zip(linears, init):
                lin.weight.copy_(torch.from_numpy(W))
                lin.bias.copy_(torch.from_numpy(b))
    return model, linears


class Trainer:
    """One implementation: run() trains every step of the schedule from the initial state (which
    reset() restores in place, so CUDA graphs stay valid)."""

    def __init__(self, torch, impl, args, data, init, order):
        self.torch, self.impl, self.args = torch, impl, args
        dev = torch.device("cuda")
        tr_x, tr_y, te_x, te_y = data
        self.x = torch.from_numpy(tr_x.copy()).to(dev)  # uint8 [n, 784], resident
        self.y = torch.from_numpy(tr_y.astype("int64")).to(dev)
        self.tx = torch.from_numpy(te_x.copy()).to(dev)
        self.ty = torch.from_numpy(te_y.astype("int64")).to(dev)
        self.order = torch.from_numpy(order).to(dev)  # int64 [total_steps * batch]
        self.B = args.batch
        self.spe, self.total, self.n_epochs = schedule(tr_x.shape[0], args.batch, args.epochs, args.steps)
        self.model, self.linears = build_model(torch, args.layers, args.dropout, init, dev)
        self.init = [(lin.weight.detach().clone(), lin.bias.detach().clone()) for lin in self.linears]
        self.fp16 = args.precision == "fp16"
        self.loss_buf = torch.full((self.total,), math.nan, dtype=torch.float32, device=dev)
        capturable = impl in ("graph", "compiled-graph")
        fused = {"fused": True} if impl == "compiled-graph" else {"foreach": True}
        if args.optimizer == "adam":
            self.opt = torch.optim.Adam(self.model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                                        capturable=capturable, **fused)
        else:
            self.opt = torch.optim.SGD(self.model.parameters(), lr=args.lr, **fused)
        self.fwd = self.model
        self.compile_ms = self.capture_ms = None
        self.compile_mode = self.mode_trial_ms = None
        self.graph_steps = None
        if impl in ("compile", "compile-max-autotune"):
            mode = "max-autotune" if impl == "compile-max-autotune" else "default"
            self.fwd = torch.compile(self.model, mode=mode)
        self.ctr = torch.zeros(1, dtype=torch.int64, device=dev)
        self.arange = torch.arange(self.B, device=dev)
        if impl in ("compile", "compile-max-autotune"):
            t0 = time.perf_counter()
            self.reset()
            for s in range(3):
                self._step(s)
            torch.cuda.synchronize()
            self.compile_ms = (time.perf_counter() - t0) * 1e3
        if impl == "graph":
            self._capture()
        if impl == "compiled-graph":
            self._capture_compiled(args.compile_mode, args.graph_steps)
        self.reset()

    # -- one eager/compiled step: s is a Python int
    def _loss(self, xb, yb):
        F = self.torch.nn.functional
        if self.fp16:  # no weight-cast cache: required inside CUDA graphs, a no-op for one forward
            with self.torch.autocast("cuda", dtype=self.torch.float16, cache_enabled=False):
                return F.cross_entropy(self.fwd(xb), yb)
        return F.cross_entropy(self.fwd(xb), yb)

    def _step(self, s):
        idx = self.order[s * self.B : (s + 1) * self.B]
        xb = self.x.index_select(0, idx).float().div_(255.0)
        yb = self.y.index_select(0, idx)
        self.opt.zero_grad(set_to_none=True)
        loss = self._loss(xb, yb)
        loss.backward()
        self.opt.step()
        self.loss_buf[s] = loss.detach()

    # -- the graph step: everything indexed by the device-side counter
    def _graph_step_body(self):
        torch = self.torch
        idx = self.order.index_select(0, self.ctr * self.B + self.arange)
        xb = self.x.index_select(0, idx).float().div_(255.0)
        yb = self.y.index_select(0, idx)
        loss = self._loss(xb, yb)
        loss.backward()
        self.opt.step()
        self.loss_buf.index_copy_(0, self.ctr, loss.detach().float().view(1))
        self.ctr.add_(1)
        return loss

    def _capture(self):
        torch = self.torch
        t0 = time.perf_counter()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.opt.zero_grad(set_to_none=True)
                self._graph_step_body()
        torch.cuda.current_stream().wait_stream(side)
        self.opt.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._graph_step_body()
        torch.cuda.synchronize()
        self.capture_ms = (time.perf_counter() - t0) * 1e3

    # -- compiled-graph: the compiled forward (gather, model, loss, slot, counter) and K-step graphs
    def _compiled_forward(self):
        """Loss of the batch at the device-side step counter; writes it into its slot and advances
        the counter (both are inputs inductor mutates in place)."""
        torch = self.torch
        F = torch.nn.functional
        idx = self.order.index_select(0, self.ctr * self.B + self.arange)
        xb = self.x.index_select(0, idx).float() / 255.0
        yb = self.y.index_select(0, idx)
        if self.fp16:
            with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
                loss = F.cross_entropy(self.model(xb), yb)
        else:
            loss = F.cross_entropy(self.model(xb), yb)
        self.loss_buf.index_copy_(0, self.ctr, loss.detach().float().view(1))
        self.ctr.add_(1)
        return loss

    def _compiled_step(self, fn):
        self.opt.zero_grad(set_to_none=True)
        fn().backward()
        self.opt.step()

    def _chunk_lengths(self):
        """Every run_steps length this trainer will see: each epoch's steps and the warm-up's."""
        lens = {min(self.total, (e + 1) * self.spe) - e * self.spe for e in range(self.n_epochs)}
        lens.add(min(WARMUP_STEPS, self.total))
        if self.args.profile:
            lens.add(min(PROFILE_STEPS, self.total))
        return lens

    def _capture_compiled(self, compile_mode, graph_steps):
        import types  # noqa: PLC0415

        torch = self.torch
        k = graph_steps if graph_steps > 0 else min(self.spe, MAX_GRAPH_STEPS)
        k = max(1, min(k, self.total))
        self.graph_steps = k
        sizes = {k} | {n % k for n in self._chunk_lengths() if n % k}
        modes = COMPILE_MODES if compile_mode == "auto" else (compile_mode,)
        built, trial = {}, {}
        self.compile_ms = self.capture_ms = 0.0
        for mode in modes:
            fresh = nbc.fresh_function(Trainer._compiled_forward, f"mlp_forward_{mode.replace('-', '_')}")
            fn = torch.compile(types.MethodType(fresh, self), fullgraph=True, dynamic=False, mode=mode)
            t0 = time.perf_counter()
            self.reset()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # the first call compiles forward and backward
                    self._compiled_step(fn)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            graphs = {}
            for n in sorted(sizes, reverse=True):
                self.reset()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(n):
                        self._compiled_step(fn)
                graphs[n] = g
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            self.compile_ms += (t1 - t0) * 1e3
            self.capture_ms += (t2 - t1) * 1e3
            built[mode] = (fn, graphs)
            if len(modes) > 1:
                trial[mode] = nbc.replay_ms(graphs[k], self.reset) / k  # ms per step
        best = min(trial, key=trial.get) if trial else modes[0]
        self.compile_mode, self.mode_trial_ms = best, (trial or None)
        self.cg_fn, self.cg_graphs = built[best]  # the other mode's graphs are freed

    def reset(self):
        """Initial parameters, zero optimizer state, step 0: in place (graph-safe)."""
        torch = self.torch
        with torch.no_grad():
            for lin, (W, b) in zip(self.linears, self.init):
                lin.weight.copy_(W)
                lin.bias.copy_(b)
            for st in self.opt.state.values():
                for k, v in st.items():
                    if torch.is_tensor(v):
                        v.zero_()
            self.loss_buf.fill_(math.nan)
            self.ctr.zero_()
        self.model.train()

    def run_steps(self, s0, s1):
        if self.impl == "compiled-graph":  # the counter is at s0: every replay advances it
            q, r = divmod(s1 - s0, self.graph_steps)
            for _ in range(q):
                self.cg_graphs[self.graph_steps].replay()
            if r:
                self.cg_graphs[r].replay()
        elif self.impl == "graph":
            for _ in range(s0, s1):
                self.graph.replay()
        else:
            for s in range(s0, s1):
                self._step(s)

    def evaluate(self):
        torch = self.torch
        F = torch.nn.functional
        self.model.eval()
        correct, loss_sum, n = 0, 0.0, self.tx.shape[0]
        with torch.no_grad():
            for c0 in range(0, n, EVAL_ROWS):
                xb = self.tx[c0 : c0 + EVAL_ROWS].float().div_(255.0)
                yb = self.ty[c0 : c0 + EVAL_ROWS]
                if self.fp16:
                    with torch.autocast("cuda", dtype=torch.float16):
                        z = self.model(xb)
                else:
                    z = self.model(xb)
                z = z.float()
                loss_sum += float(F.cross_entropy(z, yb, reduction="sum"))
                correct += int((z.argmax(dim=1) == yb).sum())
        self.model.train()
        return loss_sum / n, 100.0 * correct / n


# ----------------------------------------------------------------------------- validation
def validate(torch, args, data, init, order, k_steps=3):
    """K steps of the twin's own model (eager, dropout off) judged by validate_steps against the
    float64 reference on the same batches, with the shape-aware tolerances of mlp_tolerances."""
    import numpy as np  # noqa: PLC0415

    tr_x, tr_y = data[0], data[1]
    dev = torch.device("cuda")
    model, linears = build_model(torch, args.layers, 0.0, init, dev)
    opt = (torch.optim.Adam(model.parameters(), lr=args.lr, foreach=True) if args.optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=args.lr, foreach=True))
    fp16 = args.precision == "fp16"
    B = args.batch

    def flat(get):
        return flatten_params([(get(lin.weight), get(lin.bias)) for lin in linears])

    def host(t):
        return t.detach().double().cpu().numpy()

    def step(s):
        idx = order[s * B : (s + 1) * B]
        xs = tr_x[idx].astype(np.float32) / np.float32(255.0)
        ys = tr_y[idx].astype(np.int64)
        xb = torch.from_numpy(xs).to(dev)
        yb = torch.from_numpy(ys).to(dev)
        opt.zero_grad(set_to_none=True)
        if fp16:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
        else:
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        grads = flat(lambda p: host(p.grad))
        opt.step()
        return {"loss": float(loss), "x": xs.astype(np.float64), "y": ys, "grads": grads, "params": flat(host)}

    initial = flat(host)
    errors, tols, ok = validate_steps(step, args.layers, B, fp16, args.optimizer, args.lr, initial, k_steps)
    return {"performed": True, "passed": ok,
            "reference": "float64 numpy, dropout off, same batches; each step re-anchored at the twin's parameters",
            "errors": {k: nbc.finite_or_null(v) for k, v in errors.items()}, "tolerances": tols}, ok


# ----------------------------------------------------------------------------- CLI
int_list = nbc.int_list
impl_list = nbc.choice_list(IMPLS)


def number(lo=None, hi=None, positive=False, hi_open=False):
    def conv(s):
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got '{s}'") from None
        if not math.isfinite(v) or (positive and v <= 0) or (lo is not None and v < lo) or \
                (hi is not None and (v >= hi if hi_open else v > hi)):
            raise argparse.ArgumentTypeError(f"out of range: {s}")
        return v
    return conv


def integer(lo):
    def conv(s):
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got '{s}'") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {s}")
        return v
    return conv


def tag_arg(s):
    probe = s.replace("{impl}", "x")
    if not probe or any(not (c.isalnum() and c.isascii()) and c not in "._-" for c in probe) or probe in (".", ".."):
        raise argparse.ArgumentTypeError(f"may contain only letters, digits, '.', '_', '-' (and {{impl}}), got '{s}'")
    return s


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2, like nb::Cli
        raise nbc.NbError(nbc.EXIT_USAGE, message)


def parser():
    p = _Parser(prog="mlp.py", description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int_list, default=[784, 128, 64, 10], help="widths, first 784, last 10")
    p.add_argument("--batch", type=integer(1), default=32)
    p.add_argument("--epochs", type=integer(1), default=5)
    p.add_argument("--steps", type=integer(0), default=0, help="train this many batches instead of epochs (0 = epochs)")
    p.add_argument("--lr", type=number(positive=True), default=1e-3)
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--dropout", type=number(lo=0.0, hi=1.0, hi_open=True), default=0.2)
    p.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    p.add_argument("--dataset", choices=("mnist", "fashion-mnist"), default="mnist")
    p.add_argument("--data", default="", help="folder with the IDX files (default data/<dataset>)")
    p.add_argument("--workload", choices=("auto", "mlp_w1", "mlp_w2", "mlp_batch_sweep"), default="auto")
    p.add_argument("--init", default="", help="initial weights from phase4_mlp/phase5_batched --save-init DIR")
    p.add_argument("--order", default="", help="batch order from --save-order FILE")
    p.add_argument("--impl", type=impl_list, default=["eager"], help="eager|compile|compile-max-autotune|graph|compiled-graph, comma-separated")
    p.add_argument("--compile-mode", choices=("auto",) + COMPILE_MODES, default="auto",
                   help="compiled-graph: inductor mode; auto compiles both and keeps the faster (default auto)")
    p.add_argument("--graph-steps", type=integer(0), default=0,
                   help=f"compiled-graph: steps per CUDA graph (0 = the whole epoch, at most {MAX_GRAPH_STEPS})")
    p.add_argument("--tf32", action="store_true",
                   help="allow TF32 tensor-core matmuls (faster arithmetic, not fp32 numerics: software.tf32_matmul "
                        "says so and the report never takes such a run as the yardstick of an fp32 claim); fp32 only, "
                        "not with --validate")
    p.add_argument("--seed", type=int, default=42, help="torch seed (dropout masks; fallback init/order)")
    p.add_argument("--validate", action="store_true", help="3 steps against the float64 reference (dropout off), each judged at the twin's parameters with tolerances derived from the shape and precision (validate_steps)")
    p.add_argument("--out", default="", help="record directory (default profiles/<gpu-slug>)")
    p.add_argument("--tag", type=tag_arg, default="default")
    p.add_argument("--warmup", type=integer(0), default=1, help="N x 50 untimed steps, state restored after")
    p.add_argument("--repeats", type=integer(1), default=1, help="timed training runs (median)")
    p.add_argument("--profile", action="store_true", help="kernel summary from torch.profiler over 200 extra untimed steps")
    # Accepted for the shared vocabulary; they change nothing here (recorded in config).
    p.add_argument("--no-cupti", action="store_true", help="(accepted; the twin has no CUPTI tracer)")
    p.add_argument("--trace", default="", help="(accepted; use --profile)")
    p.add_argument("--deterministic", action="store_true", help="torch.use_deterministic_algorithms(True)")
    p.add_argument("--measure-peaks", action="store_true", help="(accepted; no effect)")
    return p


def check_args(args):
    if len(args.layers) < 2 or args.layers[0] != 784 or args.layers[-1] != 10:
        raise nbc.NbError(nbc.EXIT_USAGE, f"--layers: must start at 784 and end at 10, got {','.join(map(str, args.layers))}")
    if args.tf32 and args.precision != "fp32":
        raise nbc.NbError(nbc.EXIT_USAGE, "--tf32: TF32 matmuls replace fp32 ones; with --precision fp16 there are none")
    if args.tf32 and args.validate:
        raise nbc.NbError(nbc.EXIT_USAGE, "--tf32 with --validate: the validation's tolerances are fp32's, TF32 matmuls do not meet them")
    if not args.data:
        args.data = os.path.join("data", args.dataset)
    args.workload = infer_workload(args.workload, args.optimizer, args.layers)


def file_tag(tag, impl):
    return tag.replace("{impl}", impl) if "{impl}" in tag else f"{tag}-{impl}"


def run_impl(torch, args, impl, data, init, order, own_inputs):
    config = {k.replace("_", "-"): v for k, v in vars(args).items()}
    config["impl"] = impl
    tag = file_tag(args.tag, impl)
    config["record_tag"] = tag
    rec = nbc.new_record(PHASE, args.workload, f"pytorch-{impl}", config)
    rec["device"] = nbc.gpu_device_info()
    rec["software"]["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
    rec["notes"] += own_inputs
    torch.cuda.reset_peak_memory_stats()
    laps = nbc.Laps(f"pytorch-{impl}")
    tr = Trainer(torch, impl, args, data, init, order)
    laps.lap("setup and compile")
    if impl == "compiled-graph":
        rec["config"]["compile_mode_requested"] = args.compile_mode
        rec["config"]["compile_mode"] = tr.compile_mode  # the mode kept
        rec["config"]["graph_steps"] = tr.graph_steps
    spe, total = tr.spe, tr.total
    # Warm-up, then back to the initial state.
    for _ in range(args.warmup):
        tr.run_steps(0, min(WARMUP_STEPS, total))
        torch.cuda.synchronize()
        tr.reset()
    laps.lap("warm-up")
    totals = []
    diverged = ""
    for rep in range(args.repeats):
        tr.reset()
        per_epoch, epoch_loss, test_loss, test_acc, step_losses = [], [], [], [], []
        for e in range(tr.n_epochs):
            s0, s1 = e * spe, min(total, (e + 1) * spe)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            tr.run_steps(s0, s1)
            stop.record()
            stop.synchronize()
            per_epoch.append(start.elapsed_time(stop))
            ls = tr.loss_buf[s0:s1].cpu().tolist()  # the once-per-epoch read-back
            bad = [i for i, v in enumerate(ls) if not math.isfinite(v)]
            if bad:
                g = s0 + bad[0]
                diverged = f"training diverged: non-finite loss at epoch {e}, step {g - e * spe} (global step {g})"
                step_losses += ls[: bad[0] + 1]
                epoch_loss.append(math.nan)
                break
            step_losses += ls
            epoch_loss.append(sum(ls) / len(ls))
            tl, ta = tr.evaluate()
            test_loss.append(tl)
            test_acc.append(ta)
            print(f"[{impl}] epoch {e}: {per_epoch[-1]:.1f} ms  train loss {epoch_loss[-1]:.4f}  "
                  f"test loss {tl:.4f}  test acc {ta:.2f}%", flush=True)
        totals.append(sum(per_epoch))
        if diverged:
            break
    rec["timing"] = nbc.timing_json(
        "cuda-events",
        "per epoch: every training step (batch gathered on the device from the order, forward, backward, "
        "optimizer step, loss into its device slot)" + ("; one CUDA-graph replay per step" if impl == "graph" else "")
        + ("; one CUDA-graph replay per --graph-steps steps" if impl == "compiled-graph" else ""),
        "data loading and upload, model construction, torch.compile's compilation, graph capture, warm-up, "
        "the per-epoch loss read-back, evaluation",
        args.warmup, totals, per_epoch)
    med = rec["timing"]["total_ms"]["median"]
    rec["timing"]["per_step_ms"] = {"median": (med / len(step_losses)) if (med and step_losses) else None}
    if tr.compile_ms is not None:
        rec["timing"]["compile_ms"] = tr.compile_ms
    if tr.capture_ms is not None:
        rec["timing"]["capture_ms"] = tr.capture_ms
    if tr.mode_trial_ms is not None:
        rec["timing"]["mode_trial_ms"] = tr.mode_trial_ms  # ms per step of each mode's replay
    rec["loss"] = {"per_epoch": nbc.finite_array(epoch_loss), "test_per_epoch": nbc.finite_array(test_loss),
                   "per_step": per_step_json(step_losses)}
    rec["metrics"] = {
        "test_accuracy": test_acc[-1] if test_acc else None,
        "test_accuracy_per_epoch": test_acc,
        "train_loss": nbc.finite_or_null(epoch_loss[-1]) if epoch_loss else None,
        "peak_device_memory_bytes": int(torch.cuda.max_memory_allocated()),
        "samples_per_s": (len(step_losses) * args.batch / (med / 1e3)) if med else None,
        "steps": len(step_losses),
    }
    laps.lap("timed runs")
    rec["kernels"], rec["memcpy"], rec["ranges"], rec["trace_file"] = [], [], [], None
    if args.profile and not diverged:
        import tempfile  # noqa: PLC0415

        n = min(PROFILE_STEPS, total)
        with tempfile.TemporaryDirectory() as td:
            rec["kernels"], rec["memcpy"] = nbc.profile_run(lambda: tr.run_steps(0, n), os.path.join(td, "t.json"),
                                                            setup=tr.reset, record=rec, unit="step", units=n,
                                                            unit_ms=rec["timing"]["per_step_ms"]["median"])
        rec["notes"].append(f"kernels/memcpy: torch.profiler over {n} extra untimed steps (trace not kept)")
        laps.lap("profile")
    ok = nbc.settle_validation(rec, args.validate, lambda: validate(torch, args, data, init, order), diverged)
    laps.lap("validation")
    path = nbc.write_record(rec, args.out, rec["device"]["slug"], PHASE, tag)
    laps.lap("record")
    print(f"record: {path}")
    print(laps.line(), flush=True)
    if diverged:
        raise nbc.NbError(nbc.EXIT_DIVERGED, diverged)
    return nbc.EXIT_OK if ok else nbc.EXIT_VALIDATION


def main(argv=None):
    args = parser().parse_args(argv)
    check_args(args)
    # Everything that needs no GPU first (bad data, init, order: exit 4; bad flags: exit 2).
    data = load_dataset(args.data, args.dataset)
    spe, total, n_epochs = schedule(data[0].shape[0], args.batch, args.epochs, args.steps)
    init = load_init(args.init, args.layers) if args.init else None
    order = load_order(args.order, data[0].shape[0], args.batch, args.epochs, args.steps) if args.order else None
    torch = nbc.require_cuda()
    torch.backends.cuda.matmul.allow_tf32 = bool(args.tf32)  # fp32 numerics unless --tf32
    torch.backends.cudnn.allow_tf32 = bool(args.tf32)
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)
    own_inputs = []
    if init is None:
        own_inputs.append("no --init: PyTorch's own default initialisation (seeded), not the CUDA side's weights")
        _, lins = build_model(torch, args.layers, 0.0, None, "cpu")
        init = [(l.weight.detach().numpy().copy(), l.bias.detach().numpy().copy()) for l in lins]
    if order is None:
        import numpy as np  # noqa: PLC0415

        own_inputs.append("no --order: torch.randperm per epoch (seeded), not the CUDA side's order")
        g = torch.Generator().manual_seed(args.seed)
        n = data[0].shape[0]
        order = np.concatenate([torch.randperm(n, generator=g).numpy()[: spe * args.batch] for _ in range(n_epochs)])
        order = order[: total * args.batch].astype(np.int64)
    rc = nbc.EXIT_OK
    for impl in args.impl:
        try:
            r = run_impl(torch, args, impl, data, init, order, own_inputs)
        except torch.cuda.OutOfMemoryError as e:
            raise nbc.NbError(nbc.EXIT_OUT_OF_MEMORY, f"out of GPU memory: {str(e).splitlines()[0]}") from None
        rc = rc or r
        torch.cuda.empty_cache()
    return rc


if __name__ == "__main__":
    sys.exit(nbc.guarded_main(main))
