"""What the JAX twins (linreg.py, mlp.py) share: the JAX set-up (XLA flags before the first import,
fp32 matrix products at "highest"), the record's device and software fields, wall-clock timing
around block_until_ready, the dispatch cost that timing includes, and the time account of a
jax.profiler trace.

One contract with the PyTorch twins: records, statistics, exit codes and the kernel classes of the
account are baselines/pytorch/common.py's (imported here as `nbc`), so a JAX record and a PyTorch
record of the same work sit side by side in profiles/<device-slug>/ and are read by the same report.

jax is imported lazily (configure()): record helpers, argument checks and the trace parser work, and
are tested, on a machine without JAX.
"""
from __future__ import annotations

import glob
import gzip
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pytorch"))
import common as nbc  # noqa: E402  (the PyTorch twins' module: records, statistics, account rules)


def load_pytorch_twin(name):
    """baselines/pytorch/<name>.py as module pytorch_<name> (its data readers, float64 references and
    validation are the JAX twins' too; torch is imported there only when a PyTorch run needs it)."""
    import importlib.util  # noqa: PLC0415

    key = f"pytorch_{name}"
    if key not in sys.modules:
        path = os.path.join(os.path.dirname(nbc.__file__), f"{name}.py")
        spec = importlib.util.spec_from_file_location(key, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[key] = mod
        spec.loader.exec_module(mod)
    return sys.modules[key]

# XLA settings the twins may run with. "default" is XLA as installed. "graphs" asks XLA to capture
# every kind of command it can into CUDA graphs, loops (WHILE) and branches (CONDITIONAL) included,
# from the first command on: a whole lax.scan can then replay as one graph instead of one launch per
# fusion and one host round trip per iteration. "cublas" runs every matrix product through cuBLAS
# instead of XLA's Triton GEMM fusions. Which one is faster is measured, not assumed: the
# bench scripts run both and the report keeps the faster (the record names what ran).
XLA_PRESETS = {
    "default": "",
    "graphs": ("--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,COLLECTIVES,"
               "WHILE,CONDITIONAL --xla_gpu_graph_min_graph_size=1"),
    "cublas": "--xla_gpu_enable_triton_gemm=false",
}
DISPATCH_SAMPLES = 200
# XLA options for the programs outside the timed region (the test-set evaluation, the validation's
# steps): no autotuning of their matrix products, whose compilation would otherwise cost seconds a
# program (XLA tries GEMM configurations on the GPU); the timed programs keep XLA's defaults.
UNTIMED_COMPILER_OPTIONS = {"xla_gpu_autotune_level": 0}


def configure(xla_preset="default", need_gpu=True):
    """Sets XLA_FLAGS for the preset (before jax's first import: the flags are read once), imports
    jax, pins fp32 matrix products to "highest" (JAX's default on this GPU may run them in TF32) and
    returns jax. need_gpu: NbError(3) without a CUDA device."""
    if xla_preset not in XLA_PRESETS:
        raise nbc.NbError(nbc.EXIT_USAGE, f"--xla: expected one of {','.join(XLA_PRESETS)}, got '{xla_preset}'")
    if "jax" in sys.modules and xla_preset != "default" and XLA_PRESETS[xla_preset] not in os.environ.get("XLA_FLAGS", ""):
        raise nbc.NbError(nbc.EXIT_INTERNAL, "--xla: jax was imported before its flags could be set")
    flags = XLA_PRESETS[xla_preset]
    if flags:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flags).strip()
    try:
        import jax  # noqa: PLC0415
    except ImportError:
        raise nbc.NbError(nbc.EXIT_NO_DEVICE, "no CUDA device: JAX is not installed") from None
    jax.config.update("jax_default_matmul_precision", "highest")
    if need_gpu:
        try:
            gpus = jax.devices("gpu")
        except RuntimeError:
            gpus = []
        if not gpus:
            raise nbc.NbError(nbc.EXIT_NO_DEVICE, "no CUDA device: jax.devices('gpu') is empty (no GPU, or JAX without "
                              "its CUDA plugin)")
    return jax


