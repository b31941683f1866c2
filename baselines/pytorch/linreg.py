#!/usr/bin/env python3
"""PyTorch twin of phases 1-3: linear regression y = w*x + b by full-batch gradient descent.

Same work as the CUDA phases, so the time difference is the framework's cost:
  * the very same points: --data FILE.npy, written by `phase1_naive --save-data FILE.npy`
    (float32, shape (n, 2), columns x, y, in storage order: the first
    linreg_train_count(n) rows are the train split, the rest the test split);
  * the same float32 parameters, initial w = 0.83, b = 0.7645, lr 0.01, 200 epochs, MSE;
  * the same loss convention: epoch e computes the train loss at the parameters it starts with
    (loss[e]), then updates w and b.
The gradient is computed with autograd (loss.backward()) and applied by torch.optim.SGD (no
momentum): how a PyTorch user writes it. The per-epoch loss stays on the device (a slot of a
preallocated tensor) unless --sync-every-epoch, which calls loss.item() every epoch as the seed
study did (reported as implementation "pytorch-<impl>-sync-every-epoch").

Implementations (--impl, comma-separated for several in one process):
  cpu      the same code on CPU tensors, all cores (torch.set_num_threads(os.cpu_count()))
  eager    CUDA, eager mode
  compile  CUDA, the loss function through torch.compile (default mode; AOTAutograd compiles the
           backward too); the first call, which compiles, happens before the warm-up runs
  graph    CUDA, one whole epoch (forward, backward, SGD step, loss into its slot through a
           device-side epoch counter) captured once with torch.cuda.graph and replayed per epoch
  compiled-graph  the fastest PyTorch we can write for this model: one epoch's math (residual,
           loss, both gradient sums written out as an expert would for a two-parameter model, the
           in-place w, b update) through torch.compile(fullgraph=True, dynamic=False), and ALL
           epochs captured into ONE CUDA graph (the 200 losses stacked into their buffer by one
           kernel at the end): one replay trains the whole run. --compile-mode picks inductor's
           mode (default | max-autotune-no-cudagraphs); auto (the default) compiles both, times
           three replays of each and keeps the faster (config.compile_mode, timing.mode_trial_ms).
           Compilation, warm-up and capture are outside the timed region (timing.compile_ms,
           timing.capture_ms).
Timing as the CUDA phases: data resident on the device before the clock starts, warm-up runs
excluded, CUDA events around the training loop only (host clock for cpu), median of --repeats;
each run re-initialises w and b.

--n and --data may be lists/templates for a size sweep in one process: --n 500,5000
--data /tmp/linreg_n{n}.npy --tag sweep-n{n}. The record file is
profiles/<gpu-slug>/pytorch_linreg__<tag>-<impl>.json (<impl> = cpu, eager, ...,
eager-sync-every-epoch) unless the tag contains {impl}.

Measured (NVIDIA H200, make run FULL=1 at 8fea4d0, profiles/nvidia-h200/
pytorch_linreg__headline-<impl>.json), 5M points x 200 epochs: eager 55.1 ms (its runs vary
between processes: 101.3 ms in the sweep's 5M record of the same run), compile 118.0 ms, graph
26.4 ms, compiled-graph 2.75 ms (inductor's default mode kept; compilation and capture excluded),
cpu 20.5 s on a host whose cores three other benchmark lanes shared. On the H100
(profiles/nvidia-h100-80gb-hbm3/, 1c7cf79) compiled-graph takes 3.66 ms.

Exit codes as the CUDA programs (common/errors.h): 1 validation failed, 2 usage, 3 no CUDA
device, 4 bad data file, 5 does not fit in GPU memory, 6 output not writable, 7 diverged.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as nbc  # noqa: E402

PHASE = "pytorch_linreg"
INIT_W, INIT_B = 0.83, 0.7645
PARAM_TOL, LOSS_TOL = 1e-4, 1e-3
IMPLS = ("cpu", "eager", "compile", "graph", "compiled-graph")
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")


# ----------------------------------------------------------------------------- data layout
def linreg_test_count(n: int) -> int:
    """#{p < n : p % 5 == 4} = floor(n / 5) (common/linreg_data.h)."""
    return n // 5


