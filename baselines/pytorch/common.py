"""Shared helpers for the PyTorch twins (linreg.py, mlp.py): run records in schema v1, device and
software info, git state, timing and torch.profiler kernel summaries.

The records these functions write are the same documents the CUDA phases write through
common/record.h (profiles/README.md is the contract): a twin's run sits next to the phase it is
compared with, in profiles/<device-slug>/<phase>__<tag>.json, written atomically (temporary file in
the same folder, fsync, rename), so a reader never sees half of one.

torch is imported lazily: everything that does not touch the GPU (records, slugs, statistics,
argument checks) works, and is tested, on a machine without torch.

Exit codes follow common/errors.h: 1 validation failed, 2 usage, 3 no CUDA device, 4 data,
5 out of GPU memory, 6 output not writable, 7 diverged, 9 internal, 130 interrupted.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import socket
import subprocess
import sys
import tempfile

SCHEMA = "cuda-notebook-run-record"
SCHEMA_VERSION = 1

EXIT_OK, EXIT_VALIDATION, EXIT_USAGE, EXIT_NO_DEVICE, EXIT_DATA = 0, 1, 2, 3, 4
EXIT_OUT_OF_MEMORY, EXIT_OUTPUT, EXIT_DIVERGED, EXIT_INTERNAL, EXIT_INTERRUPTED = 5, 6, 7, 9, 130


class NbError(Exception):
    """One-line error with a documented exit code (the twin of nb::Error)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def guarded_main(body, argv=None) -> int:
    """Runs body(argv); NbError prints 'error: <msg>' on one line and returns its code."""
    try:
        return body(argv)
    except NbError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("error: interrupted (SIGINT)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except MemoryError:
        print("error: host memory exhausted", file=sys.stderr)
        return EXIT_OUT_OF_MEMORY


# ----------------------------------------------------------------------------- slugs and JSON
def device_slug(name: str) -> str:
    """Same rule as nb::device_slug (common/device_info_host.cpp): lower case, every run of
    characters outside [a-z0-9] (dashes included) becomes one '-', none leading or trailing;
    an empty result is 'unknown-device'."""
    out = []
    pending_dash = False
    for ch in name:
        c = ch.lower() if "A" <= ch <= "Z" else ch
        if ("a" <= c <= "z") or ("0" <= c <= "9"):
            if pending_dash and out:
                out.append("-")
            pending_dash = False
            out.append(c)
        else:
            pending_dash = True
    return "".join(out) if out else "unknown-device"


def finite_or_null(v):
    """JSON has no NaN/inf: non-finite numbers become None (null), read as 'not finite'."""
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def finite_array(values):
    return [finite_or_null(v) for v in values]


def summarize(samples):
    """Stats like nb::summarize: median of an even count is the mean of the two middle values;
    non-finite samples are kept and sort last, so a bad run shows instead of hiding."""
    xs = [float(s) for s in samples]
    if not xs:
        return {"min": 0.0, "median": 0.0, "max": 0.0, "mean": 0.0, "samples": []}
    key = sorted(xs, key=lambda v: (not math.isfinite(v), v if math.isfinite(v) else 0.0))
    k = len(key)
    med = key[k // 2] if k % 2 else 0.5 * (key[k // 2 - 1] + key[k // 2])
    return {
        "min": finite_or_null(key[0]),
        "median": finite_or_null(med),
        "max": finite_or_null(key[-1]),
        "mean": finite_or_null(sum(xs) / k),
        "samples": finite_array(xs),
    }


def timing_json(method, includes, excludes, warmup, samples_ms, per_epoch_ms=()):
    return {
        "method": method,
        "includes": includes,
        "excludes": excludes,
        "warmup": int(warmup),
        "repeats": len(samples_ms),
        "total_ms": summarize(samples_ms),
        "per_epoch_ms": finite_array(per_epoch_ms),
    }


# ----------------------------------------------------------------------------- provenance
def _run(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def git_info():
    """{commit, dirty}: NB_GIT_COMMIT / NB_GIT_DIRTY when the caller sets them (they win over a
    repository found here: a tree copied to a GPU machine can carry a stale .git), else the working
    directory's repository; 'unknown'/None without git."""
    env = os.environ.get("NB_GIT_COMMIT", "")
    if env:
        dirty = os.environ.get("NB_GIT_DIRTY", "")
        return {"commit": env, "dirty": None if dirty == "" else dirty != "0"}
    commit = (_run(["git", "rev-parse", "HEAD"]) or "").strip()
    if len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit.lower()):
        return {"commit": "unknown", "dirty": None}
    status = _run(["git", "status", "--porcelain"])
    return {"commit": commit, "dirty": None if status is None else bool(status.strip())}


def utc_now():
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def software_info():
    sw = {"compiler": "python " + platform.python_version(), "python": platform.python_version()}
    try:
        import torch  # noqa: PLC0415

        sw["torch"] = torch.__version__
        sw["cuda_runtime"] = torch.version.cuda
    except ImportError:
        sw["torch"] = None
    return sw


def new_record(phase, workload, implementation, config):
    """Every field nb::new_record fills: schema, version, phase, workload, implementation,
    config (flag values), git, utc_time, host, software, status 'ok', notes [], run_mode ('quick' when
    NB_RUN_MODE=quick, as scripts/run_all.sh's quick notebook exports; else 'full')."""
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "phase": phase,
        "workload": workload,
        "implementation": implementation,
        "config": dict(config),
        "git": git_info(),
        "utc_time": utc_now(),
        "host": {"hostname": socket.gethostname()},
        "software": software_info(),
        "status": "ok",
        "notes": [],
        "run_mode": "quick" if os.environ.get("NB_RUN_MODE") == "quick" else "full",
    }


def validate_record(rec):
    """The checks nb::validate_record makes; '' when valid, else the first problem."""
    if not isinstance(rec, dict):
        return "record is not a JSON object"
    for k in ("schema", "phase", "workload", "implementation", "utc_time", "status"):
        if not isinstance(rec.get(k), str) or not rec[k]:
            return f"missing or empty field '{k}'"
    if rec["schema"] != SCHEMA:
        return f"field 'schema' is '{rec['schema']}', expected '{SCHEMA}'"
    if rec.get("schema_version") != SCHEMA_VERSION:
        return f"schema_version {rec.get('schema_version')} is not supported (expected {SCHEMA_VERSION})"
    if not isinstance(rec.get("config"), dict):
        return "field 'config' must be an object"
    if not isinstance(rec.get("device"), dict) or not rec["device"].get("name"):
        return "missing field 'device.name'"
    if not isinstance(rec.get("timing"), dict) or not rec["timing"].get("method"):
        return "missing field 'timing.method'"
    if rec["status"] not in ("ok", "validation_failed", "diverged", "interrupted"):
        return f"field 'status' is '{rec['status']}', expected ok|validation_failed|diverged|interrupted"
    return ""


def _safe_part(s):
    return bool(s) and s not in (".", "..") and "/" not in s and "\0" not in s


def write_file_atomic(path, contents: str):
    """Temporary file in the target's folder, fsync, rename over the target. NbError(6) on failure."""
    if not path:
        raise NbError(EXIT_OUTPUT, "(empty path): cannot write a file with no name")
    d = os.path.dirname(path) or "."
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise NbError(EXIT_OUTPUT, f"{d}: cannot create directory: {e.strerror}") from None
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=d)
    except OSError as e:
        raise NbError(EXIT_OUTPUT, f"{path}: cannot create temporary file: {e.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(contents)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise NbError(EXIT_OUTPUT, f"{path}: cannot write: {e.strerror}") from None


def record_path(out_dir, slug, phase, tag):
    d = out_dir if out_dir else os.path.join("profiles", slug)
    if not out_dir and not _safe_part(slug):
        raise NbError(EXIT_OUTPUT, f"{d}: device slug '{slug}' is not a usable folder name")
    if not _safe_part(phase) or not _safe_part(tag):
        raise NbError(EXIT_OUTPUT, f"{d}: phase '{phase}' and tag '{tag}' must be non-empty file-name parts")
    return os.path.join(d, f"{phase}__{tag}.json")


def process_age_s():
    """Seconds since this process started (Linux /proc; None elsewhere): the imports, data loading and
    CUDA start-up a twin spends before its first mode."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class Laps:
    """Where a twin's wall time goes, one mode at a time: lap(name) closes the part since the previous
    lap; line() is the one line printed at the end of the mode (a quick run's minutes are mostly these
    parts, not the timed epochs)."""

    def __init__(self, label):
        import time  # noqa: PLC0415

        self._clock = time.perf_counter
        self.label, self.parts, self._t = label, [], self._clock()
        self.started = process_age_s()

    def lap(self, name):
        now = self._clock()
        self.parts.append((name, now - self._t))
        self._t = now

    def line(self):
        total = sum(s for _, s in self.parts)
        head = f"[{self.label}] wall {total:.1f} s: " + ", ".join(f"{n} {s:.1f}" for n, s in self.parts)
        return head + ("" if self.started is None else f" (process started {self.started:.1f} s before this mode)")


def settle_validation(rec, validate, run_it, diverged=""):
    """The end of every twin's run before its record is written: `validation` from run_it() (which
    returns (validation, ok)) when `validate`, else "not performed"; then the status: diverged (the
    message, when given, into the notes) before validation_failed. Returns ok."""
    if validate:
        rec["validation"], ok = run_it()
    else:
        rec["validation"], ok = {"performed": False, "passed": None, "errors": {}, "tolerances": {}}, True
    if diverged:
        rec["status"] = "diverged"
        if isinstance(diverged, str):
            rec["notes"].append(diverged)
    elif not ok:
        rec["status"] = "validation_failed"
    return ok


def write_record(rec, out_dir, slug, phase, tag):
    """profiles/<slug>/<phase>__<tag>.json (or <out_dir>/...), atomically; returns the path."""
    path = record_path(out_dir, slug, phase, tag)
    problem = validate_record(rec)
    if problem:
        raise NbError(EXIT_INTERNAL, f"{path}: refusing to write an invalid record: {problem}")
    write_file_atomic(path, json.dumps(rec, indent=2, allow_nan=False) + "\n")
    return path


# ----------------------------------------------------------------------------- device
def require_cuda():
    """torch with a visible CUDA device, or NbError(3)."""
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        raise NbError(EXIT_NO_DEVICE, "no CUDA device: PyTorch is not installed") from None
    if not torch.cuda.is_available():
        raise NbError(EXIT_NO_DEVICE, "no CUDA device: torch.cuda.is_available() is False")
    return torch


def gpu_device_info(index=0):
    """The record's device object from torch.cuda.get_device_properties (fields torch does not
    expose, such as clocks, are null)."""
    import torch  # noqa: PLC0415

    p = torch.cuda.get_device_properties(index)
    free, total = torch.cuda.mem_get_info(index)
    rt = torch.version.cuda or ""
    try:
        major, minor = (int(v) for v in rt.split(".")[:2])
        runtime = major * 1000 + minor * 10
    except ValueError:
        runtime = None
    return {
        "index": index,
        "name": p.name,
        "slug": device_slug(p.name),
        "cc_major": p.major,
        "cc_minor": p.minor,
        "sm_count": p.multi_processor_count,
        "memory_bytes": int(total),
        "memory_free_bytes": int(free),
        "l2_bytes": getattr(p, "L2_cache_size", None),
        "sm_clock_khz": None,
        "mem_clock_khz": None,
        "mem_bus_width_bits": None,
        "driver_version": None,
        "runtime_version": runtime,
    }


def cpu_model_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_device_info(gpu_slug=None):
    """CPU runs: name is the CPU model, slug still the GPU's (so the record sits beside the GPU
    runs it is compared with); no GPU → the CPU's own slug."""
    name = cpu_model_name()
    return {
        "name": name,
        "slug": gpu_slug or device_slug(name),
        "cpu_threads": os.cpu_count(),
    }


