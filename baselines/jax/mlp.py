#!/usr/bin/env python3
"""JAX twin of phases 4-5: the MNIST MLP, the same work written the way a JAX user writes it.

The same start, order and math as the CUDA phases and the PyTorch twin (baselines/pytorch/mlp.py,
whose command line, data, init and order files, tolerances and record schema this twin shares):
  * --init DIR (W<l>.npy [out, in], b<l>.npy [out], float32) and --order FILE (int32 .npy) as
    written by phase4_mlp / phase5_batched --save-init / --save-order;
  * dense layers z = x W^T + b, ReLU after every hidden layer, inverted dropout from jax.random
    (its own masks: losses are compared with --dropout 0), mean softmax cross-entropy
    (optax.softmax_cross_entropy_with_integer_labels), Adam (betas 0.9/0.999, eps 1e-8; an optax
    transformation, see adam()) or optax.sgd; pixels x/255;
  * fp32 matrix products at precision "highest" (no TF32); --precision fp16 as PyTorch's autocast:
    the forward's weights, biases and activations cast to float16 (products accumulate in fp32
    inside the GEMMs), logits back to float32 for the loss, fp32 master weights and optimizer, no
    loss scaling.

Implementations (--impl, comma-separated), from a user's first try to the fastest:
  jit-step   one jitted training step per Python call: the batch gathered on the device from the
             order at the step counter, forward, jax.value_and_grad, optax update, loss into its
             slot of a device buffer, counter += 1; the state is donated (updated in place)
  jit-epoch  an epoch's steps in one lax.scan: one dispatch an epoch
  jit-run    every epoch of the run in one jitted program (one lax.scan over all steps): one
             dispatch trains the whole run. Its test accuracy is evaluated once, after the run.
--xla picks the XLA settings (jaxtwin.XLA_PRESETS); the record names them (software.xla_flags).

Timing (the notebook's rule, with JAX's clock): data, order and parameters resident on the device;
compilation ahead of time and excluded (timing.compile_ms); warm-up (--warmup N: N x 50 steps, or N
whole runs for jit-run) then the state restored; each epoch (each run, for jit-run) timed by a host
wall clock around its dispatches and jax.block_until_ready; evaluation and the per-epoch loss
read-back are outside it. timing.dispatch_ms: what such a clock adds to one dispatch (an empty
program's round trip). The evaluation and the validation's steps compile without XLA's GEMM
autotuning (jaxtwin.UNTIMED_COMPILER_OPTIONS): seconds of compilation saved, nothing timed changed.

Records: profiles/<gpu-slug>/jax_mlp__<tag>-<impl>.json (or the tag with {impl} replaced), phase
"jax_mlp", implementation "jax-<impl>", schema v1; loss.per_step as the CUDA side's. --profile: 200
extra untimed steps (jit-epoch: one extra epoch; jit-run: one extra run) under jax.profiler, kernels
and the per-step account.

Exit codes as the CUDA programs (common/errors.h): 1 validation failed, 2 usage, 3 no CUDA device
(or no JAX), 4 bad data/init/order file, 5 out of GPU memory, 6 output not writable, 7 diverged.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jaxtwin  # noqa: E402

nbc = jaxtwin.nbc
ptm = jaxtwin.load_pytorch_twin("mlp")  # data readers, schedule, float64 reference, tolerances

PHASE = "jax_mlp"
IMPLS = ("jit-step", "jit-epoch", "jit-run")
WARMUP_STEPS = ptm.WARMUP_STEPS
PROFILE_STEPS = ptm.PROFILE_STEPS


# ----------------------------------------------------------------------------- the model (pure functions)
def make_model(jax, layers, dropout, fp16, optimizer, lr):
    """(loss_fn, opt): loss_fn(params, xb, yb, key) is the batch's mean cross-entropy with dropout
    drawn from key (None: no dropout); opt the optax transformation."""
    import jax.numpy as jnp  # noqa: PLC0415
    import optax  # noqa: PLC0415

    keep = 1.0 - dropout
    L = len(layers) - 1

    def loss_fn(params, xb, yb, key):
        h = xb.astype(jnp.float16) if fp16 else xb
        for l, (W, b) in enumerate(params):
            if fp16:
                W, b = W.astype(jnp.float16), b.astype(jnp.float16)
            h = h @ W.T + b
            if l + 1 < L:
                h = jnp.maximum(h, 0)
                if key is not None and dropout > 0:
                    mask = jax.random.bernoulli(jax.random.fold_in(key, l), keep, h.shape)
                    h = jnp.where(mask, h / jnp.asarray(keep, h.dtype), jnp.zeros((), h.dtype))
        return optax.softmax_cross_entropy_with_integer_labels(h.astype(jnp.float32), yb).mean()

    opt = adam(lr, 0.9, 0.999, 1e-8) if optimizer == "adam" else optax.sgd(lr)
    return loss_fn, opt


def adam(lr, b1, b2, eps):
    """Adam as an optax GradientTransformation, PyTorch's form of the step:
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    optax.adam itself computes 1 - b2^t from b2 rounded to float32 (0.999 becomes 0.99900001), so
    its bias correction is off by 1.3e-5 and every early step by about 6e-6 relative: more than the
    validation's update tolerance, and not the arithmetic of the CUDA side or PyTorch (which raise
    b2 to t in double precision). Here 1 - b^t = -expm1(t log b), with log b taken in double
    precision: within a few float32 ulps."""
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    import optax  # noqa: PLC0415

    log_b1, log_b2 = math.log(b1), math.log(b2)

    def init(params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return {"m": zeros, "v": jax.tree_util.tree_map(jnp.zeros_like, params), "t": jnp.zeros((), jnp.int32)}

    def update(grads, state, params=None):
        del params
        t = state["t"] + 1
        m = jax.tree_util.tree_map(lambda m_, g: b1 * m_ + (1.0 - b1) * g, state["m"], grads)
        v = jax.tree_util.tree_map(lambda v_, g: b2 * v_ + (1.0 - b2) * g * g, state["v"], grads)
        tf = t.astype(jnp.float32)
        step = lr / -jnp.expm1(tf * log_b1)
        root = jnp.sqrt(-jnp.expm1(tf * log_b2))
        upd = jax.tree_util.tree_map(lambda m_, v_: -step * m_ / (jnp.sqrt(v_) / root + eps), m, v)
        return upd, {"m": m, "v": v, "t": t}

    return optax.GradientTransformation(init, update)


def layout(layers, flat):
    """(pack, unpack) between the layer list [(W [out, in], b [out])] and the parameters the
    optimizer sees: the list itself, or with flat=True one float32 vector in the reference's order
    (W0, b0, W1, b1, ...), so that the optimizer updates every parameter in one fused pass instead of
    one pass per tensor (what optax.flatten does, kept flat across steps so the layers' views are
    static slices XLA fuses into their consumers)."""
    if not flat:
        return (lambda ps: [tuple(p) for p in ps]), (lambda ps: ps)
    import jax.numpy as jnp  # noqa: PLC0415

    spans, at = [], 0
    for l in range(len(layers) - 1):
        nw, nb_ = layers[l + 1] * layers[l], layers[l + 1]
        spans.append((at, nw, at + nw, nb_, (layers[l + 1], layers[l])))
        at += nw + nb_

    def pack(ps):
        return jnp.concatenate([jnp.concatenate([jnp.ravel(W), jnp.ravel(b)]) for W, b in ps])

    def unpack(theta):
        return [(theta[a:a + nw].reshape(shape), theta[c:c + nb_]) for a, nw, c, nb_, shape in spans]

    return pack, unpack


def train_step(jax, loss_fn, opt, params, opt_state, xb, yb, key):
    """One step: (params, opt_state, loss, grads); the caller drops grads where it does not need them
    (XLA removes what nothing reads)."""
    import optax  # noqa: PLC0415

    loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb, key)
    upd, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, upd), opt_state, loss, grads


class Trainer:
    """One implementation: run_steps(s0, s1) trains steps s0..s1-1 from the current state (whose
    step counter is at s0); reset() restores the initial state."""

    def __init__(self, jax, impl, args, data, init, order):
        import jax.numpy as jnp  # noqa: PLC0415
        import numpy as np  # noqa: PLC0415
        import optax  # noqa: PLC0415

        self.jax, self.impl, self.args = jax, impl, args
        tr_x, tr_y, te_x, te_y = data
        put = jax.device_put
        self.x, self.y = put(np.ascontiguousarray(tr_x)), put(tr_y.astype(np.int32))  # uint8 images, resident
        self.tx, self.ty = put(np.ascontiguousarray(te_x)), put(te_y.astype(np.int32))
        self.order = put(order.astype(np.int32))
        self.B = B = args.batch
        self.spe, self.total, self.n_epochs = ptm.schedule(tr_x.shape[0], B, args.epochs, args.steps)
        self.init = [(np.asarray(W, np.float32), np.asarray(b, np.float32)) for W, b in init]
        self.fp16 = args.precision == "fp16"
        layer_loss, self.opt = make_model(jax, args.layers, args.dropout, self.fp16, args.optimizer, args.lr)
        self.pack, unpack = layout(args.layers, args.params == "flat")
        self.unpack = unpack
        self.loss_fn = lambda p, xb, yb, k: layer_loss(unpack(p), xb, yb, k)
        self.key = jax.random.PRNGKey(args.seed)
        x, y, order_d, key, loss_fn, opt = self.x, self.y, self.order, self.key, self.loss_fn, self.opt
        use_key = args.dropout > 0

        def step(state):
            params, ost, losses, s = state
            idx = jax.lax.dynamic_slice(order_d, (s * B,), (B,))
            xb = x[idx].astype(jnp.float32) / 255.0
            yb = y[idx]
            k = jax.random.fold_in(key, s) if use_key else None
            params, ost, loss, _ = train_step(jax, loss_fn, opt, params, ost, xb, yb, k)
            return params, ost, losses.at[s].set(loss), s + 1

        def steps(state, n):
            return jax.lax.scan(lambda st, _: (step(st), None), state, None, length=n)[0]

        self.compile_ms = 0.0
        self.exes = {}
        if impl == "jit-step":
            self._compile(1, step)
        elif impl == "jit-epoch":
            for n in sorted(self._chunk_lengths(), reverse=True):
                self._compile(n, lambda st, n=n: steps(st, n))
        else:
            self._compile(self.total, lambda st: steps(st, self.total))

        def evaluate(params):
            z = self.tx.astype(jnp.float32) / 255.0
            for l, (W, b) in enumerate(params):
                if self.fp16:
                    z, W, b = z.astype(jnp.float16), W.astype(jnp.float16), b.astype(jnp.float16)
                z = z @ W.T + b
                if l + 1 < len(params):
                    z = jnp.maximum(z, 0)
            z = z.astype(jnp.float32)
            loss = optax.softmax_cross_entropy_with_integer_labels(z, self.ty).sum()
            return loss, jnp.sum(jnp.argmax(z, axis=1) == self.ty)

        self._evaluate = jax.jit(lambda p: evaluate(unpack(p)), compiler_options=jaxtwin.UNTIMED_COMPILER_OPTIONS)
        self.state = None
        self.reset()

    def _chunk_lengths(self):
        """jit-epoch's executables: one per distinct epoch length (the warm-up runs the epochs'
        own; the profiled run is one epoch, profile_steps): a scan compiles in about the same time
        whatever its length, so each extra length costs a whole compilation (about 4 s at W1)."""
        return {min(self.total, (e + 1) * self.spe) - e * self.spe for e in range(self.n_epochs)}

    def profile_steps(self):
        """Steps of the one extra, untimed run under jax.profiler: jit-step PROFILE_STEPS, jit-epoch
        the first epoch (its executable, no new compilation), jit-run the whole run."""
        if self.impl == "jit-step":
            return min(PROFILE_STEPS, self.total)
        return min(self.total, self.spe) if self.impl == "jit-epoch" else self.total

    def _fresh(self):
        import jax.numpy as jnp  # noqa: PLC0415

        params = self.pack([(jnp.asarray(W), jnp.asarray(b)) for W, b in self.init])
        return params, self.opt.init(params), jnp.full((self.total,), jnp.nan, jnp.float32), jnp.asarray(0, jnp.int32)

    def _compile(self, n, fn):
        exe, ms = jaxtwin.compile_ms(self.jax.jit(fn, donate_argnums=0), self._fresh())
        self.exes[n] = exe
        self.compile_ms += ms

    def reset(self):
        self.state = self.jax.block_until_ready(self._fresh())

    def run_steps(self, s0, s1):
        """Dispatches steps s0..s1-1 (the counter is at s0); returns the state to block on."""
        s = self.state
        n = s1 - s0
        if self.impl == "jit-step":
            for _ in range(n):
                s = self.exes[1](s)
        elif self.impl == "jit-epoch":
            s = self.exes[n](s)
        else:
            if n != self.total:
                raise nbc.NbError(nbc.EXIT_INTERNAL, f"jit-run runs all {self.total} steps at once, not {n}")
            s = self.exes[n](s)
        self.state = s
        return s

    def losses(self, s0, s1):
        return self.state[2][s0:s1].tolist()

    def evaluate(self):
        loss_sum, correct = self._evaluate(self.state[0])
        n = self.tx.shape[0]
        return float(loss_sum) / n, 100.0 * int(correct) / n


# ----------------------------------------------------------------------------- validation
def validate(jax, args, data, init, order, k_steps=3):
    """K steps of the twin's own step (dropout off) judged by the PyTorch twin's validate_steps
    against the float64 reference on the same batches, tolerances from the shape and precision."""
    import jax.numpy as jnp  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    tr_x, tr_y = data[0], data[1]
    layer_loss, opt = make_model(jax, args.layers, 0.0, args.precision == "fp16", args.optimizer, args.lr)
    pack, unpack = layout(args.layers, args.params == "flat")
    step = jax.jit(lambda p, o, xb, yb: train_step(jax, lambda q, *a: layer_loss(unpack(q), *a), opt, p, o, xb, yb,
                                                   None), compiler_options=jaxtwin.UNTIMED_COMPILER_OPTIONS)
    params = pack([(jnp.asarray(W), jnp.asarray(b)) for W, b in init])
    state = {"p": params, "o": opt.init(params)}
    B = args.batch

    def flat(ps):
        return ptm.flatten_params([(np.asarray(W), np.asarray(b)) for W, b in unpack(ps)])

    def one(k):
        idx = order[k * B:(k + 1) * B]
        xs = tr_x[idx].astype(np.float32) / np.float32(255.0)
        ys = tr_y[idx].astype(np.int32)
        p, o, loss, grads = step(state["p"], state["o"], jnp.asarray(xs), jnp.asarray(ys))
        state["p"], state["o"] = p, o
        return {"loss": float(loss), "x": xs.astype(np.float64), "y": ys.astype(np.int64), "grads": flat(grads),
                "params": flat(p)}

    errors, tols, ok = ptm.validate_steps(one, args.layers, B, args.precision == "fp16", args.optimizer, args.lr,
                                          flat(params), k_steps)
    return {"performed": True, "passed": ok,
            "reference": "float64 numpy, dropout off, same batches; each step re-anchored at the twin's parameters",
            "errors": {k: nbc.finite_or_null(v) for k, v in errors.items()}, "tolerances": tols}, ok


# ----------------------------------------------------------------------------- CLI
def parser():
    p = ptm.parser()
    p.prog = "mlp.py"
    p.description = __doc__.split("\n")[0]
    for a in p._actions:  # the PyTorch twin's vocabulary, with this twin's implementations
        if a.dest == "impl":
            a.type, a.default = nbc.choice_list(IMPLS), ["jit-epoch"]
            a.help = "jit-step|jit-epoch|jit-run, comma-separated"
        elif a.dest in ("compile_mode", "graph_steps"):
            a.help = "(accepted for the shared vocabulary; no effect here)"
        elif a.dest == "profile":
            a.help = "kernels and the per-step account from jax.profiler over 200 extra untimed steps (jit-epoch: one epoch; jit-run: one run)"
        elif a.dest == "deterministic":
            a.help = "(accepted; XLA's GPU kernels for this model are deterministic)"
        elif a.dest == "seed":
            a.help = "jax.random seed (dropout masks); fallback init/order"
    p.add_argument("--xla", choices=tuple(jaxtwin.XLA_PRESETS), default="default",
                   help="XLA settings: default, or graphs (every command kind in CUDA graphs); recorded")
    p.add_argument("--params", choices=("auto", "tree", "flat"), default="auto",
                   help="the optimizer's view of the parameters: one array a tensor (tree), or one flat vector "
                        "(flat: one fused update a step); auto: flat below 2^22 parameters, tree from there "
                        "(measured on an H200: flat is faster on W1, tree on W2 at h = 8192, equal at h = 2048); "
                        "the choice is recorded")
    p.add_argument("--prng", choices=("threefry", "rbg"), default="threefry",
                   help="jax's PRNG for the dropout masks (jax_default_prng_impl); recorded")
    return p


def run_impl(jax, args, impl, data, init, order, own_inputs, dispatch):
    config = {k.replace("_", "-"): v for k, v in vars(args).items()}
    config["impl"] = impl
    tag = ptm.file_tag(args.tag, impl)
    config["record_tag"] = tag
    rec = jaxtwin.new_record(jax, args.xla, PHASE, args.workload, f"jax-{impl}", config)
    rec["device"] = jaxtwin.gpu_device_info(jax)
    rec["notes"] += own_inputs
    laps = nbc.Laps(f"jax-{impl}")
    tr = Trainer(jax, impl, args, data, init, order)
    laps.lap("setup and compile")
    spe, total = tr.spe, tr.total
    # Warm-up runs every executable the timed runs use (an executable's first run costs more: measured
    # 84.6 against 74.4-75.0 ms for a W1 epoch on an H200): jit-epoch each distinct epoch length.
    warm = {"jit-step": [min(WARMUP_STEPS, total)], "jit-run": [total],
            "jit-epoch": sorted({min(total, (e + 1) * spe) - e * spe for e in range(tr.n_epochs)})}[impl]
    for _ in range(args.warmup):
        for n in warm:
            jax.block_until_ready(tr.run_steps(0, n))
            tr.reset()
    laps.lap("warm-up")
    totals, diverged = [], ""
    for _ in range(args.repeats):
        tr.reset()
        per_epoch, epoch_loss, test_loss, test_acc, step_losses = [], [], [], [], []
        if impl == "jit-run":
            _, ms = jaxtwin.wall_ms(lambda: tr.run_steps(0, total))
            per_epoch = [ms / tr.n_epochs] * tr.n_epochs
        for e in range(tr.n_epochs):
            s0, s1 = e * spe, min(total, (e + 1) * spe)
            if impl != "jit-run":
                _, ms = jaxtwin.wall_ms(lambda: tr.run_steps(s0, s1))
                per_epoch.append(ms)
            ls = tr.losses(s0, s1)  # the once-per-epoch read-back (jit-run: after the run)
            bad = [i for i, v in enumerate(ls) if not math.isfinite(v)]
            if bad:
                g = s0 + bad[0]
                diverged = f"training diverged: non-finite loss at epoch {e}, step {g - e * spe} (global step {g})"
                step_losses += ls[: bad[0] + 1]
                epoch_loss.append(math.nan)
                break
            step_losses += ls
            epoch_loss.append(sum(ls) / len(ls))
            if impl != "jit-run" or e == tr.n_epochs - 1:
                tl, ta = tr.evaluate()
                test_loss.append(tl)
                test_acc.append(ta)
                print(f"[jax-{impl}] epoch {e}: {per_epoch[e]:.1f} ms  train loss {epoch_loss[-1]:.4f}  "
                      f"test loss {tl:.4f}  test acc {ta:.2f}%", flush=True)
        totals.append(sum(per_epoch))
        if diverged:
            break
    rec["timing"] = jaxtwin.timing_json(
        "per epoch: every training step (batch gathered on the device from the order, forward, backward, optax "
        "update, loss into its device slot), "
        + {"jit-step": "one dispatch a step", "jit-epoch": "one dispatch an epoch (lax.scan)",
           "jit-run": "one dispatch for the whole run (lax.scan over every step; per_epoch_ms is the run / epochs)"}[impl]
        + ", and the final block_until_ready",
        "data loading and upload, tracing and XLA compilation, warm-up, the per-epoch loss read-back, evaluation",
        args.warmup, totals, per_epoch, tr.compile_ms, dispatch)
    med = rec["timing"]["total_ms"]["median"]
    rec["timing"]["per_step_ms"] = {"median": (med / len(step_losses)) if (med and step_losses) else None}
    rec["loss"] = {"per_epoch": nbc.finite_array(epoch_loss), "test_per_epoch": nbc.finite_array(test_loss),
                   "per_step": ptm.per_step_json(step_losses)}
    rec["metrics"] = {
        "test_accuracy": test_acc[-1] if test_acc else None,
        "test_accuracy_per_epoch": test_acc,
        "train_loss": nbc.finite_or_null(epoch_loss[-1]) if epoch_loss else None,
        "peak_device_memory_bytes": jaxtwin.peak_device_memory(jax),
        "samples_per_s": (len(step_losses) * args.batch / (med / 1e3)) if med else None,
        "steps": len(step_losses),
    }
    if impl == "jit-run":
        rec["notes"].append("jit-run: test loss and accuracy evaluated once, after the run")
    laps.lap("timed runs")
    rec["kernels"], rec["memcpy"], rec["ranges"], rec["trace_file"] = [], [], [], None
    if args.profile and not diverged:
        n = tr.profile_steps()
        tr.reset()
        rec["account"], rec["kernels"], rec["memcpy"] = jaxtwin.profile_run(
            jax, lambda: tr.run_steps(0, n), "step", n, rec["timing"]["per_step_ms"]["median"])
        rec["notes"].append(f"kernels/memcpy: jax.profiler over {n} extra untimed steps (trace not kept)")
        laps.lap("profile")
    ok = nbc.settle_validation(rec, args.validate, lambda: validate(jax, args, data, init, order), diverged)
    laps.lap("validation")
    path = nbc.write_record(rec, args.out, rec["device"]["slug"], PHASE, tag)
    laps.lap("record")
    print(f"record: {path}  (median {med:.2f} ms, {rec['timing']['per_step_ms']['median'] * 1e3:.2f} us a step, "
          f"compile {tr.compile_ms:.0f} ms, dispatch {dispatch * 1e3:.1f} us)" if med else f"record: {path}", flush=True)
    print(laps.line(), flush=True)
    if diverged:
        raise nbc.NbError(nbc.EXIT_DIVERGED, diverged)
    return nbc.EXIT_OK if ok else nbc.EXIT_VALIDATION


def default_inputs(args, n_train, spe, total, n_epochs):
    """Without --init/--order: the twin's own (seeded numpy; a note says so)."""
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(args.seed)
    init = []
    for l in range(len(args.layers) - 1):
        bound = 1.0 / math.sqrt(args.layers[l])  # the bound of PyTorch's default nn.Linear init
        init.append((rng.uniform(-bound, bound, (args.layers[l + 1], args.layers[l])).astype(np.float32),
                     rng.uniform(-bound, bound, (args.layers[l + 1],)).astype(np.float32)))
    order = np.concatenate([rng.permutation(n_train)[: spe * args.batch] for _ in range(n_epochs)])
    return init, order[: total * args.batch].astype(np.int64)