def linreg_train_count(n: int) -> int:
    return n - linreg_test_count(n)


def f32(v: float) -> float:
    """v rounded to float32, as the model holds it."""
    import struct  # noqa: PLC0415

    return struct.unpack("f", struct.pack("f", v))[0]


def load_points(path: str, n_expected=None):
    """The (n, 2) float32 array phase1 --save-data wrote; NbError(4) on anything else."""
    import numpy as np  # noqa: PLC0415

    try:
        a = np.load(path, allow_pickle=False, mmap_mode="r")
    except FileNotFoundError:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: no such file (write it with phase1_naive --save-data)") from None
    except (OSError, ValueError) as e:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: not a readable .npy file: {e}") from None
    if a.dtype != np.float32 or a.ndim != 2 or a.shape[1] != 2 or a.shape[0] < 1:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: expected float32 of shape (n, 2), got {a.dtype} {a.shape}")
    if n_expected is not None and a.shape[0] != n_expected:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: holds {a.shape[0]} points, --n says {n_expected}")
    if not a.flags.c_contiguous:
        raise nbc.NbError(nbc.EXIT_DATA, f"{path}: expected C order")
    return a


# ----------------------------------------------------------------------------- float64 reference
def reference(x, y, lr: float, epochs: int, trajectory=None):
    """common/reference.h in numpy: float64 sums over the train split, then `epochs` exact
    gradient steps from the float32-rounded initial parameters. Returns (w, b, losses); appends
    the (w, b) each epoch starts with to `trajectory` when given."""
    import numpy as np  # noqa: PLC0415

    xd = np.asarray(x, dtype=np.float64)
    yd = np.asarray(y, dtype=np.float64)
    n = float(len(xd))
    sx, sy, sxx, sxy, syy = xd.sum(), yd.sum(), (xd * xd).sum(), (xd * yd).sum(), (yd * yd).sum()
    w, b = f32(INIT_W), f32(INIT_B)
    losses = []
    for _ in range(epochs):
        if trajectory is not None:
            trajectory.append((w, b))
        losses.append((w * w * sxx + 2 * w * b * sx + n * b * b - 2 * w * sxy - 2 * b * sy + syy) / n)
        gw = 2 * (w * sxx + b * sx - sxy) / n
        gb = 2 * (w * sx + n * b - sy) / n
        w -= lr * gw
        b -= lr * gb
    return w, b, losses


def loss_abs_floor(x, y, lr, trajectory, losses):
    """common/linreg_harness.h's linreg_loss_abs_floor for every epoch: where the loss vanishes (one
    point fitted exactly) it is all fp32 rounding, which no relative tolerance can judge. Each fp32
    residual is off by up to c·u·s (s = |w·x| + |b| + |y|, u = 2^-24, c = 4 + 1/(2·lr): the fp32
    parameters stop moving once a step is under half an ulp), so r² by <= 2|r|·δ + δ², averaged over
    the points with Cauchy-Schwarz: 2·c·u·sqrt(L·S2/n) + (c·u)²·S2/n."""
    import numpy as np  # noqa: PLC0415

    xd, yd = np.abs(np.asarray(x, np.float64)), np.abs(np.asarray(y, np.float64))
    n = float(len(xd))
    if n == 0:
        return [0.0] * len(losses)
    ax, ay, xx, yy, axy = xd.sum(), yd.sum(), (xd * xd).sum(), (yd * yd).sum(), (xd * yd).sum()
    cu = (4.0 + 0.5 / max(abs(lr), 1e-6)) * 2.0**-24
    out = []
    for (w, b), loss in zip(trajectory, losses):
        aw, ab = abs(w), abs(b)
        s2 = aw * aw * xx + n * ab * ab + yy + 2 * aw * ab * ax + 2 * aw * axy + 2 * ab * ay
        out.append(2 * cu * math.sqrt(max(loss, 0.0)) * math.sqrt(s2 / n) + cu * cu * s2 / n)
    return out