def software_info(jax, xla_preset):
    import jaxlib  # noqa: PLC0415

    sw = {"compiler": "python " + sys.version.split()[0], "python": sys.version.split()[0],
          "jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", None),
          "xla_preset": xla_preset, "xla_flags": os.environ.get("XLA_FLAGS", ""),
          "matmul_precision": str(jax.config.jax_default_matmul_precision)}
    try:
        import optax  # noqa: PLC0415

        sw["optax"] = optax.__version__
    except ImportError:
        sw["optax"] = None
    return sw


def new_record(jax, xla_preset, phase, workload, implementation, config):
    rec = nbc.new_record(phase, workload, implementation, config)
    rec["software"] = software_info(jax, xla_preset)
    return rec


def gpu_device_info(jax):
    """The record's device object from what JAX exposes (fields it does not expose are null)."""
    d = jax.devices("gpu")[0]
    name = getattr(d, "device_kind", "") or str(d)
    stats = {}
    try:
        stats = d.memory_stats() or {}
    except Exception:  # noqa: BLE001 — not every backend reports memory
        stats = {}
    total = stats.get("bytes_limit")
    used = stats.get("bytes_in_use")
    cc = str(getattr(d, "compute_capability", "") or "")
    major, _, minor = cc.partition(".")
    return {
        "index": d.id,
        "name": name,
        "slug": nbc.device_slug(name),
        "cc_major": int(major) if major.isdigit() else None,
        "cc_minor": int(minor) if minor.isdigit() else None,
        "sm_count": getattr(d, "core_count", None),
        "memory_bytes": total,
        "memory_free_bytes": (total - used) if total is not None and used is not None else None,
        "l2_bytes": None, "sm_clock_khz": None, "mem_clock_khz": None, "mem_bus_width_bits": None,
        "driver_version": None, "runtime_version": None,
    }


def peak_device_memory(jax):
    try:
        return (jax.devices("gpu")[0].memory_stats() or {}).get("peak_bytes_in_use")
    except Exception:  # noqa: BLE001
        return None


# ----------------------------------------------------------------------------- timing
TIMING_METHOD = "host-wall-clock-block-until-ready"


def wall_ms(fn):
    """(result, ms): fn() dispatched and blocked on; perf_counter around both."""
    import jax  # noqa: PLC0415

    t0 = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    return out, (time.perf_counter() - t0) * 1e3


def compile_ms(jitted, *args):
    """jitted.lower(*args).compile(), timed: (compiled executable, ms). The timed runs call the
    executable itself, so no run pays for tracing or compilation."""
    t0 = time.perf_counter()
    exe = jitted.lower(*args).compile()
    return exe, (time.perf_counter() - t0) * 1e3


def dispatch_ms(jax, samples=DISPATCH_SAMPLES):
    """The median wall time of dispatching a compiled one-element jitted add and blocking on its
    result: what a wall clock around one dispatch adds to the device time CUDA events would see
    (Python's call into the executable, the launch, the host's wait for completion)."""
    import jax.numpy as jnp  # noqa: PLC0415

    x = jax.device_put(jnp.zeros((1,), jnp.float32))
    f = jax.jit(lambda v: v + 1.0).lower(x).compile()
    jax.block_until_ready(f(x))
    ts = []
    for _ in range(samples):
        t0 = time.perf_counter()
        jax.block_until_ready(f(x))
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def timing_json(includes, excludes, warmup, totals, per_epoch, compile_total_ms, dispatch):
    t = nbc.timing_json(TIMING_METHOD, includes, excludes, warmup, totals, per_epoch)
    t["compile_ms"] = compile_total_ms
    t["dispatch_ms"] = dispatch
    return t


