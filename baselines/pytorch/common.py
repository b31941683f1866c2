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
    config (flag values), git, utc_time, host, software, status 'ok', notes []."""
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


def profile_run(run, trace_path, setup=None):
    """One extra, untimed run under torch.profiler (CPU + CUDA activities); writes the Chrome
    trace to trace_path and returns (kernels, memcpy) summaries from it."""
    import torch  # noqa: PLC0415
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    if setup is not None:
        setup()
    acts = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    with profile(activities=acts) as prof:
        run()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
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