# ----------------------------------------------------------------------------- timing
def cuda_event_times(run, warmup, repeats, setup=None, stream=None):
    """Times run() with CUDA events: setup() (untimed: re-initialise parameters) before every
    run, `warmup` untimed runs first, then `repeats` timed ones. Returns the list of ms."""
    import torch  # noqa: PLC0415

    stream = stream or torch.cuda.current_stream()
    times = []
    for i in range(warmup + repeats):
        if setup is not None:
            setup()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record(stream)
        run()
        stop.record(stream)
        stop.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(stop))
    return times


def host_times(run, warmup, repeats, setup=None):
    """Same with the host's monotonic clock (CPU implementations)."""
    import time  # noqa: PLC0415

    times = []
    for i in range(warmup + repeats):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        run()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append((t1 - t0) * 1e3)
    return times


def fresh_function(f, name):
    """A copy of function f with a code object of its own, named `name`. torch.compile keeps its
    cache per code object: each copy compiles afresh (one per inductor mode, one per sweep size)."""
    import types  # noqa: PLC0415

    return types.FunctionType(f.__code__.replace(co_name=name), f.__globals__, f.__name__, f.__defaults__,
                              f.__closure__)


def replay_ms(graph, setup, runs=3):
    """The median of `runs` timed replays of a CUDA graph (CUDA events), setup() before each."""
    import torch  # noqa: PLC0415

    times = []
    for _ in range(runs):
        setup()
        a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        z.record()
        z.synchronize()
        times.append(a.elapsed_time(z))
    return sorted(times)[len(times) // 2]


# ----------------------------------------------------------------------------- torch.profiler
def kernel_summary_from_chrome_trace(trace):
    """CUDA kernels of a torch.profiler Chrome trace (dict or path) in the record's `kernels`
    shape: [{name, calls, total_ns, mean_ns, min_ns, max_ns, grid, block}], by total descending."""
    if isinstance(trace, str):
        with open(trace, encoding="utf-8") as f:
            trace = json.load(f)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    by_name = {}
    for ev in events:
        if ev.get("ph") != "X" or str(ev.get("cat", "")).lower() != "kernel":
            continue
        dur_ns = float(ev.get("dur", 0.0)) * 1e3  # Chrome trace durations are microseconds
        args = ev.get("args", {}) or {}
        k = by_name.get(ev.get("name"))
        if k is None:
            k = by_name[ev.get("name")] = {
                "name": ev.get("name"),
                "calls": 0,
                "total_ns": 0.0,
                "min_ns": math.inf,
                "max_ns": 0.0,
                "grid": args.get("grid"),
                "block": args.get("block"),
            }
        k["calls"] += 1
        k["total_ns"] += dur_ns
        k["min_ns"] = min(k["min_ns"], dur_ns)
        k["max_ns"] = max(k["max_ns"], dur_ns)
    out = []
    for k in by_name.values():
        k["mean_ns"] = k["total_ns"] / k["calls"]
        out.append(
            {
                "name": k["name"],
                "calls": k["calls"],
                "total_ns": int(round(k["total_ns"])),
                "mean_ns": k["mean_ns"],
                "min_ns": int(round(k["min_ns"])),
                "max_ns": int(round(k["max_ns"])),
                "grid": k["grid"],
                "block": k["block"],
            }
        )
    out.sort(key=lambda k: -k["total_ns"])
    return out


def memcpy_summary_from_chrome_trace(trace):
    """Memcpy/memset events of a torch.profiler Chrome trace as [{kind, calls, bytes, total_ns}]."""
    if isinstance(trace, str):
        with open(trace, encoding="utf-8") as f:
            trace = json.load(f)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    kinds = {}
    for ev in events:
        cat = str(ev.get("cat", "")).lower()
        if ev.get("ph") != "X" or cat not in ("gpu_memcpy", "gpu_memset"):
            continue
        name = str(ev.get("name", ""))
        if cat == "gpu_memset":
            kind = "memset"
        elif "HtoD" in name:
            kind = "HtoD"
        elif "DtoH" in name:
            kind = "DtoH"
        elif "DtoD" in name:
            kind = "DtoD"
        else:
            kind = name
        k = kinds.setdefault(kind, {"kind": kind, "calls": 0, "bytes": 0, "total_ns": 0.0})
        k["calls"] += 1
        k["bytes"] += int((ev.get("args", {}) or {}).get("bytes", 0) or 0)
        k["total_ns"] += float(ev.get("dur", 0.0)) * 1e3
    out = list(kinds.values())
    for k in out:
        k["total_ns"] = int(round(k["total_ns"]))
    out.sort(key=lambda k: -k["total_ns"])
    return out


# ----------------------------------------------------------------------------- where the time goes
# The per-step (per-epoch) account of a run: kernels grouped by what they do, from their names alone.
# The report uses the same rules for our CUPTI summaries (report/analysis.py imports this module), so
# both sides are classified alike. Rules, in order; the first that matches wins (lower-case name):
KERNEL_CLASSES = ["gemm", "elementwise", "optimizer", "reduction", "copy", "other"]
KERNEL_CLASS_PREFIXES = [  # torch.compile (inductor) names say what a Triton kernel is, and so do XLA's
    ("gemm", ("triton_tem", "triton_mm", "gemm_fusion", "cublas")),
    ("reduction", ("triton_red", "triton_per", "input_reduce", "reduce_")),
    ("copy", ("input_scatter", "loop_dynamic_update_slice", "loop_pad", "loop_convert", "loop_gather", "input_gather")),
    ("elementwise", ("triton_poi", "loop_")),
]
KERNEL_CLASS_RULES = [
    # cuBLAS / cuBLASLt / CUTLASS kernels (split-K reduce and epilogue kernels included) and ours; our
    # fused_update_bwd is the backward-data and weight-gradient GEMMs with the update folded in
    ("gemm", ("gemm", "gemv", "nvjet", "xmma", "cutlass", "cublas", "matmul", "fused_update_bwd", "dot_kernel")),
    # torch's foreach / fused optimizers run as multi_tensor_apply kernels (zero_grad's foreach too)
    ("optimizer", ("multi_tensor_apply", "adam", "sgd", "optim", "update")),
    # data movement and conversion: copies, casts (direct_copy), fills, gathers / index, concatenation
    ("copy", ("memcpy", "memset", "copy", "fill", "gather", "scatter", "index", "catarray", "to_half",
              "bytes_to_batch", "transpose")),
    ("reduction", ("reduce", "softmax", "nll_loss", "cross_entropy", "sum", "mean", "loss", "grad", "fused_epoch",
                   "fused_chunk_epoch", "eval", "pairwise", "argmax")),
    ("elementwise", ("elementwise", "forward_kernel", "terms_kernel", "bias_act", "relu", "dropout", "epilogue",
                     "philox", "bernoulli", "threshold", "pointwise", "activation")),
]
# anything else is "other": e.g. parameter initialisation, our epoch-begin kernel, and a kernel that
# runs a whole epoch (phase 5's persistent and cluster kernels: every category in one launch)
KERNEL_CLASS_DOC = (
    ["memcpy/memset activity (not kernels) -> copy"]
    + [f"name starts with {' or '.join(ps)} -> {c}" for c, ps in KERNEL_CLASS_PREFIXES]
    + [f"name contains {', '.join(ks)} -> {c}" for c, ks in KERNEL_CLASS_RULES]
    + ["anything else -> other (initialisation kernels, whole-epoch kernels)"]
)
# host API calls that put work on the GPU (torch.profiler's cuda_runtime / cuda_driver events)
LAUNCH_CALL_PREFIXES = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cuGraphLaunch", "cudaMemcpy", "cuMemcpy",
                        "cudaMemset", "cuMemset")