# ----------------------------------------------------------------------------- where the time goes
# jax.profiler.trace(..., create_perfetto_trace=True) writes a Chrome-format trace: processes named
# "/device:GPU:<n>..." hold the kernels and copies (one thread per stream), "/host:CPU" the host's
# threads (Python, the runtime's API calls). Times are microseconds.
def _names(events, kind):
    """{pid: name} (kind "process_name") or {(pid, tid): name} (kind "thread_name") from the trace's
    metadata events."""
    out = {}
    for ev in events:
        if isinstance(ev, dict) and ev.get("ph") == "M" and ev.get("name") == kind:
            key = ev.get("pid") if kind == "process_name" else (ev.get("pid"), ev.get("tid"))
            out[key] = str((ev.get("args") or {}).get("name", ""))
    return out


def device_work(trace):
    """(kernel events, copy events, host events) of a jax.profiler Chrome-format trace (dict, event
    list or path, gzip or not). Device events are those of a process named /device:GPU:..., kept only
    on its stream lines (threads named "Stream #..."), where XLA's profiler puts kernels and copies:
    its other lines (XLA Ops, XLA Modules) repeat the same time at coarser grain and would count it
    twice. Host events are those of every other process."""
    if isinstance(trace, str):
        opener = gzip.open if trace.endswith(".gz") else open
        with opener(trace, "rt", encoding="utf-8") as f:
            trace = json.load(f)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    pnames, tnames = _names(events, "process_name"), _names(events, "thread_name")
    device, host = [], []
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        if nbc._num(ev.get("ts")) is None or nbc._num(ev.get("dur")) is None:
            continue
        (device if "/device:gpu" in pnames.get(ev.get("pid"), "").lower() else host).append(ev)
    on_stream = [ev for ev in device if "stream" in tnames.get((ev.get("pid"), ev.get("tid")), "").lower()]
    device = on_stream or device  # a trace without stream names: every device line
    kernels = [ev for ev in device if not _is_copy(str(ev.get("name", "")))]
    copies = [ev for ev in device if _is_copy(str(ev.get("name", "")))]
    return kernels, copies, host


def _is_copy(name):
    low = name.lower()
    return "memcpy" in low or "memset" in low


def _summary(evs, key):
    by = {}
    for ev in evs:
        name = str(ev.get("name", ""))
        k = key(name)
        d = by.setdefault(k, {"name": k, "calls": 0, "total_ns": 0.0, "min_ns": float("inf"), "max_ns": 0.0})
        ns = float(ev["dur"]) * 1e3
        d["calls"] += 1
        d["total_ns"] += ns
        d["min_ns"] = min(d["min_ns"], ns)
        d["max_ns"] = max(d["max_ns"], ns)
    out = []
    for d in by.values():
        d["mean_ns"] = d["total_ns"] / d["calls"]
        d["total_ns"] = int(round(d["total_ns"]))
        d["min_ns"] = int(round(d["min_ns"]))
        d["max_ns"] = int(round(d["max_ns"]))
        d["grid"] = d["block"] = None
        out.append(d)
    out.sort(key=lambda d: -d["total_ns"])
    return out


def _copy_kind(name):
    low = name.lower()
    if "memset" in low:
        return "memset"
    for k, tags in (("HtoD", ("htod", "h2d")), ("DtoH", ("dtoh", "d2h")), ("DtoD", ("dtod", "d2d"))):
        if any(t in low for t in tags):
            return k
    return name


def summaries(kernels, copies):
    """The record's `kernels` and `memcpy` shapes from device events."""
    ks = _summary(kernels, lambda n: n)
    ms = [{"kind": d["name"], "calls": d["calls"], "bytes": 0, "total_ns": d["total_ns"]}
          for d in _summary(copies, _copy_kind)]
    return ks, ms