AUTO_TREE_PARAMS = 1 << 22  # --params auto: tree from this many parameters up


def resolve_params(args):
    """--params auto -> tree or flat by the parameter count; returns a note saying which ran."""
    if args.params != "auto":
        return []
    n = sum(args.layers[l] * args.layers[l + 1] + args.layers[l + 1] for l in range(len(args.layers) - 1))
    args.params = "tree" if n >= AUTO_TREE_PARAMS else "flat"
    return [f"--params auto: {args.params} ({n} parameters; tree from {AUTO_TREE_PARAMS})"]


def main(argv=None):
    args = parser().parse_args(argv)
    ptm.check_args(args)
    params_note = resolve_params(args)
    data = ptm.load_dataset(args.data, args.dataset)
    spe, total, n_epochs = ptm.schedule(data[0].shape[0], args.batch, args.epochs, args.steps)
    init = ptm.load_init(args.init, args.layers) if args.init else None
    order = ptm.load_order(args.order, data[0].shape[0], args.batch, args.epochs, args.steps) if args.order else None
    jax = jaxtwin.configure(args.xla)
    jax.config.update("jax_default_prng_impl", {"threefry": "threefry2x32", "rbg": "rbg"}[args.prng])
    own_inputs = list(params_note)
    if init is None or order is None:
        own_init, own_order = default_inputs(args, data[0].shape[0], spe, total, n_epochs)
        if init is None:
            own_inputs.append("no --init: the twin's own uniform(+-1/sqrt(fan_in)) initialisation (seeded), "
                              "not the CUDA side's weights")
            init = own_init
        if order is None:
            own_inputs.append("no --order: numpy permutations per epoch (seeded), not the CUDA side's order")
            order = own_order
    dispatch = jaxtwin.dispatch_ms(jax)
    rc = nbc.EXIT_OK
    for impl in args.impl:
        try:
            r = run_impl(jax, args, impl, data, init, order, own_inputs, dispatch)
        except jax.errors.JaxRuntimeError as e:
            if "RESOURCE_EXHAUSTED" in str(e):
                raise nbc.NbError(nbc.EXIT_OUT_OF_MEMORY, f"out of GPU memory: {str(e).splitlines()[0]}") from None
            raise
        rc = rc or r
    return rc


if __name__ == "__main__":
    sys.exit(nbc.guarded_main(main))
