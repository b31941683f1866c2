"""Which records feed which figure, and the numbers derived from them.

Each `select_*` function takes the usable records of ONE device and returns a plain dict with the
values to draw/tabulate, the records used (so every number can be traced to a file), and what is
missing. Nothing here plots or formats Markdown.

Record choice rules (written into the report's appendix too):
- only records with status "ok" are drawn; others are listed as not drawn;
- the tag names the role of a run: `headline*`, `sweep*`, `w1`, `w1-nodrop`, `w1-seed<k>`, `w2*`,
  `batch-sweep*`, `host-streams<k>`; a trailing `-<implementation>` on the tag is ignored (a twin
  writing several implementations needs distinct file names);
- when two records fill the same slot, the newest (utc_time, then path) wins and the report says so;
- the framework twins are PyTorch from Python (`pytorch_*`), PyTorch from C++ (`libtorch_*`) and JAX
  (`jax_*`): "the fastest framework mode" is the fastest of all of them on the device, named.
"""
from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess

from records import as_list, dget, num, parse_nsys_kern_sum, parse_ncu_details, read_chrome_trace

OURS_ORDER = [
    ("phase1_naive", "cuda"), ("phase2_shared_mem", "cuda"), ("phase3_fused_streams", "cuda-graph"),
    ("phase3_fused_streams", "cuda"), ("phase4_mlp", "cuda-fp32"), ("phase4_mlp", "cuda-fp16"),
    ("phase5_batched", "cuda"), ("phase5_batched", "cuda-fp16"), ("phase5_batched", "cuda-cublaslt"),
    ("phase5_batched", "cuda-persistent"), ("phase5_batched", "cuda-pipelined"), ("phase5_batched", "cuda-cluster"),
    ("phase5_batched", "cuda-cluster32"), ("phase5_batched", "cuda-grid"),
]
# Paths the batch sweep also draws (sweep_key): phase 5's default plan forced one way, cuBLASLt fp16,
# fp16 on step 6 (and the first layer's products on step 9), the middle of the step in one kernel
# (--row-chain on, fp32 and fp16); listed after the
# default path in legends, in colours of their own.
SWEEP_PATHS = [("phase5_batched", "cuda-tile"), ("phase5_batched", "cuda-tf32x3"), ("phase5_batched", "cuda-cublaslt-fp16"),
               ("phase5_batched", "cuda-fp16-mma"), ("phase5_batched", "cuda-fma"), ("phase5_batched", "cuda-row-chain"),
               ("phase5_batched", "cuda-fp16-row-chain"), ("phase5_batched", "cuda-fp16-wgmma")]
JAX_IMPLS = ["jax-jit-step", "jax-jit-epoch", "jax-jit-run"]
TWIN_IMPLS = ["pytorch-cpu", "pytorch-eager", "pytorch-compile", "pytorch-compile-max-autotune", "pytorch-graph",
              "pytorch-compiled-graph", "libtorch-eager", "libtorch-graph"] + JAX_IMPLS
PHASE_ORDER = ["phase1_naive", "phase2_shared_mem", "phase3_fused_streams", "phase4_mlp", "phase5_batched",
               "pytorch_linreg", "pytorch_mlp", "libtorch_linreg", "libtorch_mlp", "jax_linreg", "jax_mlp",
               "ceilings", "tracer_overhead"]
PHASE_TITLE = {
    "phase1_naive": "phase 1 naive", "phase2_shared_mem": "phase 2 shared mem",
    "phase3_fused_streams": "phase 3 fused+streams", "phase4_mlp": "phase 4", "phase5_batched": "phase 5",
}
TWIN_TITLE = {
    "cpu": "PyTorch CPU", "eager": "PyTorch eager", "compile": "PyTorch compile",
    "compile-max-autotune": "PyTorch compile max-autotune", "graph": "PyTorch CUDA graph",
    "compiled-graph": "PyTorch compiled-graph", "libtorch-eager": "libtorch eager (C++)",
    "libtorch-graph": "libtorch CUDA graph (C++)",
    "jax-jit-step": "JAX jit-step", "jax-jit-epoch": "JAX jit-epoch", "jax-jit-run": "JAX jit-run",
}
IMPL_TITLE = {"cuda-fp32": "fp32", "cuda-fp16": "fp16 TC", "cuda-cublaslt": "cuBLASLt",
              "cuda-persistent": "persistent kernel", "cuda-pipelined": "pipelined persistent kernel",
              "cuda-cluster": "cluster kernel", "cuda-cluster32": "fp32 cluster kernel",
              "cuda-grid": "grid kernel, one launch, a block an SM per 16 units",
              "cuda-graph": "per-epoch CUDA graph", "cuda-tile": "own GEMM, SIMT tile only (--fp32-gemm tile)",
              "cuda-tf32x3": "own GEMM, 3xTF32 throughout (--fp32-gemm tf32x3)",
              "cuda-fma": "own GEMM, CUDA cores only (--fp32-gemm fma)", "cuda-cublaslt-fp16": "cuBLASLt fp16",
              "cuda-fp16-mma": "own GEMM fp16, step 6 mma.sync throughout (--fp16-gemm mma)",
              "cuda-row-chain": "fp32, the middle of the step in one kernel (--row-chain on)",
              "cuda-fp16-row-chain": "fp16, the middle of the step in one kernel (--row-chain on)",
              "cuda-fp16-wgmma": "own GEMM fp16, the first layer's products on step 9 wgmma (--fp16-gemm wgmma)"}

LINREG_IMPLS = [("phase1_naive", "cuda"), ("phase2_shared_mem", "cuda"), ("phase3_fused_streams", "cuda"),
                ("pytorch_linreg", "pytorch-cpu"), ("pytorch_linreg", "pytorch-eager"),
                ("pytorch_linreg", "pytorch-compile"), ("pytorch_linreg", "pytorch-graph"),
                ("pytorch_linreg", "pytorch-compiled-graph"), ("libtorch_linreg", "libtorch-eager"),
                ("libtorch_linreg", "libtorch-graph")]
MLP_IMPLS = [("phase4_mlp", "cuda-fp32"), ("phase4_mlp", "cuda-fp16"), ("phase5_batched", "cuda"),
             ("phase5_batched", "cuda-fp16"), ("phase5_batched", "cuda-cublaslt"), ("phase5_batched", "cuda-persistent"),
             ("phase5_batched", "cuda-pipelined"), ("phase5_batched", "cuda-cluster32"), ("pytorch_mlp", "pytorch-eager"),
             ("pytorch_mlp", "pytorch-compile"), ("pytorch_mlp", "pytorch-graph"),
             ("pytorch_mlp", "pytorch-compiled-graph"), ("libtorch_mlp", "libtorch-eager"), ("libtorch_mlp", "libtorch-graph")]
SWEEP_NS = [500, 5000, 50000, 500000, 5000000, 10000000, 50000000, 100000000]
W2_HS = [128, 256, 512, 1024, 2048, 4096, 8192]
# Phase 5's W2 paths (fp16): the graph path on its own GEMMs, the cluster kernel (h = 128 only) and the
# grid kernel (rung 5g, one cooperative launch over up to every SM, any width); its W2 targets and
# comparisons take the fastest of them at each width (w2_best_phase5)
W2_PHASE5_PATHS = [("phase5_batched", "cuda-fp16"), ("phase5_batched", "cuda-cluster"), ("phase5_batched", "cuda-grid")]
BATCH_IMPLS = [("phase5_batched", "cuda"), ("pytorch_mlp", "pytorch-compiled-graph")]


# ------------------------------------------------------------------ which files the report may read

_TRACKED = None  # None: every file that exists; else the real paths of the files git tracks