def kernel_class(name):
    """One of KERNEL_CLASSES for a kernel name (see KERNEL_CLASS_RULES)."""
    low = str(name).lower()
    for c, prefixes in KERNEL_CLASS_PREFIXES:
        if low.startswith(prefixes):
            return c
    for c, keys in KERNEL_CLASS_RULES:
        if any(k in low for k in keys):
            return c
    return "other"


def summary_account(kernels, memcpy, units, skip=None):
    """Per-unit numbers from a kernel summary and a memcpy summary (the record's `kernels` and
    `memcpy` shapes) that cover `units` steps or epochs: kernel executions, summed kernel time,
    memcpy/memset time and time by class (ms). skip(name) -> True leaves a kernel out (it is
    counted in skipped_ms_per_unit). None when units is not positive."""
    if not units or units <= 0:
        return None
    cats = {c: 0.0 for c in KERNEL_CLASSES}
    launches = kern_ns = copy_ns = copies = skipped_ns = 0.0
    for k in kernels or []:
        if not isinstance(k, dict) or not isinstance(k.get("name"), str):
            continue
        t, n = k.get("total_ns"), k.get("calls")
        if not isinstance(t, (int, float)) or isinstance(t, bool):
            continue
        if skip is not None and skip(k["name"]):
            skipped_ns += t
            continue
        cats[kernel_class(k["name"])] += t / 1e6
        kern_ns += t
        launches += n if isinstance(n, (int, float)) and not isinstance(n, bool) else 0
    for m in memcpy or []:
        if not isinstance(m, dict):
            continue
        t, n = m.get("total_ns"), m.get("calls")
        if not isinstance(t, (int, float)) or isinstance(t, bool):
            continue
        cats["copy"] += t / 1e6
        copy_ns += t
        copies += n if isinstance(n, (int, float)) and not isinstance(n, bool) else 0
    return {
        "launches_per_unit": launches / units,
        "copies_per_unit": copies / units,
        "kernel_ms_per_unit": kern_ns / 1e6 / units,
        "copy_ms_per_unit": copy_ns / 1e6 / units,
        "device_ms_per_unit": (kern_ns + copy_ns) / 1e6 / units,
        "skipped_ms_per_unit": skipped_ns / 1e6 / units,
        "by_category_ms_per_unit": {c: v / units for c, v in cats.items()},
    }