def account_from_trace(trace, unit, units, unit_ms=None, host_ms=None, profiled_ms=None, source=""):
    """The record's `account` (the PyTorch twins' keys) from a jax.profiler trace of a run of
    `units` steps or epochs: kernel executions and time by class (nbc.summary_account's rules),
    device busy time (the union of kernel and copy intervals, given the timed unit's share when the
    profiler stretched the run: see below), the idle gap against the timed median unit_ms, and the
    host's API calls that launch work."""
    kernels, copies, host = device_work(trace)
    ks, ms = summaries(kernels, copies)
    acc = nbc.summary_account(ks, ms, units)
    if acc is None:
        return None, ks, ms
    busy_profiled = nbc.union_length([(ev["ts"], ev["ts"] + ev["dur"]) for ev in kernels + copies]) / 1e3 / units
    # The profiler stretches the run it watches (each kernel is traced; W1's 20-odd small kernels a
    # step took 81 us of device time a step under it against a 42 us timed step), so the profiled
    # run's busy time is not the timed run's. The account gives the timed unit the profiled run's
    # busy share: busy = busy_profiled x unit_ms / profiled_ms (raw value and stretch kept beside it).
    per_unit_profiled = None if profiled_ms is None else profiled_ms / units
    stretch = (per_unit_profiled / unit_ms) if (per_unit_profiled and unit_ms) else None
    busy = busy_profiled / stretch if (stretch and stretch > 1.0) else busy_profiled
    launch_calls = sum(1 for ev in host if str(ev.get("name", "")).startswith(nbc.LAUNCH_CALL_PREFIXES))
    host_api = [(ev["ts"], ev["ts"] + ev["dur"]) for ev in host
                if str(ev.get("name", "")).startswith(("cu", "cuda")) and "synchronize" not in str(ev.get("name")).lower()]
    out = {
        "unit": unit,
        "steps": units,
        "source": source or f"jax.profiler (host + device) over one extra untimed run of {units} {unit}s",
        "unit_ms": nbc.finite_or_null(unit_ms),
        "host_ms_per_unit": None if host_ms is None else nbc.finite_or_null(host_ms / units),
        "profiled_ms_per_unit": None if profiled_ms is None else nbc.finite_or_null(profiled_ms / units),
        "host_ops_ms_per_unit": nbc.union_length(host_api) / 1e3 / units,
        "launch_calls_per_unit": launch_calls / units,
        **{k: v for k, v in acc.items() if k != "skipped_ms_per_unit"},
        "busy_ms_per_unit": busy,
        "busy_ms_per_unit_profiled": busy_profiled,
        "profiler_stretch": nbc.finite_or_null(stretch) if stretch is not None else None,
        "idle_ms_per_unit": None if unit_ms is None else nbc.finite_or_null(unit_ms - busy),
    }
    return out, ks, ms


def profile_run(jax, run, unit, units, unit_ms, keep_trace=""):
    """One extra, untimed run() under jax.profiler (host and device). Returns (account, kernels,
    memcpy); the perfetto trace is copied to keep_trace when given (it is several MB: not kept by
    default; NB_JAX_KEEP_TRACE=DIR keeps every one in DIR)."""
    if not keep_trace and os.environ.get("NB_JAX_KEEP_TRACE"):
        d = os.environ["NB_JAX_KEEP_TRACE"]
        os.makedirs(d, exist_ok=True)
        keep_trace = os.path.join(d, f"jax_trace_{unit}{units}_{int(time.time() * 1e3) % 10**8}.json.gz")
    with tempfile.TemporaryDirectory() as td:
        with jax.profiler.trace(td, create_perfetto_trace=True):
            t1 = time.perf_counter()
            out = run()
            t2 = time.perf_counter()
            jax.block_until_ready(out)
            t3 = time.perf_counter()
        found = glob.glob(os.path.join(td, "**", "perfetto_trace.json.gz"), recursive=True)
        if not found:
            raise nbc.NbError(nbc.EXIT_INTERNAL, f"jax.profiler wrote no perfetto_trace.json.gz under {td}")
        if keep_trace:
            import shutil  # noqa: PLC0415

            shutil.copyfile(found[0], keep_trace)
        return account_from_trace(found[0], unit, units, unit_ms=unit_ms, host_ms=(t2 - t1) * 1e3,
                                  profiled_ms=(t3 - t1) * 1e3)