def mse64(x, y, w, b):
    import numpy as np  # noqa: PLC0415

    r = np.asarray(x, np.float64) * w + b - np.asarray(y, np.float64)
    return float(np.mean(r * r)) if len(r) else math.nan


def validate(points, lr, epochs, got):
    """The validation object (errors vs the float64 reference on the same points) and pass/fail."""
    n = points.shape[0]
    nt = linreg_train_count(n)
    traj = []
    w_ref, b_ref, loss_ref = reference(points[:nt, 0], points[:nt, 1], lr, epochs, traj)
    floors = loss_abs_floor(points[:nt, 0], points[:nt, 1], lr, traj, loss_ref)

    def rel(a, r):
        return abs(a - r) / abs(r) if r != 0 else (0.0 if a == r else math.inf)

    errors = {"w_rel": rel(got["w"], w_ref), "b_rel": rel(got["b"], b_ref)}
    if len(got["loss"]) != len(loss_ref):
        errors["max_loss_rel"] = math.inf
    else:
        worst = 0.0
        for a, r, fl in zip(got["loss"], loss_ref, floors):
            # relative to max(|ref|, floor / tolerance): passes within either bound (as the phases)
            e = abs(a - r) / max(abs(r), fl / LOSS_TOL) if (r or fl) else rel(a, r)
            worst = max(worst, e if e == e else math.inf)  # a NaN loss counts as an infinite error
        errors["max_loss_rel"] = worst
    tol = {"w_rel": PARAM_TOL, "b_rel": PARAM_TOL, "max_loss_rel": LOSS_TOL}
    if n - nt > 0:
        errors["test_loss_rel"] = rel(got["test_loss"], mse64(points[nt:, 0], points[nt:, 1], w_ref, b_ref))
        tol["test_loss_rel"] = LOSS_TOL
    ok = all(errors[k] <= tol[k] for k in tol)
    print(
        "validate (float64 reference, %d train / %d test points): %s -> %s"
        % (nt, n - nt, " ".join(f"{k}={v:.3e}" for k, v in errors.items()), "PASS" if ok else "FAIL")
    )
    return {
        "performed": True,
        "passed": ok,
        "reference": "float64 numpy over the same points",
        "errors": {k: nbc.finite_or_null(v) for k, v in errors.items()},
        "tolerances": tol,
        "reference_w": w_ref,
        "reference_b": b_ref,
    }, ok


