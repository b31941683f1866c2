#!/usr/bin/env python3
"""JAX twin of phases 1-3: linear regression y = w*x + b by full-batch gradient descent.

The same work as the CUDA phases and the PyTorch twin (baselines/pytorch/linreg.py, whose command
line, data file, tolerances and record schema this twin shares): the points phase1_naive
--save-data wrote, float32 parameters from w = 0.83, b = 0.7645, lr 0.01, 200 epochs, MSE; epoch e
records the train loss at the parameters it starts with, then updates w and b. The gradient comes
from jax.value_and_grad and the step from optax.sgd: how a JAX user writes it.

Implementations (--impl, comma-separated):
  jit-step  one jitted epoch (loss, gradient, SGD step, loss into its slot of a device buffer,
            epoch counter += 1) per Python call; full batch, so an epoch is one step (there is no
            separate jit-epoch mode for this model)
  jit-run   every epoch of the run in one jitted program (lax.fori_loop over the epochs): one
            dispatch trains the whole run
--xla picks the XLA settings (jaxtwin.XLA_PRESETS: default, graphs); the record names them.

Timing (the notebook's rule, with JAX's clock): data resident on the device before the clock starts;
compilation done ahead (jit(...).lower(...).compile(), timing.compile_ms) and excluded; --warmup
untimed runs; then --repeats runs, each a host wall clock (perf_counter) around the dispatches and
jax.block_until_ready; median reported. A wall clock includes what CUDA events exclude: one dispatch
and the host's wait for the result (timing.dispatch_ms measures that on an empty program).

Records: profiles/<gpu-slug>/jax_linreg__<tag>-<impl>.json, phase "jax_linreg", implementation
"jax-<impl>", schema v1 (profiles/README.md). --profile: one extra untimed run under jax.profiler,
its kernels and time account (unit "epoch") in the record.

Exit codes as the CUDA programs (common/errors.h): 1 validation failed, 2 usage, 3 no CUDA device
(or no JAX), 4 bad data file, 5 does not fit in GPU memory, 6 output not writable, 7 diverged.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jaxtwin  # noqa: E402

nbc = jaxtwin.nbc
ptl = jaxtwin.load_pytorch_twin("linreg")  # data layout, float64 reference, validation, CLI types

PHASE = "jax_linreg"
IMPLS = ("jit-step", "jit-run")


class Trainer:
    """One implementation on one data set. run() = one training run (E epochs) from the initial
    parameters; reset() = untimed re-initialisation before it."""

    def __init__(self, jax, impl, points, lr, epochs):
        import jax.numpy as jnp  # noqa: PLC0415
        import numpy as np  # noqa: PLC0415
        import optax  # noqa: PLC0415

        self.jax, self.impl, self.epochs = jax, impl, epochs
        n = points.shape[0]
        nt = ptl.linreg_train_count(n)
        put = jax.device_put
        self.x, self.y = put(np.ascontiguousarray(points[:nt, 0])), put(np.ascontiguousarray(points[:nt, 1]))
        self.xt, self.yt = put(np.ascontiguousarray(points[nt:, 0])), put(np.ascontiguousarray(points[nt:, 1]))
        opt = optax.sgd(lr)

        def mse(p, x, y):
            r = p["w"] * x + p["b"] - y
            return jnp.mean(r * r)

        def epoch(state, x, y):
            p, o, losses, e = state
            loss, g = jax.value_and_grad(mse)(p, x, y)
            upd, o = opt.update(g, o, p)
            return optax.apply_updates(p, upd), o, losses.at[e].set(loss), e + 1

        def whole_run(state, x, y):
            return jax.lax.fori_loop(0, epochs, lambda _, s: epoch(s, x, y), state)

        self._init = lambda: self._fresh(jnp, opt)
        fn = epoch if impl == "jit-step" else whole_run
        # the state is donated: every call updates it in place instead of allocating a new one
        self.exe, self.compile_ms = jaxtwin.compile_ms(jax.jit(fn, donate_argnums=0), self._init(), self.x, self.y)
        self.test_mse = jax.jit(mse)
        self.state = None

    def _fresh(self, jnp, opt):
        p = {"w": jnp.asarray(ptl.INIT_W, jnp.float32), "b": jnp.asarray(ptl.INIT_B, jnp.float32)}
        return p, opt.init(p), jnp.full((self.epochs,), jnp.nan, jnp.float32), jnp.asarray(0, jnp.int32)

    def reset(self):
        self.state = self.jax.block_until_ready(self._init())

    def run(self):
        s = self.state
        if self.impl == "jit-run":
            s = self.exe(s, self.x, self.y)
        else:
            for _ in range(self.epochs):
                s = self.exe(s, self.x, self.y)
        self.state = s
        return s

    def results(self):
        p, _, losses, _ = self.state
        test = float(self.test_mse(p, self.xt, self.yt)) if self.xt.shape[0] else math.nan
        return {"w": float(p["w"]), "b": float(p["b"]), "loss": [float(v) for v in losses.tolist()], "test_loss": test}


def parser():
    p = argparse.ArgumentParser(prog="linreg.py", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=nbc.int_list, default=None, help="points (list: a sweep); default: as many as --data holds")
    p.add_argument("--data", required=True, help="points from phase1_naive --save-data ({n} is replaced by each --n)")
    p.add_argument("--epochs", type=nbc.int_list, default=[200], help="full-batch gradient-descent epochs (default 200)")
    p.add_argument("--lr", type=ptl.positive_float, default=0.01, help="learning rate (default 0.01)")
    p.add_argument("--seed", type=int, default=42, help="recorded only: the points come from --data (default 42)")
    p.add_argument("--impl", type=nbc.choice_list(IMPLS), default=["jit-run"], help="jit-step|jit-run, comma-separated")
    p.add_argument("--xla", choices=tuple(jaxtwin.XLA_PRESETS), default="default",
                   help="XLA settings: default, or graphs (every command kind in CUDA graphs); recorded")
    p.add_argument("--validate", action="store_true", help="compare with the float64 reference; exit 1 on failure")
    p.add_argument("--out", default="", help="record directory (default profiles/<gpu-slug>)")
    p.add_argument("--tag", type=ptl.tag_arg, default="default", help="record tag ({n}, {impl} expand)")
    p.add_argument("--warmup", type=ptl.nonneg_int, default=1, help="untimed runs before the measured ones (default 1)")
    p.add_argument("--repeats", type=nbc.int_list, default=[1], help="measured runs, median reported (default 1)")
    p.add_argument("--profile", action="store_true", help="one extra untimed run under jax.profiler: kernels and time account in the record")
    return p


def run_one(jax, args, points, n, impl, dispatch):
    epochs, repeats = args.epochs[0], args.repeats[0]
    implementation = f"jax-{impl}"
    tag = ptl.file_tag(args.tag, n, impl)
    config = {"n": n, "data": args.data.replace("{n}", str(n)), "epochs": epochs, "lr": args.lr, "seed": args.seed,
              "impl": impl, "xla": args.xla, "validate": args.validate, "out": args.out, "tag": args.tag,
              "record_tag": tag, "warmup": args.warmup, "repeats": repeats, "profile": args.profile}
    rec = jaxtwin.new_record(jax, args.xla, PHASE, "linreg", implementation, config)
    rec["device"] = jaxtwin.gpu_device_info(jax)
    free = rec["device"]["memory_free_bytes"]
    need = 4 * n * 4  # x and y on the device, and XLA's temporaries of at most the same size
    if free is not None and need > free:
        raise nbc.NbError(nbc.EXIT_OUT_OF_MEMORY,
                          f"needs {need / 2**30:.2f} GiB of GPU memory for the data set, only {free / 2**30:.2f} GiB free")
    slug = rec["device"]["slug"]
    laps = nbc.Laps(implementation)
    tr = Trainer(jax, impl, points, args.lr, epochs)
    laps.lap("setup and compile")
    samples = []
    for i in range(args.warmup + repeats):
        tr.reset()
        _, ms = jaxtwin.wall_ms(tr.run)
        if i >= args.warmup:
            samples.append(ms)
    laps.lap("warm-up and timed runs")
    got = tr.results()
    rec["timing"] = jaxtwin.timing_json(
        f"{epochs} epochs of training (value_and_grad, optax SGD step, loss into its device slot)"
        + (", one dispatch" if impl == "jit-run" else ", one dispatch an epoch")
        + ", the final block_until_ready; data resident on the device",
        "data loading and transfer, parameter re-initialisation, tracing and XLA compilation, test evaluation, "
        "validation", args.warmup, samples, [], tr.compile_ms, dispatch)
    med = rec["timing"]["total_ms"]["median"]
    rec["timing"]["per_epoch_ms_median"] = None if med is None else med / epochs
    nt = ptl.linreg_train_count(n)
    rec["data"] = {"n": n, "train": nt, "test": n - nt, "file": config["data"]}
    rec["metrics"] = {"w": nbc.finite_or_null(got["w"]), "b": nbc.finite_or_null(got["b"]),
                      "train_loss": nbc.finite_or_null(got["loss"][-1] if got["loss"] else math.nan),
                      "test_loss": nbc.finite_or_null(got["test_loss"])}
    rec["loss"] = {"per_epoch": nbc.finite_array(got["loss"])}
    rec["kernels"], rec["memcpy"], rec["ranges"], rec["trace_file"] = [], [], [], None
    if args.profile:
        tr.reset()
        rec["account"], rec["kernels"], rec["memcpy"] = jaxtwin.profile_run(
            jax, tr.run, "epoch", epochs, rec["timing"]["per_epoch_ms_median"])
        rec["notes"].append(f"kernels/memcpy: jax.profiler over one extra untimed run of {epochs} epochs (trace not kept)")
        laps.lap("profile")
    finite = all(math.isfinite(v) for v in [got["w"], got["b"], *got["loss"]])
    ok = nbc.settle_validation(rec, args.validate, lambda: ptl.validate(points, args.lr, epochs, got), not finite)
    laps.lap("validation")
    path = nbc.write_record(rec, args.out, slug, PHASE, tag)
    laps.lap("record")
    print(f"{PHASE} {implementation}: n={n} epochs={epochs} w={got['w']:.7f} b={got['b']:.7f} "
          f"train_loss={got['loss'][-1]:.7f} test_loss={got['test_loss']:.7f} "
          f"time median {med:.3f} ms ({repeats} runs, compile {tr.compile_ms:.0f} ms) -> {path}", flush=True)
    print(laps.line(), flush=True)
    if not finite:
        raise nbc.NbError(nbc.EXIT_DIVERGED, f"training diverged (non-finite loss or parameters); record: {path}")
    return ok, path


def main(argv=None):
    args = parser().parse_args(argv)
    for name in ("epochs", "repeats"):
        if len(getattr(args, name)) != 1:
            raise nbc.NbError(nbc.EXIT_USAGE, f"--{name}: expected one integer")
    ns = args.n or [None]
    if len(ns) > 1 and ("{n}" not in args.data or "{n}" not in args.tag):
        raise nbc.NbError(nbc.EXIT_USAGE, "--n: several sizes need {n} in both --data and --tag")
    # the data files first (exit 4 needs no GPU), then JAX
    paths = [args.data.replace("{n}", str(n)) if n is not None else args.data for n in ns]
    for n, path in zip(ns, paths):
        ptl.load_points(path, n)
    jax = jaxtwin.configure(args.xla)
    dispatch = jaxtwin.dispatch_ms(jax)
    failed = []
    for n, path in zip(ns, paths):
        import numpy as np  # noqa: PLC0415

        points = np.array(ptl.load_points(path, n))
        for impl in args.impl:
            try:
                ok, rec_path = run_one(jax, args, points, points.shape[0], impl, dispatch)
            except jax.errors.JaxRuntimeError as e:
                if "RESOURCE_EXHAUSTED" in str(e):
                    raise nbc.NbError(nbc.EXIT_OUT_OF_MEMORY, f"out of GPU memory: {str(e).splitlines()[0]}") from None
                raise
            if not ok:
                failed.append(rec_path)
    if failed:
        raise nbc.NbError(nbc.EXIT_VALIDATION, "validation failed: " + ", ".join(failed))
    return 0


if __name__ == "__main__":
    sys.exit(nbc.guarded_main(main))