def union_length(intervals):
    """Total length covered by a set of (start, end) intervals."""
    tot, cur_a, cur_b = 0.0, None, None
    for a, b in sorted(intervals):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                tot += cur_b - cur_a
            cur_a, cur_b = a, b
        elif b > cur_b:
            cur_b = b
    if cur_b is not None:
        tot += cur_b - cur_a
    return tot


def _trace_events(trace):
    if isinstance(trace, str):
        with open(trace, encoding="utf-8") as f:
            trace = json.load(f)
    return trace.get("traceEvents", []) if isinstance(trace, dict) else trace


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def account_from_chrome_trace(trace, unit, units, unit_ms=None, host_ms=None, profiled_ms=None):
    """The record's `account` from a torch.profiler Chrome trace (dict, event list or path) of a run
    of `units` steps (unit "step") or epochs (unit "epoch"). unit_ms: the timed median per unit (the
    idle gap is unit_ms - busy); host_ms: host wall time of the profiled loop before its final
    synchronize; profiled_ms: the same including the synchronize. Trace times are microseconds."""
    events = _trace_events(trace)
    dev, host = [], []
    launch_calls = 0
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        ts, dur = _num(ev.get("ts")), _num(ev.get("dur"))
        if ts is None or dur is None:
            continue
        cat = str(ev.get("cat", "")).lower()
        name = str(ev.get("name", ""))
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            dev.append((ts, ts + dur))
        elif cat in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function"):
            if "synchronize" in name.lower():
                continue  # waiting for the device, not issuing work
            host.append((ts, ts + dur))
            if cat in ("cuda_runtime", "cuda_driver") and name.startswith(LAUNCH_CALL_PREFIXES):
                launch_calls += 1
    acc = summary_account(kernel_summary_from_chrome_trace(events), memcpy_summary_from_chrome_trace(events), units)
    if acc is None:
        return None
    busy = union_length(dev) / 1e3 / units
    out = {
        "unit": unit,
        "steps": units,
        "source": f"torch.profiler (CPU + CUDA activities) over one extra untimed run of {units} {unit}s",
        "unit_ms": finite_or_null(unit_ms),
        "host_ms_per_unit": None if host_ms is None else finite_or_null(host_ms / units),
        "profiled_ms_per_unit": None if profiled_ms is None else finite_or_null(profiled_ms / units),
        "host_ops_ms_per_unit": union_length(host) / 1e3 / units,
        "launch_calls_per_unit": launch_calls / units,
        **{k: v for k, v in acc.items() if k != "skipped_ms_per_unit"},
        "busy_ms_per_unit": busy,
        "idle_ms_per_unit": None if unit_ms is None else finite_or_null(unit_ms - busy),
    }
    return out