def git_tracked(folder):
    """The real paths of the files git tracks in the work tree that holds folder (committed or staged),
    or None where git is not there or folder is not in a work tree: then every file that exists counts."""
    try:
        top = subprocess.run(["git", "-C", folder, "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=60)
        if top.returncode != 0 or not top.stdout.strip():
            return None
        root = top.stdout.strip()
        ls = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if ls.returncode != 0:
        return None
    root = os.path.realpath(root)
    return {os.path.join(root, *p.split("/")) for p in ls.stdout.decode("utf-8", "replace").split("\0") if p}


def set_tracked(paths):
    """Which files the report reads: paths (a set of real paths, git_tracked's) or None for every file."""
    global _TRACKED
    _TRACKED = None if paths is None else set(paths)


def present(path):
    """True where path exists and, in a git checkout, is tracked: a file that is not committed (a trace
    or a profile made here and not added) is left out, so a fresh clone gives the same report."""
    if not path or not os.path.exists(path):
        return False
    return _TRACKED is None or os.path.realpath(path) in _TRACKED


def pct_text(p):
    """A percentage as the report prints it everywhere: 3 significant digits ('64.7%', '0.0360%')."""
    if p is None:
        return "—"
    return "0%" if p == 0 else sig3(p) + "%"


def busy_pct(row):
    """The device-busy share of a time-account row, percent of the timed unit (unclamped), or None."""
    if not row or row.get("busy_ms") is None or not row.get("unit_ms"):
        return None
    return row["busy_ms"] / row["unit_ms"] * 100


def busy_text(p, unit="step"):
    """A busy share in words, the same everywhere: '64.7%'; over 100% (the profiled or traced run's
    device time exceeds the timed unit: that run was slower, or under programmatic dependent launch a
    kernel's duration includes its wait) never a percentage: 'all of it (device time 1.11× the step)'."""
    if p is None:
        return "—"
    if p <= 100:
        return pct_text(p)
    return f"all of it (device time {sig3(p / 100)}× the {unit})"


def row_busy_text(row):
    """busy_text of a time-account row; a JAX row whose profiled run was longer than its timed one
    (busy_hi_ms, time_account) as the range its busy share lies in: '49.9–87.1% (est.)'."""
    p = busy_pct(row)
    if p is not None and row.get("busy_hi_ms") and row.get("unit_ms"):
        return f"{pct_text(p)}–{pct_text(row['busy_hi_ms'] / row['unit_ms'] * 100)} (est.)"
    return busy_text(p, row.get("unit", "step") if row else "step")


BUSY_OVER_NOTE = ("Where the device time of the profiled or traced run exceeds the timed unit, the busy share is "
                  "\"all of it\" with the device time as a multiple of the unit, never a percentage over 100%: that "
                  "run took longer than the timed ones (tracer or profiler cost), or, under programmatic dependent "
                  "launch, a kernel's duration includes its wait for the kernel ahead.")


def sig3(x):
    """3 significant digits without exponent (ratios)."""
    if x == 0:
        return "0"
    e = math.floor(math.log10(abs(x)))
    d = max(0, 2 - e)
    return f"{round(x, d):,.{d}f}"


def is_torch(phase):
    """PyTorch from Python (pytorch_*) or from C++ (libtorch_*)."""
    return phase.startswith("pytorch") or phase.startswith("libtorch")


def is_jax(phase):
    """The JAX twin (jax_linreg, jax_mlp)."""
    return phase.startswith("jax_")


def is_twin(phase):
    """A framework twin: PyTorch (from Python or C++) or JAX; everything else is ours or a tool."""
    return is_torch(phase) or is_jax(phase)


def framework(phase):
    """'PyTorch' (Python or C++), 'JAX', or None for ours."""
    return "JAX" if is_jax(phase) else "PyTorch" if is_torch(phase) else None


def label(phase, impl):
    """Human name of a series, e.g. 'phase 2 shared mem', 'PyTorch eager (sync every epoch)', 'JAX jit-run'."""
    if is_twin(phase) and impl.endswith(NOT_FP32):
        return label(phase, impl[: -len(NOT_FP32)]) + ", TF32 matmuls (not fp32 numerics)"
    if is_jax(phase):
        return TWIN_TITLE.get(impl, "JAX " + (impl[len("jax-"):] if impl.startswith("jax-") else impl))
    if is_twin(phase):
        base = impl[len("pytorch-"):] if impl.startswith("pytorch-") else impl  # libtorch-*: kept whole
        sync = base.endswith("-sync-every-epoch")
        if sync:
            base = base[: -len("-sync-every-epoch")]
        name = TWIN_TITLE.get(base, "PyTorch " + base)
        return name + (" (sync every epoch)" if sync else "")
    title = PHASE_TITLE.get(phase, phase)
    if impl == "cuda":
        return title + (" own GEMM" if phase == "phase5_batched" else "")
    if impl == "cuda-fp16" and phase == "phase5_batched":
        return title + " own GEMM fp16"
    return f"{title} {IMPL_TITLE.get(impl, impl)}"


def series_sort_key(key):
    phase, impl = key
    if key in OURS_ORDER:
        oi = OURS_ORDER.index(key)
    elif key in SWEEP_PATHS:  # right after phase 5's default path
        oi = OURS_ORDER.index(BATCH_DEFAULT) + (1 + SWEEP_PATHS.index(key)) / (1 + len(SWEEP_PATHS))
    else:
        oi = len(OURS_ORDER)
    base = impl.replace("-sync-every-epoch", "")
    ti = TWIN_IMPLS.index(base) if base in TWIN_IMPLS else len(TWIN_IMPLS)
    pi = PHASE_ORDER.index(phase) if phase in PHASE_ORDER else len(PHASE_ORDER)
    return (1 if is_twin(phase) else 0, oi, ti, "sync-every-epoch" in impl, pi, phase, impl)


# One colour language: ours in shades of blue, darker up the ladder; PyTorch in shades of red; JAX in greens.
_COLORS_OURS = ["#c6dbef", "#9ecae1", "#7fb2d9", "#6baed6", "#8fb8de", "#4292c6", "#2171b5", "#3a6fb0", "#08519c", "#08306b",
                "#0b2a5e", "#041f4a", "#021433", "#0a0a8f"]  # one per OURS_ORDER entry
_COLORS_SWEEP = ["#9e9ac8", "#6a51a3", "#3f007d", "#bcbddc", "#807dba", "#e6550d", "#fdae6b",
                 "#54278f"]  # one per SWEEP_PATHS entry
_COLORS_TWIN = {"pytorch-cpu": "#bdbdbd", "pytorch-eager": "#fcae91", "pytorch-compile": "#fb6a4a",
                "pytorch-compile-max-autotune": "#ef3b2c", "pytorch-graph": "#cb181d",
                "pytorch-compiled-graph": "#67000d", "libtorch-eager": "#fc9272", "libtorch-graph": "#a50f15"}
_COLORS_JAX = {"jax-jit-step": "#a1d99b", "jax-jit-epoch": "#41ab5d", "jax-jit-run": "#00441b"}


def color(key):
    phase, impl = key
    if key in OURS_ORDER:
        return _COLORS_OURS[OURS_ORDER.index(key)]
    if key in SWEEP_PATHS:
        return _COLORS_SWEEP[SWEEP_PATHS.index(key)]
    base = impl.replace("-sync-every-epoch", "").replace(NOT_FP32, "")
    if is_jax(phase):
        return _COLORS_JAX.get(base, "#238b45")
    if is_twin(phase):
        return _COLORS_TWIN.get(base, "#636363")
    return "#252525"


# Ours: a marker per path as well as a shade of blue, so that neighbouring shades stay apart (twins: squares,
# JAX: diamonds).
_MARKERS_OURS = {("phase3_fused_streams", "cuda-graph"): "v", ("phase4_mlp", "cuda-fp32"): "<",
                 ("phase4_mlp", "cuda-fp16"): ">", ("phase5_batched", "cuda-fp16"): "P",
                 ("phase5_batched", "cuda-cublaslt"): "X", ("phase5_batched", "cuda-persistent"): "^",
                 ("phase5_batched", "cuda-pipelined"): "v", ("phase5_batched", "cuda-cluster"): "*",
                 ("phase5_batched", "cuda-cluster32"): "h", ("phase5_batched", "cuda-grid"): "p",
                 ("phase5_batched", "cuda-row-chain"): "d", ("phase5_batched", "cuda-fp16-row-chain"): "8",
                 ("phase5_batched", "cuda-fp16-wgmma"): "H"}


def marker(key):
    return "D" if is_jax(key[0]) else "s" if is_twin(key[0]) else _MARKERS_OURS.get(tuple(key), "o")


def linestyle(key):
    return ":" if key[1].endswith(NOT_FP32) else "--" if "sync-every-epoch" in key[1] else "-"


# Ablation runs of the MLP benchmark: the default trainer with one optimisation switched off
# (--backward paired: tag suffix -paired; --pdl off: -nopdl). They share their default run's slot:
# figures of time take the default run; figures of kernels (breakdown, efficiency) take a run
# without programmatic dependent launch where there is one, because under PDL a kernel starts
# before the one ahead of it has finished and CUPTI's duration then includes that wait.
ABLATIONS = ("-paired", "-nopdl", "-breakdown", "-tile")  # --breakdown runs time themselves with clock stamps;
# -tile: phase 5 with --fp32-gemm tile (the 32 x 64 SIMT tile for every product, no GEMM step 5)


def is_ablation(r):
    return any(r.tag.endswith(s) for s in ABLATIONS)


def pdl_on(r):
    return dget(r.data, "metrics", "pdl") is True


def base_tag(r):
    """The tag without a trailing -<implementation> (e.g. 'headline-eager' -> 'headline')."""
    tag = r.tag
    for s in ABLATIONS:
        if tag.endswith(s) and len(tag) > len(s):
            tag = tag[: -len(s)]
    # the MLP benchmark names our variants in the tag: w1-own, w1-own-fp16, w2-h128-cublaslt, ...
    # (tried first, so that 'w1-own-fp16' loses 'own-fp16', not just 'fp16')
    for c in ("own-fp16", "own-fp32", "own", "cublaslt", "lt"):
        if tag.endswith("-" + c) and len(tag) > len(c) + 1:
            return tag[: -len(c) - 1]
    cands = sorted({r.impl, r.impl.replace("pytorch-", "", 1), r.impl.replace("cuda-", "", 1),
                    r.impl.replace("libtorch-", "", 1), r.impl.replace("jax-", "", 1), "fp16", "fp32"},
                   key=lambda s: (-len(s), s))
    for c in cands:
        if c and tag.endswith("-" + c) and len(tag) > len(c) + 1:
            return tag[: -len(c) - 1]
    return tag


def newest_first(records):
    return sorted(records, key=lambda r: (r.utc_time, r.path), reverse=True)


def is_quick(r):
    """A record of `make run`'s quick notebook (top-level run_mode "quick"); records without the field
    predate it and count as full runs."""
    return r.data.get("run_mode") == "quick"


def is_check(r):
    """A correctness run (bench --check, probes): tags check* / probe*. Never a benchmark's number."""
    return r.tag.startswith("check") or r.tag.startswith("probe")


def benchmarks(records):
    """The records a benchmark slot may take: no check run stands in for a benchmark."""
    return [r for r in records if not is_check(r)]


def pick_one(records, slot_name, dup_notes, prefer=is_ablation):
    """Of several records filling one slot: a full run's before a quick one's (make run's quick
    notebook), then the newest of those `prefer` ranks first (False before True: by default the
    default run before its ablations); notes the choice."""
    rs = sorted(newest_first(records), key=lambda r: (is_quick(r), prefer(r)))
    if len(rs) > 1:
        why = "newest"
        if prefer(rs[0]) != prefer(rs[-1]):
            why = "newest run without PDL" if prefer is pdl_on else "newest default run, not an ablation"
        if is_quick(rs[-1]) and not is_quick(rs[0]):
            why += " full run, not a quick one"
        dup_notes.append(f"{slot_name}: {len(rs)} records; used `{rs[0].file}` ({why}), "
                         f"not {', '.join('`' + r.file + '`' for r in rs[1:])}")
    return rs[0]


def group_pick(records, keyf, slot_namef, dup_notes, prefer=is_ablation):
    groups = {}
    for r in records:
        k = keyf(r)
        if k is None:
            continue
        groups.setdefault(k, []).append(r)
    return {k: pick_one(v, slot_namef(k), dup_notes, prefer)
            for k, v in sorted(groups.items(), key=lambda kv: str(kv[0]))}


def date_range(records):
    ds = sorted({r.date for r in records})
    if not ds:
        return ""
    return ds[0] if ds[0] == ds[-1] else f"{ds[0]} to {ds[-1]}"


def is_host_source(r):
    return str(r.config.get("source", "")).lower() == "host"


def repeats_of(r):
    v = num(dget(r.data, "timing", "repeats"))
    if v is None:
        v = r.cfg_num("repeats")
    return int(v) if v and v >= 1 else 1


def hidden_of(r):
    """First hidden width of an MLP record: config.layers ('784,h,h,h,10' or a list), else tag h<h>."""
    layers = r.config.get("layers")
    vals = None
    if isinstance(layers, str):
        try:
            vals = [int(x) for x in layers.split(",") if x.strip()]
        except ValueError:
            vals = None
    elif isinstance(layers, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in layers):
        vals = layers
    if vals and len(vals) >= 3:
        return vals[1]
    m = re.search(r"h(\d+)", r.tag)
    return int(m.group(1)) if m else None


def pct_values(vals):
    """Accuracies in [0, 1] become percent; already-percent values stay."""
    vs = [num(v) for v in vals]
    if any(v is None for v in vs) or not vs:
        return None
    return [v * 100 for v in vs] if max(vs) <= 1.0 else vs


def peaks_for(records):
    """(copy_gbps, fp16_tflops, source record or None): the ceilings record wins, else any
    record that measured peaks (newest)."""
    def has(r):
        return num(dget(r.data, "peaks", "copy_gbps")) is not None or num(dget(r.data, "peaks", "fp16_tflops")) is not None
    ceil = [r for r in records if (r.phase == "ceilings" or r.workload == "ceilings") and has(r)]
    others = [r for r in records if has(r) and r not in ceil]
    for pool in (ceil, others):
        if pool:
            r = newest_first(pool)[0]
            return num(dget(r.data, "peaks", "copy_gbps")), num(dget(r.data, "peaks", "fp16_tflops")), r
    return None, None, None


# ------------------------------------------------------------------ figure 1: linreg ladder

def select_ladder(records, dup_notes):
    cands = [r for r in records if r.workload == "linreg" and base_tag(r).startswith("headline")
             and not is_host_source(r) and r.total_ms() is not None]
    picked = group_pick(cands, lambda r: (r.phase, r.impl), lambda k: f"Figure 1 {label(*k)}", dup_notes)
    keys = sorted(picked, key=series_sort_key)
    eager = picked.get(("pytorch_linreg", "pytorch-eager"))
    eager_ms = eager.total_ms() if eager else None
    rows = []
    for k in keys:
        r = picked[k]
        ms = r.total_ms()
        rows.append({"key": k, "label": label(*k), "ms": ms, "min": r.total_ms("min"), "max": r.total_ms("max"),
                     "repeats": repeats_of(r), "speedup": (eager_ms / ms) if eager_ms and ms else None,
                     "record": r})
    missing = [label(*k) for k in LINREG_IMPLS if k not in picked]
    # (a floor whose record is missing is left out of the figure; floors["missing"] says which)
    floors = linreg_floors(records, picked.get(("phase3_fused_streams", "cuda")))
    return {"rows": rows, "eager": eager, "missing": missing, "floors": floors,
            "records": [picked[k] for k in keys] + floors["records"]}


def linreg_floors(records, p3):
    """Three reference lines of the 5M x 200 headline: the train split read once an epoch at the
    measured HBM copy bandwidth, the same bytes at the measured L2 read bandwidth (a rung that keeps
    the points on chip, as phase 3's persistent kernel does, runs below both: they are rates, not
    floors), and 200 bare grid barriers (the `grid_barrier` tool's cheapest barrier): the least a
    loop of 200 dependent epochs with grid-wide sums can take on chip, the one floor. Values in ms; absent when their record is missing. Plus the
    algebraic note: full-batch GD on y = w*x + b needs only sum x, sum y, sum x^2, sum xy (one pass)."""
    n = int(p3.cfg_num("n")) if p3 is not None and p3.cfg_num("n") else 5000000
    epochs = int(p3.cfg_num("epochs")) if p3 is not None and p3.cfg_num("epochs") else 200
    nbytes = bytes_per_epoch_linreg(n)
    out = {"n": n, "epochs": epochs, "bytes_per_epoch": nbytes, "lines": [], "records": [], "missing": [],
           "algebraic_note": (f"algebraic limit: full-batch gradient descent on y = w·x + b needs only Σx, Σy, Σx², Σxy "
                              f"(one pass over the {n:,} points, then {epochs} scalar updates); no loop written as "
                              "training reaches it")}
    copy_gbps, _, peak_rec = peaks_for(records)
    if copy_gbps:
        out["lines"].append({"name": "HBM", "ms": nbytes * epochs / (copy_gbps * 1e9) * 1e3,
                             "label": f"x, y read from HBM every epoch: {nbytes / 1e6:.0f} MB × {epochs} at {copy_gbps:.0f} GB/s (copy ceiling)"})
        out["records"].append(peak_rec)
    else:
        out["missing"].append("HBM reading line: no record with peaks.copy_gbps on this device")
    gb = [r for r in records if r.phase == "grid_barrier" and num(dget(r.data, "l2_read", "gbps"))
          and num(dget(r.data, "barrier", "floor_us_per_barrier"))]
    if gb:
        r = newest_first(gb)[0]
        l2 = num(dget(r.data, "l2_read", "gbps"))
        us = num(dget(r.data, "barrier", "floor_us_per_barrier"))
        out["lines"].append({"name": "L2", "ms": nbytes * epochs / (l2 * 1e9) * 1e3,
                             "label": f"x, y read from L2 every epoch: {nbytes / 1e6:.0f} MB × {epochs} at {l2:.0f} GB/s (measured L2 read)"})
        out["lines"].append({"name": "barrier", "ms": us * epochs * 1e-3,
                             "label": f"on-chip floor: {epochs} bare grid barriers × {us:.2f} µs"})
        out["records"].append(r)
    else:
        out["missing"].append("L2 reading line and on-chip floor: no `grid_barrier` record on this device")
    return out


# ------------------------------------------------------------------ figure 2: scaling

def bytes_per_epoch_linreg(n):
    n_train = n - n // 5  # test points are p % 5 == 4, p < n (linreg_data.h)
    return 8 * n_train


def full_run_lanes(records):
    """The lanes a device's full run (`run_all__full`, `make run FULL=1`) ran side by side: its GPUs."""
    return max([int(num(dget(r.data, "config", "gpus")) or 1) for r in records
                if r.phase == "run_all" and dget(r.data, "config", "mode") == "full"] or [1])


def select_scaling(records, dup_notes, lanes=1):
    """Figure 2's series; lanes: full_run_lanes of the device (a CPU twin timed in a multi-lane full run
    shared its host)."""
    cands = [r for r in records if r.workload == "linreg" and base_tag(r).startswith("sweep")
             and not is_host_source(r) and r.cfg_num("n") and r.total_ms() is not None]
    picked = group_pick(cands, lambda r: (r.phase, r.impl, int(r.cfg_num("n"))),
                        lambda k: f"Figure 2 {label(k[0], k[1])} n={k[2]}", dup_notes)
    series = {}
    for (phase, impl, n), r in picked.items():
        series.setdefault((phase, impl), []).append((n, r.total_ms(), r))
    for k in series:
        series[k].sort(key=lambda t: t[0])
    copy_gbps, _, peak_rec = peaks_for(records)
    epochs = sorted({int(r.cfg_num("epochs")) for r in picked.values() if r.cfg_num("epochs")})
    floor = None
    if copy_gbps and len(epochs) == 1 and picked:
        ns = sorted({k[2] for k in picked})
        floor = {"epochs": epochs[0], "copy_gbps": copy_gbps, "record": peak_rec,
                 "points": [(n, bytes_per_epoch_linreg(n) * epochs[0] / (copy_gbps * 1e9) * 1e3) for n in ns]}
    missing = []
    for k in LINREG_IMPLS:
        want = [n for n in SWEEP_NS if not (k[1] == "pytorch-cpu" and n > 10000000)]
        have = {p[0] for p in series.get(k, [])}
        lack = [n for n in want if n not in have]
        if not have:
            missing.append(f"{label(*k)}: no records")
        elif lack:
            missing.append(f"{label(*k)}: n = {', '.join(format(n, ',') for n in lack)}")
    if picked and not copy_gbps:
        missing.append("bandwidth floor: no `ceilings` record with peaks.copy_gbps on this device")
    elif picked and len(epochs) != 1:
        missing.append(f"bandwidth floor: sweep records disagree on epochs ({epochs}); floor not drawn")
    recs = [p[2] for k in sorted(series, key=series_sort_key) for p in series[k]]
    # A CPU twin timed inside a full run whose lanes ran side by side shared its host with the other lanes:
    # its times are the contended host's, said beside the series (profiles/README.md says the same).
    notes = {}
    for k, pts in series.items():
        if k[1] == "pytorch-cpu" and lanes > 1 and pts and all(p[2].data.get("run_mode") == "full" for p in pts):
            notes[k] = f"timed beside {lanes - 1} other busy benchmark lanes (a shared host)"
    return {"series": {k: series[k] for k in sorted(series, key=series_sort_key)}, "floor": floor,
            "missing": missing, "records": recs + ([peak_rec] if floor else []), "notes": notes}


# ------------------------------------------------------------------ figure 3: where an epoch goes

CATEGORIES = ["forward", "loss", "backward", "update", "fused", "eval", "copies", "other"]
_KEYWORDS = [
    ("update", ("update", "sgd", "adam", "optimizer", "optim")),
    ("backward", ("backward", "bwd", "grad", "dgrad", "wgrad")),
    ("loss", ("loss", "mse", "cross_entropy", "crossentropy", "xent", "softmax", "nll")),
    ("eval", ("eval", "test", "accuracy")),
    ("forward", ("forward", "fwd", "predict", "gemm", "matmul", "relu", "bias", "dropout", "linear")),
    ("copies", ("copy", "gather")),
]
CATEGORY_RULES = [
    "memcpy entries of kind HtoD, DtoH, DtoD -> copies; memset -> other",
    "kernel named with 'fused' and matching two or more of the keyword groups below (or none) -> fused",
    "otherwise the first matching group, in this order: " + "; ".join(
        f"{c}: {', '.join(kw)}" for c, kw in _KEYWORDS),
    "anything else (e.g. PyTorch's generic elementwise/reduce kernels) -> other",
]


def kernel_category(name):
    low = name.lower()
    hits = [c for c, kws in _KEYWORDS if any(k in low for k in kws)]
    if "fused" in low and len(hits) != 1:
        return "fused"
    return hits[0] if hits else "other"


def epoch_breakdown(r):
    """Device µs per epoch by category, from the record's kernel and memcpy summaries.
    Ours: per epoch = summary total / (repeats x epochs) (the tracer is cleared after the warm-up,
    so the summary covers the measured repeats). Twins: torch.profiler watches one extra untimed
    run (baselines/pytorch --profile), so per epoch = summary total / epochs."""
    epochs = r.cfg_num("epochs")
    if not epochs:
        return None
    div = summary_runs(r) * epochs
    cats = {c: 0.0 for c in CATEGORIES}
    kern_rows = []
    for k in as_list(r.data.get("kernels")):
        if not isinstance(k, dict) or not isinstance(k.get("name"), str):
            continue
        t = num(k.get("total_ns"))
        if t is None:
            continue
        c = kernel_category(k["name"])
        cats[c] += t / div / 1e3
        kern_rows.append((k["name"], c, t / div / 1e3, num(k.get("calls"))))
    for m in as_list(r.data.get("memcpy")):
        if not isinstance(m, dict):
            continue
        t = num(m.get("total_ns"))
        if t is None:
            continue
        kind = str(m.get("kind", ""))
        c = "other" if kind.lower() == "memset" else "copies"
        cats[c] += t / div / 1e3
        kern_rows.append((f"[{kind}]", c, t / div / 1e3, num(m.get("calls"))))
    if not kern_rows:
        return None
    measured_us = r.total_ms() * 1e3 / epochs if r.total_ms() is not None else None
    return {"cats": cats, "kernels": sorted(kern_rows, key=lambda x: (-x[2], x[0])),
            "sum_us": sum(cats.values()), "measured_us": measured_us, "divisor": div}


def summary_runs(r):
    """How many training runs a record's kernel/range summary covers (see epoch_breakdown): its
    trace_runs where it says (runs traced after the timed ones, or the timed runs themselves), else
    1 for a twin (torch.profiler watches one extra untimed run), else the timed repeats."""
    t = num(r.data.get("trace_runs"))
    if t is not None and t >= 1:
        return int(t)
    return 1 if is_twin(r.phase) else repeats_of(r)


def tracer_cost(records):
    """Records that time their runs without our CUPTI tracer and then trace one more run
    (timing.traced_run_ms): what the tracer cost, as the traced run's time over the median timed
    run's. Rows sorted by that ratio, largest first."""
    rows = []
    for r in records:
        traced = num(dget(r.data, "timing", "traced_run_ms"))
        timed = r.total_ms()
        runs = num(r.data.get("trace_runs"))
        if traced is None or not timed or runs != 1:
            continue
        rows.append({"record": r, "label": label(r.phase, r.impl), "tag": base_tag(r), "timed_ms": timed,
                     "traced_ms": traced, "ratio": traced / timed})
    return sorted(rows, key=lambda x: (-x["ratio"], x["record"].path))


def range_breakdown(r):
    """Host µs per NVTX category (ranges summary) per epoch; nested ranges overlap."""
    epochs = r.cfg_num("epochs")
    if not epochs:
        return None
    div = summary_runs(r) * epochs
    cats = {}
    for g in as_list(r.data.get("ranges")):
        if not isinstance(g, dict):
            continue
        t = num(g.get("total_ns"))
        if t is None:
            continue
        c = str(g.get("category") or "?")
        cats[c] = cats.get(c, 0.0) + t / div / 1e3
    return cats or None


def select_breakdown(records, dup_notes):
    panels = []
    specs = [("linreg", "linreg 5M x 200 (headline)", lambda r: base_tag(r).startswith("headline")
              and not is_host_source(r), LINREG_IMPLS),
             ("mlp_w1", "MLP W1 (tag w1)", lambda r: base_tag(r) == "w1", MLP_IMPLS)]
    missing = []
    used = []
    for wl, title, pred, expected in specs:
        cands = [r for r in records if r.workload == wl and pred(r) and epoch_breakdown(r) is not None]
        picked = group_pick(cands, lambda r: (r.phase, r.impl), lambda k: f"Figure 3 {title} {label(*k)}", dup_notes,
                            prefer=pdl_on)
        keys = sorted(picked, key=series_sort_key)
        bars = [{"key": k, "label": label(*k), "record": picked[k], **epoch_breakdown(picked[k]),
                 "ranges": range_breakdown(picked[k])} for k in keys]
        if bars:
            panels.append({"workload": wl, "title": title, "bars": bars})
            used += [picked[k] for k in keys]
        lack = [label(*k) for k in expected if k not in picked]
        if lack:
            missing.append(f"{title}: no kernel summary from " + ", ".join(lack))
    return {"panels": panels, "missing": missing, "records": used}


# ------------------------------------------------------------------ figure 4: phase-3 timeline

def _is_copy(e):
    s = (e["cat"] + " " + e["name"]).lower()
    return any(k in s for k in ("memcpy", "memset", "htod", "dtoh", "dtod"))


def _is_host(e, pnames):
    s = (e["cat"] + " " + pnames.get(e["pid"], "")).lower()
    return any(k in s for k in ("nvtx", "range", "host", "cpu"))


def _union(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _intersect_len(u1, u2):
    i = j = 0
    tot = 0.0
    while i < len(u1) and j < len(u2):
        a, b = max(u1[i][0], u2[j][0]), min(u1[i][1], u2[j][1])
        if b > a:
            tot += b - a
        if u1[i][1] < u2[j][1]:
            i += 1
        else:
            j += 1
    return tot


def trace_path(r):
    tf = r.data.get("trace_file")
    if not isinstance(tf, str) or not tf:
        return None
    # The trace sits next to its record (profiles/README.md). A record written with --out on
    # another machine names the path it had there (e.g. /root/out/profiles/...): the file of that
    # name beside the record is the one that travelled with it.
    beside = os.path.join(os.path.dirname(r.abspath), os.path.basename(tf))
    if present(beside):
        return beside
    if os.path.isabs(tf):
        return tf
    # a path relative to the repository root (the profiles folder's parent)
    root = os.path.dirname(os.path.dirname(os.path.dirname(r.abspath)))
    return os.path.join(root, tf)


def select_timeline(records, dup_notes):
    cands = [r for r in records if r.phase == "phase3_fused_streams" and trace_path(r)]
    if not cands:
        return {"missing": ["no phase3_fused_streams record names a trace_file"], "records": []}

    def pref(r):
        m = re.match(r"host-streams(\d+)", base_tag(r))
        return (1 if m else 0, int(m.group(1)) if m else 0, r.utc_time, r.path)
    problems = []
    for r in sorted(cands, key=pref, reverse=True):
        p = trace_path(r)
        if not present(p):
            problems.append(f"`{r.file}` names trace `{r.data.get('trace_file')}`, which is not there")
            continue
        events, tnames, pnames, problem = read_chrome_trace(p)
        if problem:
            problems.append(f"`{r.file}`: trace `{os.path.basename(p)}`: {problem}")
            continue
        gpu = [e for e in events if not _is_host(e, pnames)]
        kernels = [e for e in gpu if not _is_copy(e)]
        if not kernels:
            problems.append(f"`{r.file}`: trace `{os.path.basename(p)}` holds no kernel events")
            continue
        counts, busy = {}, {}
        for e in kernels:
            counts[e["name"]] = counts.get(e["name"], 0) + 1
            busy[e["name"]] = busy.get(e["name"], 0.0) + e["dur"]
        # the per-epoch kernel: launched most often; a tie goes to the one with more GPU time
        epoch_kernel = sorted(counts, key=lambda n: (-counts[n], -busy[n], n))[0]
        first = next(e for e in kernels if e["name"] == epoch_kernel)
        # the window opens where the GPU activity leading up to that first epoch kernel starts: walk
        # back from it until a gap of more than 200 µs (warm-up runs and set-up lie before such a gap)
        t0 = first["ts"]
        for e in sorted((e for e in gpu if e["ts"] <= first["ts"]), key=lambda e: -(e["ts"] + e["dur"])):
            if e["ts"] + e["dur"] < t0 - 200.0:
                break
            t0 = min(t0, e["ts"])
        t1 = first["ts"] + first["dur"]
        win = [e for e in events if e["ts"] < t1 and e["ts"] + e["dur"] > t0]
        rows = sorted({(e["pid"], e["tid"]) for e in win},
                      key=lambda pt: (0 if any(_is_host(e, pnames) for e in win if (e["pid"], e["tid"]) == pt) else 1,
                                      _natural(pt[0]), _natural(pt[1])))
        row_names = {}
        for pid, tid in rows:
            nm = tnames.get((pid, tid))
            if not nm:
                pn = pnames.get(pid, f"pid {pid}")
                nm = f"{pn} / tid {tid}"
            row_names[(pid, tid)] = nm
        copies = _union([(e["ts"], e["ts"] + e["dur"]) for e in win if _is_copy(e) and not _is_host(e, pnames)])
        kerns = _union([(e["ts"], e["ts"] + e["dur"]) for e in win if not _is_copy(e) and not _is_host(e, pnames)])
        copy_us = sum(b - a for a, b in copies)
        overlap = _intersect_len(copies, kerns)
        return {"record": r, "trace": p, "events": win, "rows": rows, "row_names": row_names, "t0": t0, "t1": t1,
                "epoch_kernel": epoch_kernel, "epoch_kernel_calls": counts[epoch_kernel],
                "copy_us": copy_us, "kernel_us": sum(b - a for a, b in kerns), "overlap_us": overlap,
                "pnames": pnames, "missing": problems, "records": [r]}
    return {"missing": problems, "records": []}


def _natural(s):
    return (0, int(s), "") if re.fullmatch(r"-?\d+", s) else (1, 0, s)


# ------------------------------------------------------------------ figures 5-7, 9: MLP

def epoch_ms(r):
    e = r.cfg_num("epochs")
    t = r.total_ms()
    return t / e if e and t is not None else None


def step_ms(r):
    s = r.cfg_num("steps")
    t = r.total_ms()
    if s and t is not None:
        return t / s
    return num(dget(r.data, "timing", "per_step_ms", "median"))


def w1_rows(records, tag, slot, dup_notes):
    """One row per implementation of the W1 runs whose base tag is `tag` (newest record of each),
    sorted as the figures are; the speed-up is against PyTorch eager of the same tag."""
    cands = [r for r in records if r.workload == "mlp_w1" and base_tag(r) == tag and epoch_ms(r) is not None]
    picked = group_pick(cands, lambda r: (r.phase, r.impl), lambda k: f"{slot} {label(*k)}", dup_notes)
    keys = sorted(picked, key=series_sort_key)
    eager = picked.get(("pytorch_mlp", "pytorch-eager"))
    rows = []
    for k in keys:
        r = picked[k]
        acc = pct_values(as_list(dget(r.data, "metrics", "test_accuracy_per_epoch")))
        fa = r.metric("test_accuracy")
        rows.append({"key": k, "label": label(*k), "epoch_ms": epoch_ms(r), "acc_per_epoch": acc,
                     "final_acc": (fa * 100 if fa is not None and fa <= 1.0 else fa),
                     "speedup": (epoch_ms(eager) / epoch_ms(r)) if eager else None,
                     "peak_mem": r.metric("peak_device_memory_bytes"), "record": r})
    return picked, keys, rows


def select_w1(records, dup_notes):
    picked, keys, rows = w1_rows(records, "w1", "Figure 5", dup_notes)
    # the same model and flags on Fashion-MNIST (tags w1-fashion-*): a table, not drawn
    _, _, fashion = w1_rows(records, "w1-fashion", "Fashion-MNIST", dup_notes)
    # the seed study: accuracy per seed (tags w1-seed<k>)
    seeds = {}
    for r in records:
        m = re.fullmatch(r"w1-seed(\d+)", base_tag(r))
        if r.workload == "mlp_w1" and m and r.metric("test_accuracy") is not None:
            seeds.setdefault((r.phase, r.impl), {}).setdefault(int(m.group(1)), []).append(r)
    seed_rows = []
    for k in sorted(seeds, key=series_sort_key):
        per = {s: pick_one(v, f"seed study {label(*k)} seed {s}", dup_notes) for s, v in sorted(seeds[k].items())}
        accs = [(s, (lambda a: a * 100 if a <= 1.0 else a)(r.metric("test_accuracy")), r) for s, r in per.items()]
        seed_rows.append({"key": k, "label": label(*k), "accs": accs,
                          "mean": statistics.fmean(a for _, a, _ in accs)})
    missing = [label(*k) for k in MLP_IMPLS if k not in picked]
    return {"rows": rows, "missing": missing, "seeds": seed_rows, "fashion": fashion,
            "records": [picked[k] for k in keys] + [r for s in seed_rows for _, _, r in s["accs"]]}


def select_w2(records, dup_notes):
    cands = [r for r in records if r.workload == "mlp_w2" and hidden_of(r) and step_ms(r) is not None
             and not r.tag.startswith("check")]  # --check runs validate odd shapes; they are not the sweep
    picked = group_pick(cands, lambda r: (r.phase, r.impl, hidden_of(r)),
                        lambda k: f"Figure 6 {label(k[0], k[1])} h={k[2]}", dup_notes)
    series = {}
    for (phase, impl, h), r in picked.items():
        series.setdefault((phase, impl), []).append((h, step_ms(r), r))
    for k in series:
        series[k].sort(key=lambda t: t[0])
    keys = sorted(series, key=series_sort_key)
    # relative speed: the fastest framework mode (PyTorch, libtorch or JAX) at that h / ours
    twin_best = {}
    for k in keys:
        if is_twin(k[0]):
            for h, ms, r in series[k]:
                if h not in twin_best or ms < twin_best[h][0]:
                    twin_best[h] = (ms, k, r)
    rel = {}
    for k in keys:
        if is_twin(k[0]):
            continue
        pts = [(h, twin_best[h][0] / ms, label(*twin_best[h][1])) for h, ms, _ in series[k] if h in twin_best and ms]
        if pts:
            rel[k] = pts
    missing = []
    # W2 is fp16 matrix math: phase 5's own GEMMs run it in fp16 only (phase 4 runs both precisions);
    # the persistent kernel is fp32 with two hidden layers (W1's shape), never W2's; the cluster
    # kernel holds the model in 16 blocks' shared memory, which only h = 128 fits; the grid kernel
    # (rung 5g) runs at any width but is not expected yet: drawn wherever its records are, never listed missing
    expect = {("phase5_batched", "cuda-cluster"): [128]}
    # the libtorch twin trains W1 only
    for k in [k for k in MLP_IMPLS if k not in (("phase5_batched", "cuda"), ("phase5_batched", "cuda-persistent"),
                                                ("phase5_batched", "cuda-pipelined"),
                                                ("phase5_batched", "cuda-cluster32"))
              and k[0] != "libtorch_mlp"] + list(expect):
        have = {p[0] for p in series.get(k, [])}
        lack = [h for h in expect.get(k, W2_HS) if h not in have]
        if not have:
            missing.append(f"{label(*k)}: no records")
        elif lack:
            missing.append(f"{label(*k)}: h = {', '.join(str(h) for h in lack)}")
    floor = w2_floor(records, sorted({h for pts in series.values() for h, _, _ in pts}),
                     [p[2] for k in keys for p in series[k]])
    if series:
        missing += floor["missing"]
    return {"series": {k: series[k] for k in keys}, "rel": rel, "twin_best": twin_best, "missing": missing,
            "floor": floor, "records": [p[2] for k in keys for p in series[k]] + floor["records"]}


def w2_best_phase5(series):
    """{h: (ms, record)}: the fastest of phase 5's W2 paths (W2_PHASE5_PATHS: own GEMMs fp16, cluster
    kernel, grid kernel) at each width where one has a point; series is select_w2's. A tie goes to the
    path listed first."""
    best = {}
    for k in W2_PHASE5_PATHS:
        for h, t, r in series.get(k, []):
            if t is not None and (h not in best or t < best[h][0]):
                best[h] = (t, r)
    return best


W2_BYTES_PER_PARAM = 14  # an SGD step that streams its weights: fp16 read by the forward and the
                         # backward-data products (2 + 2), the fp32 master read and written (4 + 4),
                         # its fp16 copy written (2)


def exchange_phase(records):
    """One product phase of W2's grid step alone (`tools/exchange_product`): the newest passing record that
    is not a check (tags `memcheck*`, `check*`, `probe*`), as {"record", "ks": [K...], "rows": [{"name",
    "exchange", "weights", "cells": {K: (us_per_round, product_us or None for a bare round)}}], "bare":
    {K: us}, "own": {K: us with 8-byte fragments straight from L2, the grid kernel's first way}, "best": {K: (name, us)}} (bare, own and best: the rows with the SM
    to themselves, no busy team), or None."""
    cands = [r for r in records if r.phase == "exchange_product" and r.status == "ok"
             and dget(r.data, "validation", "passed") is True
             and not re.match(r"(memcheck|check|probe)", r.tag or "")]
    if not cands:
        return None
    r = newest_first(cands)[0]
    shapes = [s for s in as_list(dget(r.data, "latency", "shapes")) if isinstance(s, dict) and num(s.get("K"))]
    ks = sorted(int(s["K"]) for s in shapes)
    rows, order, bare, own, best = {}, [], {}, {}, {}
    for s in shapes:
        K = int(s["K"])
        for st in as_list(s.get("strategies")):
            if not isinstance(st, dict) or st.get("skipped") or num(st.get("us_per_round")) is None:
                continue
            name = str(st.get("strategy"))
            if name not in rows:
                order.append(name)
                rows[name] = {"name": name, "exchange": st.get("exchange") or "L2, a grid barrier",
                              "weights": st.get("weights") or "shared", "cells": {}}
            is_bare = not num(st.get("fragment_bytes"))
            us = num(st["us_per_round"])
            rows[name]["cells"][K] = (us, None if is_bare else num(st.get("product_us")))
            team = bool(st.get("busy_team"))
            if is_bare and str(st.get("staging")) == "none" and not team:
                bare[K] = us
            if str(st.get("staging")) == "direct" and num(st.get("fragment_bytes")) == 8 and rows[name]["weights"] == "shared" and not team:
                own[K] = us
            if not is_bare and not team and (K not in best or us < best[K][1]):
                best[K] = (name, us)
    return {"record": r, "ks": ks, "rows": [rows[n] for n in order], "bare": bare, "own": own, "best": best}


def w2_floor(records, hs, runs):
    """The least a W2 step (784-h-h-h-10, SGD, the batch of its runs) can take where it streams its
    weights from memory, at each width h: the larger of its FLOPs at the measured fp16 tensor-core
    ceiling (forward and weight gradients 2·B·P each, P the weights; backward-data 2·B·(P - 784·h))
    and W2_BYTES_PER_PARAM bytes a parameter at the measured L2 read rate where they fit in the L2,
    else at the measured HBM copy rate. A path that keeps the weights on chip is bounded by its
    arithmetic and its exchanges instead. {"points": [(h, ms, bound)], "label", "records", "missing"}."""
    out = {"points": [], "label": "", "records": [], "missing": []}
    _, fp16_tflops, peak_rec = peaks_for(records)
    copy_gbps = num(dget(peak_rec.data, "peaks", "copy_gbps")) if peak_rec else None
    gb = [r for r in records if r.phase == "grid_barrier" and num(dget(r.data, "l2_read", "gbps"))
          and num(dget(r.data, "l2_read", "l2_bytes"))]
    if not (fp16_tflops and copy_gbps and gb):
        out["missing"].append("W2 floor: needs a `ceilings` record (fp16 TFLOP/s, copy GB/s) and a `grid_barrier` "
                              "record (L2 read rate) on this device")
        return out
    g = newest_first(gb)[0]
    l2_gbps, l2_bytes = num(dget(g.data, "l2_read", "gbps")), num(dget(g.data, "l2_read", "l2_bytes"))
    batches = {int(r.cfg_num("batch")) for r in runs if r.cfg_num("batch")}
    B = batches.pop() if len(batches) == 1 else 32
    for h in hs:
        P = 784 * h + 2 * h * h + 10 * h
        flops = 2 * B * (3 * P - 784 * h)
        nbytes = W2_BYTES_PER_PARAM * (P + 3 * h + 10)
        on_l2 = nbytes <= l2_bytes
        arith_ms = flops / (fp16_tflops * 1e12) * 1e3
        mem_ms = nbytes / ((l2_gbps if on_l2 else copy_gbps) * 1e9) * 1e3
        out["points"].append((h, max(arith_ms, mem_ms), "fp16 FLOPs" if arith_ms >= mem_ms else ("L2" if on_l2 else "HBM")))
    out["label"] = (f"a step that streams its weights ({W2_BYTES_PER_PARAM} B a parameter at "
                    f"{l2_gbps:.0f} GB/s L2 / {copy_gbps:.0f} GB/s HBM, FLOPs at {fp16_tflops:.0f} TFLOP/s fp16)")
    out["records"] += [peak_rec, g]
    return out


def loss_curve(r):
    """(x, y, x_unit) from loss.per_step {every, values}, else loss.per_epoch."""
    ps = dget(r.data, "loss", "per_step")
    if isinstance(ps, dict) and isinstance(ps.get("values"), list) and ps["values"]:
        every = num(ps.get("every")) or 1
        xs, ys = [], []
        for i, v in enumerate(ps["values"]):
            v = num(v)
            if v is not None:
                xs.append(int(i * every))
                ys.append(v)
        if ys:
            return xs, ys, "step"
    pe = as_list(dget(r.data, "loss", "per_epoch"))
    xs, ys = [], []
    for i, v in enumerate(pe):
        v = num(v)
        if v is not None:
            xs.append(i + 1)
            ys.append(v)
    return (xs, ys, "epoch") if ys else None


def first_exact(r):
    """loss.per_step.first_exact: the first logged steps' exact losses (phases 4/5 and the twin)."""
    v = dget(r.data, "loss", "per_step", "first_exact")
    vals = [num(x) for x in as_list(v)]
    return vals if vals and all(x is not None for x in vals) else None


def loss_reduce(r):
    ps = dget(r.data, "loss", "per_step")
    if isinstance(ps, dict) and ps.get("reduce") == "mean" and num(ps.get("every")):
        return int(num(ps["every"]))
    return None


def max_rel_gap(a, b):
    """Largest |a-b|/|b| over the x both curves share: (gap, x, the last x both share, a's last x) or None
    (a curve compared over part of its length says so: the shared range is the claim's range)."""
    bm = dict(zip(b[0], b[1]))
    best, last = None, None
    for x, y in zip(a[0], a[1]):
        ref = bm.get(x)
        if ref is None or ref == 0:
            continue
        last = x if last is None else max(last, x)
        g = abs(y - ref) / abs(ref)
        if best is None or g > best[0]:
            best = (g, x)
    return (best[0], best[1], last, max(a[0])) if best else None


def select_losses(records, dup_notes):
    panels, missing, used = [], [], []
    nodrop = [r for r in records if r.workload == "mlp_w1" and base_tag(r) == "w1-nodrop" and loss_curve(r)]
    w2 = [r for r in records if r.workload == "mlp_w2" and hidden_of(r) and loss_curve(r)
          and not r.tag.startswith("check")]
    w2_h = None
    if w2:
        by_h = {}
        for r in w2:
            by_h.setdefault(hidden_of(r), set()).add((r.phase, r.impl))
        w2_h = sorted(by_h, key=lambda h: (-len(by_h[h]), h))[0]
        w2 = [r for r in w2 if hidden_of(r) == w2_h]
    for title, rs in ((("W1 without dropout (tag w1-nodrop)"), nodrop), (f"W2, h = {w2_h}", w2)):
        if not rs:
            continue
        picked = group_pick(rs, lambda r: (r.phase, r.impl), lambda k: f"Figure 7 {title} {label(*k)}", dup_notes)
        keys = sorted(picked, key=series_sort_key)
        curves = {k: loss_curve(picked[k]) for k in keys}
        twins = [k for k in keys if is_twin(k[0])]
        ref = ("pytorch_mlp", "pytorch-eager") if ("pytorch_mlp", "pytorch-eager") in twins else (twins[0] if twins else None)
        gaps, twin_gaps, exact_gaps = {}, {}, {}
        if ref:
            ref_exact = first_exact(picked[ref])
            for k in keys:
                # ours against the reference; the frameworks' other modes too: their spread is what fp32
                # training's summation order alone does to a curve, the scale a gap of ours is read on
                if k != ref and curves[k][2] == curves[ref][2]:
                    g = max_rel_gap(curves[k], curves[ref])
                    if g:
                        (twin_gaps if is_twin(k[0]) else gaps)[k] = g
                mine = first_exact(picked[k])
                if not is_twin(k[0]) and mine and ref_exact:
                    m = min(len(mine), len(ref_exact))
                    g = max_rel_gap((list(range(m)), mine[:m]), (list(range(m)), ref_exact))
                    if g:
                        exact_gaps[k] = (g[0], g[1], m)
        means = sorted({loss_reduce(picked[k]) for k in keys} - {None})
        panels.append({"title": title, "curves": curves, "ref": ref, "gaps": gaps, "twin_gaps": twin_gaps,
                       "exact_gaps": exact_gaps,
                       "window": means[0] if len(means) == 1 else None,
                       "records": {k: picked[k] for k in keys}})
        used += [picked[k] for k in keys]
        if not ref:
            missing.append(f"{title}: no PyTorch twin curve to compare with")
        if not any(not is_twin(k[0]) for k in keys):
            missing.append(f"{title}: no curve of ours")
    if not nodrop:
        missing.append("W1 without dropout: no mlp_w1 records tagged w1-nodrop with a loss curve")
    if not w2:
        missing.append("W2: no mlp_w2 records with a loss curve")
    return {"panels": panels, "missing": missing, "records": used}


def gemm_speed_rows(r):
    """(product, own speed / cuBLASLt speed) of a GEMM comparison record, old form (`gemm_compare`:
    the largest layer's three products) or the GEMM benchmark's (`gemm_bench`: every layer's; the
    largest layer's products, the fastest own rung against cuBLASLt of the same precision)."""
    old = [row for row in as_list(dget(r.data, "metrics", "gemm_compare")) if isinstance(row, dict)]
    if old:
        return [(str(row.get("product")), num(row.get("own_over_cublaslt_speed"))) for row in old
                if num(row.get("own_over_cublaslt_speed")) is not None]
    rows = [row for row in as_list(dget(r.data, "metrics", "gemm_bench")) if isinstance(row, dict)]
    if not rows:
        return []
    size = lambda row: (num(row.get("M")) or 0) * (num(row.get("N")) or 0) * (num(row.get("K")) or 0)
    big = max(rows, key=size).get("layer")
    out = []
    for prod in ("forward", "backward-data", "weight-gradient"):
        here = [row for row in rows if row.get("layer") == big and row.get("product") == prod and num(row.get("ms"))]
        own = [num(row["ms"]) for row in here if str(row.get("impl", "")).startswith("own-")]
        lt = [num(row["ms"]) for row in here if row.get("impl") in ("cublaslt-fp32", "cublaslt-fp16")]
        if own and lt:
            out.append((prod, lt[0] / min(own)))
    return out


# The batch sweep draws every path it recorded: phase 5's --fp32-gemm choice beside its default plan,
# cuBLASLt at each precision, and a framework run whose matmuls are not fp32 (PyTorch with TF32
# allowed, JAX below "highest") as a series of its own, labelled so and never the yardstick.
NOT_FP32 = "-tf32"  # the suffix of such a framework series' implementation
BATCH_DEFAULT = ("phase5_batched", "cuda")  # phase 5's default path: its fp32-accurate GEMM plan


def fp32_matmuls(r):
    """Whether a framework record's matmuls keep fp32 numerics (PyTorch: TF32 not allowed; JAX: matmul
    precision "highest"); our own records always do (their precision is in the implementation)."""
    sw = r.data.get("software") if isinstance(r.data.get("software"), dict) else {}
    if sw.get("tf32_matmul") is True:
        return False
    prec = sw.get("matmul_precision")
    return prec in (None, "highest", "float32", "fp32")


def sweep_key(r):
    """(phase, implementation) of a batch-sweep record, the implementation refined as the sweep draws it."""
    impl = r.impl
    if r.phase == "phase5_batched":
        gemm = str(r.config.get("fp32-gemm") or "auto")
        forced = gemm != "auto" or str(r.config.get("fp16-gemm") or "auto") != "auto"
        if str(r.config.get("row-chain") or "off") == "on" and impl in ("cuda", "cuda-fp16") and not forced:
            impl += "-row-chain"  # (with a GEMM rung forced as well: drawn as that rung's path)
        elif impl == "cuda" and gemm in ("tile", "tf32x3", "fma"):
            impl = "cuda-" + gemm
        elif impl == "cuda-cublaslt" and str(r.config.get("precision") or "fp32") == "fp16":
            impl = "cuda-cublaslt-fp16"
        elif impl == "cuda-fp16" and str(r.config.get("fp16-gemm") or "tile") in ("mma", "wgmma"):
            impl = "cuda-fp16-" + str(r.config.get("fp16-gemm"))
    elif is_twin(r.phase) and not fp32_matmuls(r):
        impl += NOT_FP32
    return (r.phase, impl)


FP32_SWEEP_PATHS = ("cuda", "cuda-tile", "cuda-tf32x3", "cuda-fma", "cuda-cublaslt", "cuda-row-chain")  # phase 5's fp32-accurate sweep paths (cuBLASLt: fp32)


def is_fp32_yardstick(key):
    """A framework series that may stand as the yardstick of an fp32 claim."""
    return is_twin(key[0]) and not key[1].endswith(NOT_FP32)


def select_batch(records, dup_notes):
    cands = [r for r in records if r.workload == "mlp_batch_sweep" and r.cfg_num("batch")
             and r.metric("samples_per_s") is not None]
    picked = group_pick(cands, lambda r: sweep_key(r) + (int(r.cfg_num("batch")),),
                        lambda k: f"Figure 9 {label(k[0], k[1])} batch={k[2]}", dup_notes)
    series = {}
    for (phase, impl, b), r in picked.items():
        series.setdefault((phase, impl), []).append((b, r.metric("samples_per_s"), r))
    missing = [label(*k) for k in BATCH_IMPLS if k not in series]
    if not any(is_twin(k[0]) for k in series):
        missing = sorted(set(missing) | {"any PyTorch twin"})
    # a twin mode without sweep records but with a W1 record of the sweep's own model (layers, optimizer,
    # dropout, data, precision: the sweep is W1 at other batch sizes) stands at its W1 batch as one point
    from_w1 = set()
    ours = [r for r in picked.values() if not is_twin(r.phase)]
    model = {_batch_model(r) for r in ours}
    if len(model) == 1:
        w1 = [r for r in records if is_twin(r.phase) and r.workload == "mlp_w1" and base_tag(r) == "w1"
              and r.cfg_num("batch") and r.metric("samples_per_s") is not None and _batch_model(r) in model
              and not any(k[1] == r.impl for k in series)]
        for (phase, impl), r in sorted(group_pick(w1, lambda r: (r.phase, r.impl),
                                                  lambda k: f"Figure 9 {label(*k)} (W1 run)", []).items()):
            series[(phase, impl)] = [(int(r.cfg_num("batch")), r.metric("samples_per_s"), r)]
            from_w1.add((phase, impl))
    for k in series:
        series[k].sort(key=lambda t: t[0])
    keys = sorted(series, key=series_sort_key)
    return {"series": {k: series[k] for k in keys}, "missing": missing, "from_w1": from_w1,
            "records": [p[2] for k in keys for p in series[k]]}


def _batch_model(r):
    """What makes a batch-sweep point and a W1 run the same model: layers, optimizer, dropout, dataset,
    precision (config), as a hashable tuple."""
    c = r.config
    return (str(c.get("layers")), str(c.get("optimizer")), str(c.get("dropout")), str(c.get("dataset")),
            str(c.get("precision") or "fp32"))


# ------------------------------------------------------------------ figure 8: efficiency

def select_efficiency(records, dup_notes):
    copy_gbps, fp16_tflops, peak_rec = peaks_for(records)
    cands = [r for r in records if isinstance(r.data.get("efficiency"), dict) and r.data["efficiency"]
             and r.phase not in ("ceilings", "tracer_overhead")]

    def rank(r):  # a run without PDL first (its kernel durations are the kernels' own)
        bt = base_tag(r)
        if bt.startswith("headline"):
            return (pdl_on(r), 0, 0)
        if r.workload == "mlp_w2":
            return (pdl_on(r), 1, -(hidden_of(r) or 0))
        if bt == "w1":
            return (pdl_on(r), 2, 0)
        return (pdl_on(r), 3, 0)
    groups = {}
    for r in cands:
        groups.setdefault((r.phase, r.impl), []).append(r)
    points = []
    used = []
    for k in sorted(groups, key=series_sort_key):
        rs = sorted(groups[k], key=lambda r: (rank(r), tuple(-ord(c) for c in r.utc_time), r.path))
        r = rs[0]
        used.append(r)
        for kname in sorted(r.data["efficiency"]):
            e = r.data["efficiency"][kname]
            if not isinstance(e, dict):
                continue
            b, f = num(e.get("bytes")), num(e.get("flops"))
            g, t = num(e.get("gbps")), num(e.get("tflops"))
            # a negated tag ("not nb::mlp::": every kernel outside ours, i.e. the library's) is named by
            # the first kernel it matched and what else it sums, not by the pattern alone
            shown = kname
            if kname.startswith("not ") and isinstance(e.get("kernel"), str) and e["kernel"]:
                shown = f"all but {kname[4:]} ({e['kernel']} …)"
            points.append({"key": k, "label": label(*k), "kernel": shown, "bytes": b, "flops": f, "gbps": g,
                           "tflops": t, "ai": (f / b) if f and b else None,
                           "pct_copy": num(e.get("pct_copy_peak")), "pct_tensor": num(e.get("pct_tensor_peak")),
                           "record": r})
    missing = []
    present = {k for k in groups}
    for k in OURS_ORDER:
        if k not in present:
            missing.append(f"{label(*k)}: no record with an `efficiency` object")
    if not copy_gbps:
        missing.append("copy-bandwidth roof: no `ceilings` record with peaks.copy_gbps")
    if not fp16_tflops:
        missing.append("fp16 tensor-core roof: no `ceilings` record with peaks.fp16_tflops")
    return {"points": points, "copy_gbps": copy_gbps, "fp16_tflops": fp16_tflops, "peak_record": peak_rec,
            "missing": missing, "records": used + ([peak_rec] if peak_rec else [])}


# ------------------------------------------------------------------ figure 13: the GEMM ladder against cuBLASLt
# Phase 5's GEMM benchmark (--gemm-compare; records tagged gemm-b<B>, fp16 ones gemm-b<B>-fp16) times
# every product of the W1 step alone, for each rung of the GEMM ladder and for cuBLASLt, and checks
# each row against a float64 reference. The figure follows the two products of layer 0, which carry
# most of a big-batch step's multiply-adds, across the batch sizes.

GEMM_BATCHES = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
GEMM_PRODUCTS = [(0, "forward"), (0, "weight-gradient")]
GEMM_PRECISIONS = ["fp32", "fp16"]
GEMM_IMPLS = {"fp32": ["own-tile", "own-fma64", "own-tf32x3", "cublaslt-fp32", "cublaslt-tf32"],
              "fp16": ["own-tile-wmma", "cublaslt-fp16"]}
GEMM_YARDSTICK = {"fp32": "cublaslt-fp32", "fp16": "cublaslt-fp16"}
GEMM_NOT_FP32 = ("cublaslt-tf32",)  # faster arithmetic, not fp32 numerics: recorded, never judged
GEMM_TITLE = {"own-tile": "own-tile (32×64 SIMT tile)", "own-fma64": "own-fma64 (step 7: FMA warp tiles, 64×64)",
              "own-tf32x3": "own-tf32x3 (step 5: 3×TF32 on tensor cores)",
              "cublaslt-fp32": "cuBLASLt fp32 (the yardstick)", "cublaslt-tf32": "cuBLASLt TF32 (TF32, not fp32 numerics)",
              "own-tile-wmma": "own-tile-wmma (fp16 WMMA tile)", "cublaslt-fp16": "cuBLASLt fp16 (the yardstick)",
              "own-f16-mma": "own-f16-mma (step 6: fp16 mma.sync, step 5's tile)",
              "own-f16-wgmma": "own-f16-wgmma (step 9: fp16 wgmma, step 5's tile)",
              "own-i8-digits": "own-i8-digits (step 10: bytes × W's 8-bit digits, integer tensor cores)"}
GEMM_SHORT = {"cublaslt-fp32": "cuBLASLt fp32", "cublaslt-tf32": "cuBLASLt TF32", "cublaslt-fp16": "cuBLASLt fp16"}
_GEMM_TAG = re.compile(r"^gemm-b(\d+)(?:-|$)")  # gemm-b8192, gemm-b8192-fp16, ...


def gemm_short(impl):
    return GEMM_SHORT.get(impl, impl)


def gemm_rows(r):
    """The well-formed rows of a record's metrics.gemm_bench (dicts with a layer, product, impl and
    finite TFLOP/s)."""
    out = []
    for row in as_list(dget(r.data, "metrics", "gemm_bench")):
        if (isinstance(row, dict) and isinstance(row.get("impl"), str) and isinstance(row.get("product"), str)
                and isinstance(row.get("layer"), int) and not isinstance(row.get("layer"), bool)
                and num(row.get("tflops")) is not None):
            out.append(row)
    return out


def gemm_key(r):
    """(precision, batch) of a GEMM benchmark record (phase 5, tag gemm-b<B>[-...], rows in
    metrics.gemm_bench), else None. Batch: metrics.batch, else config.batch, else the tag's;
    precision: config.precision, else fp16 where the tag says -fp16."""
    m = _GEMM_TAG.match(r.tag)
    if r.phase != "phase5_batched" or not m or not gemm_rows(r):
        return None
    b = r.metric("batch")
    if b is None:
        b = r.cfg_num("batch")
    if b is None:
        b = int(m.group(1))
    prec = str(r.config.get("precision") or ("fp16" if "-fp16" in r.tag else "fp32"))
    return (prec if prec in GEMM_PRECISIONS else "fp32", int(b))


def gemm_shape(row, batch):
    """'B × 128 × 784' (M × N × K, the batch's dimension named B)."""
    return " × ".join("B" if num(row.get(d)) == batch else f"{int(num(row.get(d)) or 0):,}" for d in ("M", "N", "K"))


def select_gemm(records, dup_notes):
    """Figure 13: per precision (fp32, fp16) and product of GEMM_PRODUCTS, one series per
    implementation: (batch, TFLOP/s, row, record), the newest record of each (precision, batch).
    Also every row of the records picked (for the check counts), the roofs the records give (fp32:
    the nominal SIMT peak from device properties; fp16: the measured tensor-core peak) and what is missing."""
    cands = [r for r in records if gemm_key(r) is not None]
    picked = group_pick(cands, gemm_key, lambda k: f"Figure 13 GEMM benchmark {k[0]} batch={k[1]}", dup_notes)
    panels, missing, used = [], [], []
    fp32_t, fp32_note = fp32_peak_tflops(records)
    _, fp16_t, peak_rec = peaks_for(records)
    roofs = {}
    if fp32_t:
        roofs["fp32"] = {"tflops": fp32_t, "record": None, "text": f"the roof of the FMA rungs (own-tile, own-fma64) and cuBLASLt fp32, the {fp32_note}",
                         "label": f"nominal fp32 SIMT peak {fp32_t:.0f} TFLOP/s (device properties, not measured),\n"
                                  "roof of the FMA rungs and cuBLASLt fp32"}
    if fp16_t:
        roofs["fp16"] = {"tflops": fp16_t, "record": peak_rec,
                         "text": f"the roof of both fp16 rows, the measured fp16 tensor-core peak {fp16_t:.0f} TFLOP/s",
                         "label": f"measured fp16 tensor-core peak {fp16_t:.0f} TFLOP/s (`ceilings` record),\n"
                                  "roof of both fp16 rows"}
    for prec in GEMM_PRECISIONS:
        recs = {b: r for (p, b), r in picked.items() if p == prec}
        suffix = "-fp16" if prec == "fp16" else ""
        if not recs:
            missing.append(f"{prec}: no `gemm-b<B>{suffix}` records")
            continue
        used += [recs[b] for b in sorted(recs)]
        lack = [b for b in GEMM_BATCHES if b not in recs]
        if lack:
            missing.append(f"{prec}: no record at batch " + ", ".join(f"{b:,}" for b in lack))
        for layer, product in GEMM_PRODUCTS:
            series = {}
            for b in sorted(recs):
                seen = set()
                for row in gemm_rows(recs[b]):
                    if row["layer"] == layer and row["product"] == product and row["impl"] not in seen:
                        seen.add(row["impl"])
                        series.setdefault(row["impl"], []).append((b, num(row["tflops"]), row, recs[b]))
            if not series:
                missing.append(f"{prec} layer {layer} {product}: no rows")
                continue
            order = GEMM_IMPLS[prec]
            impls = sorted(series, key=lambda i: (order.index(i) if i in order else len(order), i))
            for i in order:
                have = {p[0] for p in series.get(i, [])}
                if not have:
                    missing.append(f"{prec} layer {layer} {product}: no {gemm_short(i)} rows")
                elif set(recs) - have:
                    missing.append(f"{prec} layer {layer} {product}: no {gemm_short(i)} row at batch " +
                                   ", ".join(f"{b:,}" for b in sorted(set(recs) - have)))
            bmax = max(recs)
            ref = {p[0]: p[1] for p in series.get(GEMM_YARDSTICK[prec], [])}
            at = max((b for b in ref if all(b in {p[0] for p in series[i]} for i in impls)), default=None)
            top = next((p[2] for i in impls for p in series[i] if p[0] == bmax), None)
            panels.append({"precision": prec, "layer": layer, "product": product,
                           "shape": gemm_shape(top, bmax) if top else "",
                           "series": {i: series[i] for i in impls}, "yardstick": GEMM_YARDSTICK[prec],
                           "ratio_batch": at,
                           "ratios": {i: dict((p[0], p[1]) for p in series[i])[at] / ref[at] for i in impls}
                           if at is not None and ref.get(at) else {}})
    if "fp32" not in roofs and any(p["precision"] == "fp32" for p in panels):
        missing.append("fp32 SIMT roof: the records' device properties do not give the FP32 lanes per SM")
    if "fp16" not in roofs and any(p["precision"] == "fp16" for p in panels):
        missing.append("fp16 tensor-core roof: no `ceilings` record with peaks.fp16_tflops")
    if any(p["precision"] == "fp32" for p in panels):
        missing.append("TF32 tensor-core roof: no record measures it (own-tf32x3 and cuBLASLt TF32 have no roof line)")
    rows = [(gemm_key(r), row, r) for r in used for row in gemm_rows(r)]
    judged = [(k, row, r) for k, row, r in rows if row.get("passed") in (True, False)]
    over = [num(row.get("rel_err")) / num(row.get("tol")) for _, row, _ in judged
            if num(row.get("rel_err")) is not None and num(row.get("tol"))]
    check = {"records": len(used), "rows": len(rows), "judged": len(judged),
             "passed": sum(1 for _, row, _ in judged if row.get("passed") is True),
             "failed": [(k, row, r) for k, row, r in judged if row.get("passed") is False],
             "worst_over_tol": max(over) if over else None,
             # rows judged against X = byte / 255 (step 6 multiplies the images' bytes as integers)
             "byte_reference": sum(1 for _, row, _ in judged if row.get("reference") == "x = byte / 255"),
             "records_not_passed": [r for r in used if dget(r.data, "validation", "passed") is not True]}
    # the unjudged TF32 rows against the fp32 tolerance of the same product (their rows carry none)
    tol_of = {}
    for k, row, r in rows:
        if num(row.get("tol")):
            tol_of[(r.path, row["layer"], row["product"])] = num(row.get("tol"))
    tf = [num(row.get("rel_err")) / tol_of[(r.path, row["layer"], row["product"])] for k, row, r in rows
          if row["impl"] in GEMM_NOT_FP32 and num(row.get("rel_err")) is not None
          and (r.path, row["layer"], row["product"]) in tol_of]
    check["tf32_over_tol"] = (min(tf), max(tf)) if tf else None
    # Records whose benchmark read layer 0's X as the step does (gathered bytes; their notes say so).
    gathered = [r for r in used if any("GatherView" in str(n) for n in as_list(dget(r.data, "notes")))]
    fma = gemm_fma_ratios([(gemm_key(r)[1], gemm_rows(r)) for r in used if gemm_key(r)[0] == "fp32"])
    return {"panels": panels, "roofs": roofs, "check": check, "missing": missing, "gathered": len(gathered), "fma": fma,
            "records": used + ([roofs["fp16"]["record"]] if "fp16" in roofs and roofs["fp16"]["record"] else [])}


def gemm_share(d):
    """(share of multiply-adds, batch, record): the GEMM_PRODUCTS' multiply-adds over those of every
    product of the fp32 record at the largest batch (one implementation's rows: the yardstick's)."""
    fp32 = [p for p in d["panels"] if p["precision"] == "fp32"]
    recs = sorted({(pt[0], pt[3].path): pt for p in fp32 for pt in p["series"].get("cublaslt-fp32", [])}.items())
    if not recs:
        return None
    b, _, _, r = recs[-1][1]
    mnk = lambda row: (num(row.get("M")) or 0) * (num(row.get("N")) or 0) * (num(row.get("K")) or 0)
    rows = [row for row in gemm_rows(r) if row["impl"] == "cublaslt-fp32"]
    tot = sum(mnk(row) for row in rows)
    ours = sum(mnk(row) for row in rows if (row["layer"], row["product"]) in GEMM_PRODUCTS)
    return (ours / tot, b, r) if tot else None


def _sig3(x):
    """3 significant digits, trailing zeros kept (1.30, 37.0, 120)."""
    return f"{x:#.3g}".rstrip(".")


def _ratio_words(x):
    """37.0× faster / 1.30× slower (never 0.769×)."""
    return f"{_sig3(x)}× faster" if x >= 1 else f"{_sig3(1 / x)}× slower"


GEMM_FMA_RUNGS = ("own-tile", "own-fma64")  # the CUDA cores' rungs (fp32 FMAs, no tensor cores)
GEMM_BIG_FLOP = 100e6   # "a big product": at least 100 MFLOP (2·M·N·K)
GEMM_BIG_BATCH = 1024   # ... at batch 1,024 and up


def gemm_fma_ratios(batch_rows):
    """The CUDA cores against cuBLASLt fp32 on the big products: for each (batch, rows of one fp32
    record) with batch >= GEMM_BIG_BATCH and each product of at least GEMM_BIG_FLOP, the faster of
    the FMA rungs that passed its check, as cuBLASLt fp32's time over its time (1 = level, < 1 slower):
    [(batch, layer, product, impl, ratio)], sorted by batch, layer, product. A product without a
    passed FMA row or a passed cuBLASLt fp32 row is left out."""
    out = []
    for b, rows in sorted(batch_rows, key=lambda x: x[0]):
        if b < GEMM_BIG_BATCH:
            continue
        prods = {}
        for row in rows:
            ms = num(row.get("ms"))
            dims = [num(row.get(k)) for k in ("M", "N", "K")]
            if ms is None or ms <= 0 or None in dims or row.get("passed") is not True:
                continue
            if 2.0 * dims[0] * dims[1] * dims[2] < GEMM_BIG_FLOP:
                continue
            prods.setdefault((row["layer"], row["product"]), {}).setdefault(row["impl"], ms)
        for (layer, product), t in sorted(prods.items()):
            fma = [(t[i], i) for i in GEMM_FMA_RUNGS if i in t]
            if fma and "cublaslt-fp32" in t:
                ms, impl = min(fma)
                out.append((b, layer, product, impl, t["cublaslt-fp32"] / ms))
    return out


def gemm_finding(d):
    """The figure's finding from the fp32 panels at the largest batch every implementation ran:
    the fastest fp32-accurate GEMM of each product, and the best own rung against cuBLASLt fp32."""
    ps = [p for p in d["panels"] if p["precision"] == "fp32" and p["ratios"]]
    if not ps:
        return None
    lead, own = {}, {}
    for p in ps:
        acc = {i: x for i, x in p["ratios"].items() if i not in GEMM_NOT_FP32}
        lead[p["product"]] = max(acc, key=lambda i: (acc[i], i))
        o = {i: x for i, x in acc.items() if i.startswith("own")}
        if o:
            own[p["product"]] = max(o, key=lambda i: (o[i], i))
    batches = sorted({p["ratio_batch"] for p in ps})
    at = f"at batch {batches[0]:,}" if len(batches) == 1 else "at the largest batch"
    name = lambda p: p.replace("-", " ")
    leaders = sorted(set(lead.values()))
    if len(leaders) == 1 and len(ps) > 1:
        s = f"{at} {gemm_short(leaders[0])} is the fastest fp32-accurate GEMM on both of layer 0's products"
    else:
        s = f"{at} " + " and ".join(f"{gemm_short(lead[p['product']])} leads layer 0's {name(p['product'])}" for p in ps)
    rat = {p["product"]: p["ratios"][own[p["product"]]] for p in ps if p["product"] in own}
    owns = sorted(set(own.values()))
    if rat and len(owns) == 1:
        s += (f"; the best own rung, {owns[0]}, is " + " and ".join(
            f"{_ratio_words(x)} on the {name(p)}" for p, x in rat.items()) + " than cuBLASLt fp32")
    elif rat:
        s += "; the best own rungs: " + ", ".join(f"{own[p]} {_ratio_words(x)} than cuBLASLt fp32 on the {name(p)}"
                                                  for p, x in rat.items())
    return s


# ------------------------------------------------------------------ nsys / ncu companions

def base_kernel_name(name):
    s = name.strip()
    s = re.sub(r"^void\s+", "", s)
    s = s.split("(")[0]
    depth, out = 0, []
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    return s.split("::")[-1].strip()


def nsys_comparison(dev_dir, phase_num, phase_name, records):
    """nsys kernel list (profiles/<slug>/phaseN_nsys_cuda_gpu_kern_sum.csv) against the CUPTI
    summary of a record of that phase. None when no CSV."""
    path = os.path.join(dev_dir, f"phase{phase_num}_nsys_cuda_gpu_kern_sum.csv")
    if not present(path):
        return None
    rows, problem = parse_nsys_kern_sum(path)
    out = {"csv": path, "problem": problem, "rows": [], "record": None}
    if problem:
        return out
    with_k = [r for r in records if r.phase == phase_name and as_list(r.data.get("kernels"))]
    if not with_k:
        out["problem"] = f"no {phase_name} record with a CUPTI kernel summary to compare with"
        out["nsys_only"] = rows
        return out
    nsys_rec = [r for r in records if r.phase == phase_name and base_tag(r) == "nsys"]
    def cfg_key(r):
        return tuple(r.config.get(k) for k in ("n", "epochs", "source", "streams"))
    target = cfg_key(newest_first(nsys_rec)[0]) if nsys_rec else None
    rec = sorted(with_k, key=lambda r: (0 if target is not None and cfg_key(r) == target else 1,
                                        0 if base_tag(r).startswith("headline") else 1,
                                        tuple(-ord(c) for c in r.utc_time), r.path))[0]
    ours = {}  # template variants of one kernel share a base name: add them up
    for k in as_list(rec.data.get("kernels")):
        if isinstance(k, dict) and isinstance(k.get("name"), str) and num(k.get("calls")) and num(k.get("total_ns")) is not None:
            b = base_kernel_name(k["name"])
            acc = ours.setdefault(b, {"calls": 0.0, "total_ns": 0.0})
            acc["calls"] += num(k["calls"])
            acc["total_ns"] += num(k["total_ns"])
    theirs = {}
    for k in rows:
        b = base_kernel_name(k["name"])
        if b in theirs:
            theirs[b] = {"name": b, "calls": theirs[b]["calls"] + k["calls"], "total_ns": theirs[b]["total_ns"] + k["total_ns"]}
        else:
            theirs[b] = dict(k, name=b)
    names = sorted(set(ours) | set(theirs))
    for n in names:
        a, c = theirs.get(n), ours.get(n)
        a_mean = a["total_ns"] / a["calls"] if a and a["calls"] else None
        c_calls = c["calls"] if c else None
        c_mean = c["total_ns"] / c["calls"] if c else None
        out["rows"].append({"name": n, "nsys_calls": a["calls"] if a else None, "nsys_mean_ns": a_mean,
                            "ours_calls": c_calls, "ours_mean_ns": c_mean})
    out["record"] = rec
    out["only_nsys"] = [n for n in names if n in theirs and n not in ours]
    out["only_ours"] = [n for n in names if n in ours and n not in theirs]
    return out


def _ncu_summary(path, key, wrong):
    """A summary JSON beside an ncu CSV: (its object, "") if it has a list under `key`; (None, why)
    if it is unreadable or another kind; (None, "") if there is none."""
    if not present(path):
        return None, ""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError) as e:
        return None, f"unreadable: {e}"
    if not isinstance(obj, dict) or not isinstance(obj.get(key), list):
        return None, wrong
    return obj, ""


def ncu_summaries(dev_dir, phase_num):
    """One entry per `make ncu` details CSV of the phase: its headline rows (speed of light, or the
    warp-state statistics of a STALLS=1 profile), the sections they come from, and for a stalls
    profile its summaries by code region (phaseN_ncu_<kernel>_regions.json, scripts/ncu_regions.py)
    and by source line (phaseN_ncu_<kernel>_lines.json, scripts/ncu_lines.py)."""
    out = []
    if not os.path.isdir(dev_dir):
        return out
    for name in sorted(os.listdir(dev_dir)):
        if name.startswith(f"phase{phase_num}_ncu_") and name.endswith(".csv") and present(os.path.join(dev_dir, name)):
            rows, problem = parse_ncu_details(os.path.join(dev_dir, name))
            sections = sorted({r["section"] for r in rows})
            rpath = os.path.join(dev_dir, name[:-len(".csv")] + "_regions.json")
            regions, rproblem = _ncu_summary(rpath, "regions", "not a summary by code region")
            lpath = os.path.join(dev_dir, name[:-len(".csv")] + "_lines.json")
            lines, lproblem = _ncu_summary(lpath, "statements", "not a summary by source line")
            out.append({"file": name, "rows": rows, "problem": problem, "sections": sections,
                        "regions_file": os.path.basename(rpath) if present(rpath) else None,
                        "regions": regions, "regions_problem": rproblem,
                        "lines_file": os.path.basename(lpath) if present(lpath) else None,
                        "lines": lines, "lines_problem": lproblem})
    return out


def short(s, n=60):
    """A long (templated) kernel name cut to n characters for tables."""
    s = str(s)
    return s if len(s) <= n else s[: n - 1] + "…"


# ------------------------------------------------------------------ where the time goes: the per-step account
# One account per implementation of a workload: the time of a step (linear regression: an epoch) from
# the timed runs, the device time its kernels and copies take, grouped by what they do, and the gap
# between the two. The kernel classes and the summary arithmetic are those the PyTorch twins use to
# write their records' `account` (baselines/pytorch/common.py: kernel_class, summary_account), so both
# sides are classified by one set of rules.

def _twin_common():
    mod = globals().get("_NBC")
    if mod is None:
        import importlib.util  # noqa: PLC0415
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "baselines", "pytorch",
                            "common.py")
        spec = importlib.util.spec_from_file_location("nb_twin_common", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        globals()["_NBC"] = mod
    return mod


ACCOUNT_CATEGORIES = list(_twin_common().KERNEL_CLASSES)
ACCOUNT_RULES = list(_twin_common().KERNEL_CLASS_DOC)


def account_class(name):
    """The class (gemm, elementwise, optimizer, reduction, copy, other) of a kernel name."""
    return _twin_common().kernel_class(name)


def account_unit(r):
    return "epoch" if r.workload == "linreg" else "step"


def account_unit_ms(r):
    """The timed median time of one unit: linear regression total / epochs, MLP total / steps."""
    if r.workload == "linreg":
        e, t = r.cfg_num("epochs"), r.total_ms()
        return t / e if e and t is not None else None
    return step_ms(r)


def _steps_per_run(r):
    s = r.metric("steps")
    if s is None or s <= 0:
        s = r.cfg_num("steps")
    return s if s and s > 0 else None


def _trace_overlap(r):
    """(union of device intervals / summed device time) from a Chrome trace beside our record:
    below 1 where kernels or copies ran concurrently. None without a readable trace."""
    p = trace_path(r)
    if not p or not present(p):
        return None
    events, _, pnames, problem = read_chrome_trace(p)
    if problem:
        return None
    dev = [(e["ts"], e["ts"] + e["dur"]) for e in events if not _is_host(e, pnames)]
    tot = sum(b - a for a, b in dev)
    if tot <= 0:
        return None
    return _twin_common().union_length(dev) / tot


def time_account(r):
    """The per-unit account of one record, or None when it has neither a kernel summary nor an
    `account`. Keys: unit, unit_ms (timed), host_ms (twins: host wall of the profiled loop before its
    final synchronize), launches (kernel executions), kernel_ms, device_ms (kernels + copies), busy_ms
    (union of device intervals), idle_ms (unit_ms - busy_ms), cats (ms by class), source, busy_source,
    skipped_ms (our MLP runs: evaluation kernels left out), steps (units the summary covers).
    Twins: the record's `account` (torch.profiler over one extra run; JAX: the profiled run its
    `account.source` names, and only records with an `account`); classes, launches and kernel
    time recomputed from its kernel summary with the current rules. Ours: CUPTI summary / (trace_runs
    x units per run); busy = the summed device time, times the overlap a trace beside the record shows."""
    nbc = _twin_common()
    unit, unit_ms = account_unit(r), account_unit_ms(r)
    kernels, memcpy = as_list(r.data.get("kernels")), as_list(r.data.get("memcpy"))
    has_summary = any(isinstance(k, dict) for k in kernels)
    acc = r.data.get("account") if isinstance(r.data.get("account"), dict) else None
    out = {"unit": unit, "unit_ms": unit_ms, "host_ms": None, "host_ops_ms": None, "launch_calls": None,
           "skipped_ms": 0.0, "record": r}
    if is_jax(r.phase) and not acc:
        return None
    if is_twin(r.phase):
        steps = num(acc.get("steps")) if acc else None
        if steps is None and not acc and unit == "epoch":
            steps = r.cfg_num("epochs")  # older linreg records: the profiler watched one run of `epochs` epochs
        s = nbc.summary_account(kernels, memcpy, steps) if (has_summary and steps) else None
        if s is None and acc and isinstance(acc.get("by_category_ms_per_unit"), dict):
            s = {k: num(acc.get(k)) for k in ("launches_per_unit", "kernel_ms_per_unit", "device_ms_per_unit")}
            s["by_category_ms_per_unit"] = {c: num(acc["by_category_ms_per_unit"].get(c)) or 0.0
                                           for c in ACCOUNT_CATEGORIES}
        if s is None:
            return None
        runs = f"{int(steps)} {unit}s" if steps else "the training"
        out.update(steps=steps, source="torch.profiler, one extra untimed run of " + runs)
        if is_jax(r.phase):
            src = acc.get("source")
            out["source"] = src if isinstance(src, str) and src else "the JAX profiler, one extra untimed run of " + runs
        if acc:
            out.update(host_ms=num(acc.get("host_ms_per_unit")), host_ops_ms=num(acc.get("host_ops_ms_per_unit")),
                       launch_calls=num(acc.get("launch_calls_per_unit")))
        busy = num(acc.get("busy_ms_per_unit")) if acc else None
        busy_source = "union of the profiled run's device intervals"
        if is_jax(r.phase) and acc and "profiler_stretch" not in acc:
            # a JAX record from before the twin gave the timed unit the profiled run's busy share
            # (baselines/jax/jaxtwin.py): the same correction here, from the record's own fields
            prof, um = num(acc.get("profiled_ms_per_unit")), num(acc.get("unit_ms"))
            if busy is not None and prof and um and prof > um:
                busy *= um / prof
                busy_source += ", given the timed unit's share (the profiled run took " + f"{prof / um:.2f}x as long)"
        elif is_jax(r.phase) and acc and num(acc.get("profiler_stretch")):
            busy_source += f", given the timed unit's share (the profiled run took {num(acc.get('profiler_stretch')):.2f}x as long)"
        if is_jax(r.phase) and acc and busy is not None and unit_ms:
            # The share rule assumes the profiler stretched busy and idle time alike; if it stretched only the
            # host's part, the profiled run's device intervals themselves (busy_ms_per_unit_profiled) fit the
            # timed unit. The truth lies between: the busy share is given as that range (busy_hi_ms), the
            # bars drawn at the share, marked as an estimate.
            hi = num(acc.get("busy_ms_per_unit_profiled")) or num(acc.get("device_ms_per_unit"))
            if hi is not None and hi > busy:
                out["busy_hi_ms"] = min(hi, unit_ms)
        if busy is None:
            busy = num(s.get("device_ms_per_unit"))
            busy_source = "summed device time (record without `account`: kernels and copies taken not to overlap)"
    else:
        if not has_summary:
            return None
        per_run = r.cfg_num("epochs") if unit == "epoch" else _steps_per_run(r)
        if not per_run:
            return None
        steps = summary_runs(r) * per_run
        skip = (lambda n: "eval" in n.lower()) if unit == "step" else None  # MLP timing excludes evaluation
        s = nbc.summary_account(kernels, memcpy, steps, skip=skip)
        out.update(steps=steps, skipped_ms=s["skipped_ms_per_unit"],
                   source=f"our CUPTI summary over {summary_runs(r)} run(s) of {int(per_run)} {unit}s")
        ov = _trace_overlap(r)
        if ov is not None:
            busy, busy_source = s["device_ms_per_unit"] * ov, "summed device time x the overlap in the trace beside the record"
        else:
            busy, busy_source = s["device_ms_per_unit"], "summed device time (no trace: kernels and copies taken not to overlap)"
    out.update(launches=s["launches_per_unit"], kernel_ms=s["kernel_ms_per_unit"], device_ms=s["device_ms_per_unit"],
               cats=dict(s["by_category_ms_per_unit"]), busy_ms=busy, busy_source=busy_source)
    out["idle_ms"] = (unit_ms - busy) if (unit_ms is not None and busy is not None) else None
    return out


ACCOUNT_PANELS = [
    ("linreg", "linear regression, 5M points × 200 epochs (headline)", "an epoch"),
    ("mlp_w1", "MLP W1 (784-128-64-10, tag w1)", "a W1 step"),
    ("mlp_w2", "MLP W2 at h = 128", "a W2 h = 128 step"),
]


def _account_member(wl, r):
    if r.workload != wl or r.impl == "pytorch-cpu" or r.tag.endswith("-breakdown"):
        return False
    if wl == "linreg":
        return base_tag(r).startswith("headline") and not is_host_source(r)
    if wl == "mlp_w1":
        return base_tag(r) == "w1"
    return hidden_of(r) == 128 and not r.tag.startswith("check")


def select_time_account(records, dup_notes):
    """Per workload (ACCOUNT_PANELS): one row per implementation with its time_account; the run
    without programmatic dependent launch where there is one (under PDL a kernel's CUPTI duration
    includes its wait for the kernel ahead, so summed kernel time would overstate the busy time)."""
    panels, missing, used = [], [], []
    for wl, title, what in ACCOUNT_PANELS:
        cands = [r for r in records if _account_member(wl, r) and time_account(r) is not None]
        picked = group_pick(cands, lambda r: (r.phase, r.impl), lambda k: f"Where the time goes, {title}: {label(*k)}",
                            dup_notes, prefer=pdl_on)
        keys = sorted(picked, key=series_sort_key)
        rows = []
        for k in keys:
            r = picked[k]
            a = time_account(r)
            lab = label(*k) + (" (run with --pdl off)" if r.tag.endswith("-nopdl") else "")
            rows.append({"key": k, "label": lab, "record": r, **a})
        if rows:
            spe = None
            if wl == "mlp_w1":
                rs = [row["record"] for row in rows if _steps_per_run(row["record"]) and row["record"].cfg_num("epochs")]
                if rs:
                    spe = _steps_per_run(rs[0]) / rs[0].cfg_num("epochs")
            panels.append({"workload": wl, "title": title, "what": what, "rows": rows, "steps_per_epoch": spe})
            used += [row["record"] for row in rows]
        have = {row["key"] for row in rows}
        twin = "pytorch_linreg" if wl == "linreg" else "pytorch_mlp"
        modes = ["pytorch-compiled-graph"] + (["pytorch-compile-max-autotune"] if wl != "linreg" else [])
        expected = [k for k in (LINREG_IMPLS if wl == "linreg" else MLP_IMPLS) if k[1] != "pytorch-cpu"] + \
            [(twin, m) for m in modes if (twin, m) not in (LINREG_IMPLS + MLP_IMPLS)]
        if wl == "mlp_w2":
            expected = [k for k in expected if k not in (("phase5_batched", "cuda"), ("phase5_batched", "cuda-persistent"),
                                                         ("phase5_batched", "cuda-pipelined"),
                                                         ("phase5_batched", "cuda-cluster32"))
                        and k[0] != "libtorch_mlp"]
        lack = [label(*k) for k in expected if k not in have]
        if lack:
            missing.append(f"{title}: no kernel summary or account from " + ", ".join(lack))
        nohost = [row["label"] for row in rows if is_twin(row["key"][0]) and row["host_ms"] is None]
        if nohost:
            missing.append(f"{title}: no host time (record without `account`) for " + ", ".join(nohost))
    return {"panels": panels, "missing": missing, "records": used}


# ------------------------------------------------------------------ the first screen
# The summary table (one row per workload: our best rung against every framework mode -- PyTorch,
# libtorch, JAX -- of the same device's selected records) and the ladder table (each rung: what it adds, its time, its gain over
# the rung before, what limits it, its share of its roof). Built from the selections the figures use.

SUMMARY_MODES = [("eager", "PyTorch eager"), ("compile", "compile"), ("graph", "CUDA graph"),
                 ("compiled-graph", "compiled-graph")]
FP32_LANES_PER_SM = {(9, 0): 128, (8, 9): 128, (8, 6): 128, (8, 0): 64, (7, 0): 64}


def twin_mode(key):
    """'eager', 'compile', 'graph', 'compiled-graph', 'compile-max-autotune', 'libtorch-eager', ...,
    'jax-jit-run', ... of a twin series key; None for ours, the CPU twin and the sync-every-epoch variant."""
    phase, impl = key
    if not is_twin(phase) or impl.endswith("-sync-every-epoch") or impl == "pytorch-cpu":
        return None
    return impl[len("pytorch-"):] if impl.startswith("pytorch-") else impl


def _summary_row(name, unit, ours, twins):
    """ours: [(label, ms, record)]; twins: {mode: (ms, record)} -> one summary row. `fastest` is the
    fastest framework mode of all (PyTorch from Python or C++, JAX), (ms, mode, record)."""
    best = min(ours, key=lambda t: (t[1], t[0])) if ours else None

    def fastest_of(pred):
        c = [(ms_, m, r) for m, (ms_, r) in twins.items() if pred(m)]
        return min(c, key=lambda t: (t[0], t[1])) if c else None
    libbest = fastest_of(lambda m: m.startswith("libtorch"))
    jaxbest = fastest_of(lambda m: m.startswith("jax-"))
    fastest = fastest_of(lambda m: True)
    eager = twins.get("eager")
    return {"workload": name, "unit": unit, "ours": best,
            "modes": {m: twins.get(m) for m, _ in SUMMARY_MODES},
            "libtorch": libbest, "jax": jaxbest, "fastest": fastest, "eager": eager,
            "x_fastest": (fastest[0] / best[1]) if best and fastest else None,
            "x_eager": (eager[0] / best[1]) if best and eager else None,
            "records": ([best[2]] if best else []) + [r for _, r in twins.values()]}


def _sweep_big_batch(sel):
    """The largest batch (1,024 or more) at which the sweep measured phase 5's default path, else None."""
    pts = (sel.get(9) or {}).get("series", {}).get(BATCH_DEFAULT, [])
    big = max((b for b, sps, _ in pts if sps), default=None)
    return big if big and big >= 1024 else None


def summary_table(sel):
    """Rows: linear regression 5M x 200 (training time), W1 epoch, W2 h = 128 step, W2 h = 8192 step."""
    rows = []
    lad = sel[1]["rows"]
    rows.append(_summary_row("linear regression, 5M points × 200 epochs", "training time",
                             [(r["label"], r["ms"], r["record"]) for r in lad if not is_twin(r["key"][0])],
                             {twin_mode(r["key"]): (r["ms"], r["record"]) for r in lad if twin_mode(r["key"])}))
    w1 = sel[5]["rows"]
    rows.append(_summary_row("MLP W1 (784-128-64-10), one epoch", "time per epoch",
                             [(r["label"], r["epoch_ms"], r["record"]) for r in w1 if not is_twin(r["key"][0])],
                             {twin_mode(r["key"]): (r["epoch_ms"], r["record"]) for r in w1 if twin_mode(r["key"])}))
    for h in (128, 8192):
        ours, twins = [], {}
        for k, pts in sel[6]["series"].items():
            for hh, t, r in pts:
                if hh != h:
                    continue
                if not is_twin(k[0]):
                    ours.append((label(*k), t, r))
                elif twin_mode(k):
                    twins[twin_mode(k)] = (t, r)
        rows.append(_summary_row(f"MLP W2 (784-h-h-h-10), h = {h}, one step", "time per step", ours, twins))
    # the batch sweep's largest batch: our fp32-accurate paths against the framework modes with fp32 matmuls
    bs = sel.get(9) or {"series": {}, "from_w1": set()}
    sweep = {k: {b: (b / sps * 1e3, r) for b, sps, r in pts if sps}
             for k, pts in bs["series"].items() if k not in (bs.get("from_w1") or set())}
    big = _sweep_big_batch(sel)
    if big:
        ours = [(label(*k), pts[big][0], pts[big][1]) for k, pts in sweep.items()
                if not is_twin(k[0]) and k[1] in FP32_SWEEP_PATHS and big in pts]
        twins = {twin_mode(k): pts[big] for k, pts in sweep.items() if is_fp32_yardstick(k) and twin_mode(k) and big in pts}
        if twins:
            rows.append(_summary_row(f"MLP W1's model at batch {big:,}, one step", "time per step", ours, twins))
    return rows


def eager_spread(records):
    """(min, max, n) of the linreg eager twin's median times at 5M x 200 over every record of it on
    this device (headline and sweep at 5M, every run): eager varies between processes."""
    vals = []
    for r in records:
        if (r.phase == "pytorch_linreg" and r.impl == "pytorch-eager" and r.cfg_num("n") == 5000000
                and r.cfg_num("epochs") == 200 and r.total_ms() is not None and not is_host_source(r)):
            vals.append(r.total_ms())
    return (min(vals), max(vals), len(vals)) if vals else None


def fp32_peak_tflops(records):
    """(TFLOP/s, sentence) of the nominal fp32 SIMT peak: SMs x SM clock x FP32 lanes per SM x 2
    (an FMA), from the device fields our records carry; None where the lanes per SM are not known.
    Not measured: no ceilings record measures fp32 FMA throughput."""
    for r in newest_first([r for r in records if not is_twin(r.phase)]):
        d = r.data.get("device") or {}
        sm, clk = num(d.get("sm_count")), num(d.get("sm_clock_khz"))
        lanes = FP32_LANES_PER_SM.get((d.get("cc_major"), d.get("cc_minor")))
        if sm and clk and lanes:
            t = sm * clk * 1e3 * lanes * 2 / 1e12
            return t, (f"nominal fp32 peak {t:.0f} TFLOP/s = {int(sm)} SMs × {clk / 1e3:.0f} MHz × {lanes} "
                       "FP32 lanes × 2 (device properties, not measured)")
    return None, None


def _busy_share(acc_panels, wl, key):
    p = next((p for p in acc_panels if p["workload"] == wl), None)
    row = next((x for x in (p["rows"] if p else []) if x["key"] == key), None)
    b = busy_pct(row)
    return (b, row["record"]) if b is not None else (None, None)


def copy_share(r, t_ms, copy_gbps):
    """The bytes a linear-regression run reads (8 B x n_train a epoch, bytes_per_epoch_linreg) per second
    of its time t_ms, as a percent of the measured copy bandwidth; None without n, epochs or a time.
    Over 100: the data stays on chip (L2), the HBM roof does not bound the run."""
    n, ep = r.cfg_num("n"), r.cfg_num("epochs")
    if not (n and ep and t_ms and copy_gbps):
        return None
    return bytes_per_epoch_linreg(int(n)) * ep / (t_ms / 1e3) / 1e9 / copy_gbps * 100


HBM_ROOF = "copy bandwidth"  # the roof name of the measured HBM copy bandwidth in a ladder row's roof


def point_shares(p, copy_gbps, fp16_tflops):
    """A Figure 8 point's (percent of the copy peak, percent of the fp16 peak): the record's own `pct_*`
    fields when present, else against the device's peaks; None where neither is known. Over 100% of
    the copy peak: its counted bytes stay on chip, and the percentage is said as a multiple."""
    pc = p["pct_copy"] if p["pct_copy"] is not None else (p["gbps"] / copy_gbps * 100 if p["gbps"] is not None and copy_gbps else None)
    pt = p["pct_tensor"] if p["pct_tensor"] is not None else (p["tflops"] / fp16_tflops * 100 if p["tflops"] is not None and fp16_tflops else None)
    return pc, pt


TENSOR_FP32_KERNELS = ("gemm_tf32x3", "gemm_i8digits")  # fp32-accurate kernels on the tensor cores (GEMM steps 5, 10)


def _eff_pct(r, copy_gbps, fp16_tflops, fp32_tflops):
    """The best share of its roof among the key kernels of the rung's own record (its `efficiency`
    object): fp16 kernels against the tensor-core peak, fp32 ones against the fp32 peak, bandwidth
    against the copy peak; (percent, roof name, record) or None. An fp32 kernel that runs on the tensor
    cores (GEMM step 5's 3xTF32, `gemm_tf32x3` in its name; step 10's integer MMAs, `gemm_i8digits`) is
    not bounded by the SIMT peak: judged against it, it would read as near a roof it does not have (or
    past it), so only its bandwidth is judged."""
    eff = r.data.get("efficiency")
    if not isinstance(eff, dict):
        return None
    prec = str(r.config.get("precision") or ("fp16" if "fp16" in r.impl else "fp32"))
    best = None
    for kname in sorted(eff):
        e = eff[kname]
        if not isinstance(e, dict):
            continue
        g, t = num(e.get("gbps")), num(e.get("tflops"))
        cands = []
        if g is not None and copy_gbps:
            cands.append((g / copy_gbps * 100, f"{HBM_ROOF} ({short(base_kernel_name(kname), 24)})"))
        if t is not None:
            if prec == "fp16" and fp16_tflops:
                cands.append((t / fp16_tflops * 100, f"fp16 tensor peak ({short(base_kernel_name(kname), 24)})"))
            elif prec != "fp16" and fp32_tflops and not any(k in str(e.get("kernel", "")) for k in TENSOR_FP32_KERNELS):
                cands.append((t / fp32_tflops * 100, f"fp32 peak, nominal ({short(base_kernel_name(kname), 24)})"))
        for c in cands:
            if best is None or c[0] > best[0]:
                best = (c[0], c[1], r)
    return best


RUNGS = [
    # (workload, key, what it adds)
    ("linreg", ("phase1_naive", "cuda"), "one thread per point, every sum by global atomics"),
    ("linreg", ("phase2_shared_mem", "cuda"), "block sums in shared memory, one atomic per block"),
    ("linreg", ("phase3_fused_streams", "cuda-graph"), "one fused kernel per epoch, the epochs in a CUDA graph"),
    ("linreg", ("phase3_fused_streams", "cuda"), "every epoch in one persistent kernel, the data on chip"),
    ("mlp_w1", ("phase4_mlp", "cuda-fp32"), "hand-written MLP kernels, fp32, a host-driven step"),
    ("mlp_w1", ("phase4_mlp", "cuda-fp16"), "fp16 tensor-core GEMMs"),
    ("mlp_w1", ("phase5_batched", "cuda"), "fused kernels, the step captured in a CUDA graph"),
    ("mlp_w1", ("phase5_batched", "cuda-persistent"), "one persistent kernel per epoch"),
    ("mlp_w1", ("phase5_batched", "cuda-pipelined"), "the same kernel with fewer dependent phases a step"),
    ("mlp_w1", ("phase5_batched", "cuda-cluster32"), "the model in one 16-block cluster, the wide layer on tensor cores"),
    ("mlp_w2_8192", ("phase4_mlp", "cuda-fp16"), "phase 4's fp16 kernels at h = 8192"),
    ("mlp_w2_8192", ("phase5_batched", "cuda-fp16"), "own tiled fp16 GEMMs, fused backward, PDL"),
    ("mlp_w2_1024", ("phase5_batched", "cuda-fp16"), "own fp16 GEMMs at h = 1024, fused backward, PDL"),
    ("mlp_w2_1024", ("phase5_batched", "cuda-grid"), "the whole epoch in one cooperative launch, a block an SM holding 16 units of each layer (64 SMs at h = 1,024), exchanges through L2"),
    ("mlp_w2_128", ("phase5_batched", "cuda-fp16"), "own fp16 GEMMs at h = 128"),
    ("mlp_w2_128", ("phase5_batched", "cuda-cluster"), "the whole model in one thread-block cluster"),
    ("mlp_batch_big", ("phase5_batched", "cuda-tile"), "the graph step, every product on the 32 × 64 SIMT tile"),
    ("mlp_batch_big", ("phase5_batched", "cuda"), "the big products on tensor cores with fp32 accuracy: GEMM step 5 (3xTF32), "
     "and step 10 (bytes times W's 8-bit digits) for the first layer's forward where the record's plan names it"),
]


def ladder_table(sel, acc, records):
    """One row per rung of RUNGS that has a record: time, gain over the rung before (same
    workload), the device-busy share (what limits it: the GPU, or the host and launches), and the
    best share of its roof among its key kernels."""
    copy_gbps, fp16_tflops, peak_rec = peaks_for(records)
    fp32_tflops, _ = fp32_peak_tflops(records)
    times = {}
    for r in sel[1]["rows"]:
        times[("linreg", r["key"])] = (r["ms"], r["record"], "training time")
    for r in sel[5]["rows"]:
        times[("mlp_w1", r["key"])] = (r["epoch_ms"], r["record"], "epoch")
    for k, pts in sel[6]["series"].items():
        for h, t, r in pts:
            if h in (128, 1024, 8192):
                times[(f"mlp_w2_{h}", k)] = (t, r, "step")
    big = _sweep_big_batch(sel)  # the batch sweep's largest batch, where the step is GEMMs
    for k, pts in (sel.get(9) or {}).get("series", {}).items():
        for b, sps, r in pts:
            if big and b == big and sps and k not in (sel[9].get("from_w1") or set()):
                plan = [row for row in as_list(dget(r.data, "metrics", "gemm_plan")) if isinstance(row, dict)]
                if k == BATCH_DEFAULT and not any(row.get("rung") == "tf32x3" for row in plan):
                    continue  # a record from before step 5 (its plan names no tf32x3 product) is not that rung
                times[("mlp_batch_big", k)] = (b / sps * 1e3, r, "step")
    rows, prev = [], {}
    for wl, key, adds in RUNGS:
        if (wl, key) not in times:
            continue
        t, r, unit = times[(wl, key)]
        gain = (prev[wl] / t) if wl in prev and t else None
        prev[wl] = t
        awl = {"linreg": "linreg", "mlp_w1": "mlp_w1", "mlp_w2_128": "mlp_w2"}.get(wl)
        busy, _ = _busy_share(acc["panels"], awl, key) if awl else (None, None)
        if busy is None:
            limit = "—"
        elif busy >= 80:
            limit = (f"the GPU (busy {busy_text(busy, unit)} of the {unit})" if busy <= 100 else
                     f"the GPU (busy all of the {unit}: device time {sig3(busy / 100)}× it)")
        else:
            limit = f"host and launches (GPU busy {busy_text(busy, unit)} of the {unit})"
        roof = None
        if wl == "linreg" and copy_gbps:
            cs = copy_share(r, t, copy_gbps)
            if cs is not None:
                roof = (cs, HBM_ROOF, r)
        elif wl != "linreg":
            roof = _eff_pct(r, copy_gbps, fp16_tflops, fp32_tflops)
        wname = {"linreg": "linreg 5M × 200", "mlp_w1": "W1 epoch", "mlp_w2_8192": "W2 h = 8192 step",
                 "mlp_w2_1024": "W2 h = 1024 step", "mlp_w2_128": "W2 h = 128 step", "mlp_batch_big": f"W1's model, batch {big or 0:,} step"}[wl]
        rows.append({"workload": wname, "key": key, "label": label(*key), "adds": adds, "ms": t, "gain": gain,
                     "limit": limit, "busy": busy, "roof": roof, "record": r})
    return {"rows": rows, "peak_record": peak_rec, "fp32_tflops": fp32_tflops}