# ----------------------------------------------------------------------------- training
class Trainer:
    """One implementation on one data set. run() = one training run (E epochs) from w0, b0;
    reset() = untimed re-initialisation before it."""

    def __init__(self, torch, impl, points, lr, epochs, sync_every_epoch, compile_mode="auto"):
        self.torch, self.impl, self.lr, self.epochs, self.sync = torch, impl, lr, epochs, sync_every_epoch
        dev = torch.device("cpu" if impl == "cpu" else "cuda")
        self.device = dev
        n = points.shape[0]
        nt = linreg_train_count(n)
        pts = torch.from_numpy(points)
        # Contiguous columns, resident on the device before any timing.
        self.x = pts[:nt, 0].contiguous().to(dev)
        self.y = pts[:nt, 1].contiguous().to(dev)
        self.xt = pts[nt:, 0].contiguous().to(dev)
        self.yt = pts[nt:, 1].contiguous().to(dev)
        # compiled-graph updates w, b in place inside the compiled function: plain tensors there.
        self.w = torch.tensor(INIT_W, dtype=torch.float32, device=dev, requires_grad=impl != "compiled-graph")
        self.b = torch.tensor(INIT_B, dtype=torch.float32, device=dev, requires_grad=impl != "compiled-graph")
        self.opt = torch.optim.SGD([self.w, self.b], lr=lr)
        self.loss_buf = torch.zeros(epochs, dtype=torch.float32, device=dev)
        self.synced = []
        self.compile_ms = None
        self.capture_ms = None
        self.compile_mode = None
        self.mode_trial_ms = None
        self.loss_fn = self._loss
        if impl == "compile":
            # Static shapes, compiled afresh for each data set: in one process that sees several
            # sizes, torch.compile's default would recompile with a symbolic n from the second size
            # on, and its reductions over a symbolic n ran ~14x slower than eager at 100M points
            # (measured on an H100; the sweep records of that run say compile_dynamic "auto").
            torch._dynamo.reset()
            self.loss_fn = torch.compile(self._loss, dynamic=False)
            self._prime()
        if impl == "graph":
            self._capture()
        if impl == "compiled-graph":
            self._capture_compiled(compile_mode)

    @staticmethod
    def _loss(w, b, x, y):
        return ((w * x + b - y) ** 2).mean()

    @staticmethod
    def _epoch_math(w, b, x, y, lr):
        """One epoch of full-batch gradient descent, written out: loss at the starting (w, b),
        dL/dw = 2 mean(r x), dL/db = 2 mean(r), then the in-place SGD step. Inductor fuses the
        three sums into one pass over x and y and the update into its epilogue."""
        r = w * x + b - y
        loss = (r * r).mean()
        gw = 2.0 * (r * x).mean()
        gb = 2.0 * r.mean()
        w.sub_(lr * gw)
        b.sub_(lr * gb)
        return loss

    def _capture_compiled(self, compile_mode):
        """compile (each mode on its own copy of the function's code object, so the two modes and
        the sizes of a sweep never share dynamo's cache), warm up, capture every epoch into one
        graph; with compile_mode "auto" both modes, keeping the faster replay."""
        import time  # noqa: PLC0415

        torch = self.torch
        modes = COMPILE_MODES if compile_mode == "auto" else (compile_mode,)
        built, trial = {}, {}
        self.compile_ms = self.capture_ms = 0.0
        for mode in modes:
            fresh = nbc.fresh_function(self._epoch_math, f"linreg_epoch_{mode.replace('-', '_')}")
            fn = torch.compile(fresh, fullgraph=True, dynamic=False, mode=mode)
            t0 = time.perf_counter()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # the first call compiles
                    fn(self.w, self.b, self.x, self.y, self.lr)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            self.reset_params()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                losses = [fn(self.w, self.b, self.x, self.y, self.lr) for _ in range(self.epochs)]
                torch.stack(losses, out=self.loss_buf)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            self.compile_ms += (t1 - t0) * 1e3
            self.capture_ms += (t2 - t1) * 1e3
            built[mode] = (fn, graph, losses)
            if len(modes) > 1:
                trial[mode] = nbc.replay_ms(graph, self.reset_params)
        best = min(trial, key=trial.get) if trial else modes[0]
        self.compile_mode = best
        self.mode_trial_ms = trial or None
        self.cg_fn, self.graph, self.cg_losses = built[best]  # the loser's graph is freed
        self.reset_params()

    def reset_params(self):
        with self.torch.no_grad():
            self.w.fill_(INIT_W)
            self.b.fill_(INIT_B)

    def reset(self):
        self.reset_params()
        with self.torch.no_grad():
            self.loss_buf.fill_(math.nan)
        if self.impl == "graph":
            self.ctr.zero_()
        self.synced = []

    def _prime(self):
        """torch.compile compiles on the first call: one untimed epoch, its time recorded."""
        import time  # noqa: PLC0415

        t0 = time.perf_counter()
        self.reset()
        self._epoch(0)
        self.torch.cuda.synchronize()
        self.compile_ms = (time.perf_counter() - t0) * 1e3

    def _epoch(self, e):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.w, self.b, self.x, self.y)
        loss.backward()
        self.opt.step()
        self.loss_buf[e] = loss.detach()  # stays on the device
        if self.sync:
            self.synced.append(loss.item())  # the host waits for the GPU here

    def _capture(self):
        """PyTorch's whole-network capture recipe: warm up on a side stream, then capture one
        epoch (forward, backward, SGD step, loss into loss_buf[ctr], ctr += 1)."""
        import time  # noqa: PLC0415

        torch = self.torch
        t0 = time.perf_counter()
        self.ctr = torch.zeros(1, dtype=torch.long, device=self.device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.opt.zero_grad(set_to_none=True)
                loss = self._loss(self.w, self.b, self.x, self.y)
                loss.backward()
                self.opt.step()
        torch.cuda.current_stream().wait_stream(side)
        self.opt.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_loss = self._loss(self.w, self.b, self.x, self.y)
            self.static_loss.backward()
            self.opt.step()
            self.loss_buf.index_copy_(0, self.ctr, self.static_loss.detach().view(1))
            self.ctr.add_(1)
        torch.cuda.synchronize()
        self.capture_ms = (time.perf_counter() - t0) * 1e3

    def run(self):
        if self.impl == "compiled-graph":
            self.graph.replay()  # every epoch
        elif self.impl == "graph":
            for _ in range(self.epochs):
                self.graph.replay()
                if self.sync:
                    self.synced.append(self.static_loss.item())
        else:
            for e in range(self.epochs):
                self._epoch(e)

    def results(self):
        torch = self.torch
        with torch.no_grad():
            test = ((self.w * self.xt + self.b - self.yt) ** 2).mean().item() if self.xt.numel() else math.nan
        return {
            "w": float(self.w.detach().cpu()),
            "b": float(self.b.detach().cpu()),
            "loss": [float(v) for v in self.loss_buf.cpu().tolist()],
            "test_loss": test,
        }


# ----------------------------------------------------------------------------- CLI
int_list = nbc.int_list
impl_list = nbc.choice_list(IMPLS)


def positive_float(s):
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{s}'") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be finite and > 0, got {s}")
    return v


def nonneg_int(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{s}'") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {s}")
    return v


def tag_arg(s):
    probe = s.replace("{n}", "0").replace("{impl}", "x")
    if not probe or any(not (c.isalnum() and c.isascii()) and c not in "._-" for c in probe) or probe in (".", ".."):
        raise argparse.ArgumentTypeError(f"may contain only letters, digits, '.', '_', '-' (and {{n}}, {{impl}}), got '{s}'")
    return s


def parser():
    p = argparse.ArgumentParser(prog="linreg.py", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int_list, default=None, help="points (list: a sweep); default: as many as --data holds")
    p.add_argument("--data", required=True, help="points from phase1_naive --save-data ({n} is replaced by each --n)")
    p.add_argument("--epochs", type=int_list, default=[200], help="full-batch gradient-descent epochs (default 200)")
    p.add_argument("--lr", type=positive_float, default=0.01, help="learning rate (default 0.01)")
    p.add_argument("--seed", type=int, default=42, help="recorded only: the points come from --data (default 42)")
    p.add_argument("--impl", type=impl_list, default=["eager"], help="cpu|eager|compile|graph|compiled-graph, comma-separated")
    p.add_argument("--compile-mode", choices=("auto",) + COMPILE_MODES, default="auto",
                   help="compiled-graph: inductor mode; auto compiles both and keeps the faster (default auto)")
    p.add_argument("--sync-every-epoch", action="store_true", help="loss.item() every epoch (the seed study's habit)")
    p.add_argument("--validate", action="store_true", help="compare with the float64 reference; exit 1 on failure")
    p.add_argument("--out", default="", help="record directory (default profiles/<gpu-slug>)")
    p.add_argument("--tag", type=tag_arg, default="default", help="record tag ({n}, {impl} expand)")
    p.add_argument("--warmup", type=nonneg_int, default=1, help="untimed runs before the measured ones (default 1)")
    p.add_argument("--repeats", type=int_list, default=[1], help="measured runs, median reported (default 1)")
    p.add_argument("--profile", action="store_true", help="GPU implementations: one extra untimed run under torch.profiler; Chrome trace next to the record, kernel summary in it")
    return p


def file_tag(tag, n, impl_name):
    t = tag.replace("{n}", str(n))
    if "{impl}" in t:
        return t.replace("{impl}", impl_name)
    return f"{t}-{impl_name}"


def run_one(torch, args, points, n, impl, gpu_slug):
    epochs, repeats = args.epochs[0], args.repeats[0]
    implementation = f"pytorch-{impl}" + ("-sync-every-epoch" if args.sync_every_epoch else "")
    tag = file_tag(args.tag, n, implementation[len("pytorch-"):])
    config = {
        "n": n,
        "data": args.data.replace("{n}", str(n)),
        "epochs": epochs,
        "lr": args.lr,
        "seed": args.seed,
        "impl": impl,
        "sync_every_epoch": args.sync_every_epoch,
        "validate": args.validate,
        "out": args.out,
        "tag": args.tag,
        "record_tag": tag,
        "warmup": args.warmup,
        "repeats": repeats,
        "profile": args.profile,
    }
    if impl == "compile":
        config["compile_dynamic"] = False  # see Trainer.__init__
    if impl == "compiled-graph":
        config["compile_dynamic"] = False
        config["compile_mode_requested"] = args.compile_mode
    rec = nbc.new_record(PHASE, "linreg", implementation, config)
    if impl == "cpu":
        torch.set_num_threads(os.cpu_count() or 1)
        rec["device"] = nbc.cpu_device_info(gpu_slug)
        rec["device"]["torch_threads"] = torch.get_num_threads()
    else:
        rec["device"] = nbc.gpu_device_info()
        free = rec["device"]["memory_free_bytes"]
        need = 8 * n * 6  # x, y and the autograd intermediates (pred, residual, square, grads)
        if free is not None and need > free:
            raise nbc.NbError(
                nbc.EXIT_OUT_OF_MEMORY,
                f"needs {need / 2**30:.2f} GiB of GPU memory for the data set, only {free / 2**30:.2f} GiB free",
            )
    slug = rec["device"]["slug"]

    laps = nbc.Laps(implementation)
    tr = Trainer(torch, impl, points, args.lr, epochs, args.sync_every_epoch, args.compile_mode)
    laps.lap("setup and compile")
    if impl == "compiled-graph":
        rec["config"]["compile_mode"] = tr.compile_mode  # the mode kept
    if impl == "cpu":
        samples = nbc.host_times(tr.run, args.warmup, repeats, setup=tr.reset)
        method = "host-steady-clock"
    else:
        samples = nbc.cuda_event_times(tr.run, args.warmup, repeats, setup=tr.reset)
        method = "cuda-events"
    laps.lap("warm-up and timed runs")
    got = tr.results()
    rec["timing"] = nbc.timing_json(
        method,
        f"{epochs} epochs of training (forward, autograd backward, SGD step, loss kept on the device"
        + (", loss.item() every epoch" if args.sync_every_epoch else "")
        + "); data resident " + ("in host memory" if impl == "cpu" else "on the device"),
        "data loading and transfer, parameter re-initialisation, torch.compile's compilation, graph capture, "
        "test evaluation, validation",
        args.warmup,
        samples,
    )
    med = rec["timing"]["total_ms"]["median"]
    rec["timing"]["per_epoch_ms_median"] = None if med is None else med / epochs
    if tr.compile_ms is not None:
        rec["timing"]["compile_ms"] = tr.compile_ms
    if tr.capture_ms is not None:
        rec["timing"]["capture_ms"] = tr.capture_ms
    if tr.mode_trial_ms is not None:
        rec["timing"]["mode_trial_ms"] = tr.mode_trial_ms
    nt = linreg_train_count(n)
    rec["data"] = {"n": n, "train": nt, "test": n - nt, "file": config["data"]}
    rec["metrics"] = {
        "w": nbc.finite_or_null(got["w"]),
        "b": nbc.finite_or_null(got["b"]),
        "train_loss": nbc.finite_or_null(got["loss"][-1] if got["loss"] else math.nan),
        "test_loss": nbc.finite_or_null(got["test_loss"]),
    }
    rec["loss"] = {"per_epoch": nbc.finite_array(got["loss"])}
    rec["kernels"], rec["memcpy"], rec["ranges"], rec["trace_file"] = [], [], [], None
    if args.profile and impl != "cpu":  # the GPU implementations: their kernels are the point
        out_dir = args.out if args.out else os.path.join("profiles", slug)
        trace = os.path.join(out_dir, f"{PHASE}__{tag}.trace.json")
        rec["kernels"], rec["memcpy"] = nbc.profile_run(tr.run, trace, setup=tr.reset, record=rec, unit="epoch",
                                                        units=epochs, unit_ms=rec["timing"]["per_epoch_ms_median"])
        rec["trace_file"] = os.path.basename(trace)
        rec["notes"].append(f"kernels/memcpy: torch.profiler over one extra untimed run of {epochs} epochs")
        laps.lap("profile")
    finite = all(math.isfinite(v) for v in [got["w"], got["b"], *got["loss"]])
    ok = nbc.settle_validation(rec, args.validate, lambda: validate(points, args.lr, epochs, got), not finite)
    laps.lap("validation")
    path = nbc.write_record(rec, args.out, slug, PHASE, tag)
    laps.lap("record")
    print(
        f"{PHASE} {implementation}: n={n} epochs={epochs} w={got['w']:.7f} b={got['b']:.7f} "
        f"train_loss={got['loss'][-1]:.7f} test_loss={got['test_loss']:.7f} "
        f"time median {med:.3f} ms ({repeats} runs) -> {path}",
        flush=True,
    )
    print(laps.line(), flush=True)
    del tr
    if impl != "cpu":
        torch.cuda.empty_cache()
    if not finite:
        raise nbc.NbError(nbc.EXIT_DIVERGED, f"training diverged (non-finite loss or parameters); record: {path}")
    return ok, path


def main(argv=None):
    args = parser().parse_args(argv)
    for name in ("epochs", "repeats"):
        if len(getattr(args, name)) != 1:
            raise nbc.NbError(nbc.EXIT_USAGE, f"--{name}: expected one integer")
    if args.sync_every_epoch and "compiled-graph" in args.impl:
        raise nbc.NbError(nbc.EXIT_USAGE, "--sync-every-epoch: not with compiled-graph (the whole training is one graph replay)")
    ns = args.n or [None]
    if len(ns) > 1 and ("{n}" not in args.data or "{n}" not in args.tag):
        raise nbc.NbError(nbc.EXIT_USAGE, "--n: several sizes need {n} in both --data and --tag")
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        raise nbc.NbError(nbc.EXIT_NO_DEVICE, "PyTorch is not installed") from None
    gpu_impls = [i for i in args.impl if i != "cpu"]
    if gpu_impls:
        nbc.require_cuda()
    gpu_slug = nbc.device_slug(torch.cuda.get_device_properties(0).name) if torch.cuda.is_available() else None
    failed = []
    for n in ns:
        path = args.data.replace("{n}", str(n)) if n is not None else args.data
        points = load_points(path, n)
        n_pts = points.shape[0]
        points = __import__("numpy").array(points)  # read the file into (writable) memory once for all impls
        for impl in args.impl:
            ok, rec_path = run_one(torch, args, points, n_pts, impl, gpu_slug)
            if not ok:
                failed.append(rec_path)
        del points
    if failed:
        raise nbc.NbError(nbc.EXIT_VALIDATION, "validation failed: " + ", ".join(failed))
    return 0


if __name__ == "__main__":
    sys.exit(nbc.guarded_main(main))