def profile_run(run, trace_path, setup=None, record=None, unit=None, units=None, unit_ms=None):
    """One extra, untimed run under torch.profiler (CPU + CUDA activities); writes the Chrome
    trace to trace_path and returns (kernels, memcpy) summaries from it. With record, unit
    ("step"/"epoch"), units (how many the run does) and unit_ms (the timed median per unit), also
    sets record["account"] (account_from_chrome_trace), with the host wall time of run() before
    the final synchronize."""
    import time  # noqa: PLC0415

    import torch  # noqa: PLC0415
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    if setup is not None:
        setup()
    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        run()
        t1 = time.perf_counter()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t2 = time.perf_counter()
    d = os.path.dirname(trace_path) or "."
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(trace_path) + ".tmp.", suffix=".json", dir=d)
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        with open(tmp, encoding="utf-8") as f:
            trace = json.load(f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, trace_path)
    except (OSError, ValueError) as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise NbError(EXIT_OUTPUT, f"{trace_path}: cannot write the profiler trace: {e}") from None
    if record is not None and unit and units:
        record["account"] = account_from_chrome_trace(trace, unit, int(units), unit_ms=unit_ms,
                                                      host_ms=(t1 - t0) * 1e3, profiled_ms=(t2 - t0) * 1e3)
    return kernel_summary_from_chrome_trace(trace), memcpy_summary_from_chrome_trace(trace)


# ---------------------------------------------------------------- command-line value types (argparse)
def int_list(s):
    """'784,128,10' -> [784, 128, 10]; every value an integer >= 1."""
    import argparse
    try:
        vals = [int(v) for v in s.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers, got '{s}'") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got '{s}'")
    return vals


def choice_list(choices):
    """An argparse type for a comma-separated, non-empty list drawn from `choices`."""
    import argparse

    def parse(s):
        vals = [v.strip() for v in s.split(",") if v.strip()]
        bad = [v for v in vals if v not in choices]
        if not vals or bad:
            raise argparse.ArgumentTypeError(f"expected one or more of {','.join(choices)}, got '{s}'")
        return vals
    return parse
