#!/usr/bin/env bash
# scripts/bench_mlp.sh — the MLP benchmark on one GPU in one run: phase4_mlp (fp32,
# fp16), phase5_batched (own kernels, cuBLASLt), the PyTorch twin (eager, compile, graph, compiled-graph)
# and the JAX twin (jit-step, jit-epoch, jit-run; where JAX is importable, else one skip line a stage),
# every number into a run record, a short table last.
#
#   scripts/bench_mlp.sh           build, then the stages in $STAGES, then the table
#   scripts/bench_mlp.sh --check   correctness instead of speed: the MLP GPU kernel tests plainly and
#                                  under compute-sanitizer memcheck, every phase/precision/GEMM path
#                                  with --validate at W1 and at awkward shapes, divergence (--lr 10)
#                                  on both phases and the twin, the twin's own --validate, and short
#                                  timing probes (records in $RECORDS_DIR, default build/mlp_check)
#   scripts/bench_mlp.sh --table DIR   only print the table of the records in DIR
#   THEN_STAGES="w2 ..." scripts/bench_mlp.sh --check   the check, then (if it passed) those stages
#                                  (their records in $BENCH_RECORDS_DIR when set)
#
# Stages (default run; each phase run writes --save-init/--save-order first, the twins read them):
#   w1      W1 (784-128-64-10, Adam 1e-3, dropout 0.2, batch 32, 5 epochs): phase 4 fp32 and fp16,
#           phase 5 own fp32/fp16 (fp32 also with --pdl off) and cuBLASLt fp32, twins
#           eager/compile/graph/compiled-graph (with --profile: kernels and the per-step account)
#           and the libtorch twin (build/libtorch_mlp, eager and graph, when built).  tags w1-*
#   match   W1 with --dropout 0 in fp32 (loss matching): phase 4, phase 5 own and cuBLASLt, twins
#           eager, graph and compiled-graph, libtorch eager and graph.           tags w1-nodrop-*
#   w2      W2 (784-h-h-h-10, SGD 0.003, fp16, batch 32) for h in $W2_HS: phase 5 own/cuBLASLt
#           ($W2_STEPS steps; for h in $W2_PAIRED_HS also own with --backward paired, for h in
#           $W2_NOPDL_HS also own with --pdl off, for h in $W2_CLUSTER_HS also --launch cluster,
#           plainly and with --breakdown), phase 4 fp16 and fp32 and the twins eager, graph,
#           compiled-graph and compile-max-autotune, with --profile ($W2_STEPS_SLOW steps: per-step
#           time is the measure; the records say how many steps ran); once, tools/exchange_product
#           (one product phase of the grid kernel alone) where it was built.
#                                                                   tags w2-h<h>-*, bench-mlp
#   gemm    phase5 --gemm-compare on the W2 h = 8192 shapes, fp16 (and fp32).  tags gemm-compare-*
#   persist phase 5 --launch persistent on W1 for --blocks in $PERSIST_BLOCKS (2 epochs each),
#           and at the default split with --generic-kernel (W1's shape not compiled in); then
#           both instances with --breakdown (5 epochs); --launch pipelined (rung 5e) and --launch
#           cluster32 (rung 5f) the same way at the default split (generic instance, breakdown of both).
#                                     tags w1-persistent-g<G>, -generic, -breakdown, -generic-breakdown,
#                                          w1-pipelined-generic, -breakdown, -generic-breakdown,
#                                          w1-cluster32-generic, -breakdown, -generic-breakdown
#   sweep   batch-size sweep (phase 5 own and the compiled-graph twin on its init and order, W1
#           model, $SWEEP_EPOCHS epochs): samples/s for batch in $SWEEP_BATCHES (SWEEP_TWIN=0: no
#           twin; its inductor mode: SWEEP_TWIN_MODE, default "default"); phase 5's other paths in
#           $SWEEP_PATHS (tile: --fp32-gemm tile, fp16, fp16-mma: --fp16-gemm mma, fp16-wgmma: --fp16-gemm
#           wgmma, cublaslt: fp32 and fp16, row-chain: --row-chain on in fp32 and fp16); the twin again with
#           TF32 matmuls allowed (SWEEP_TWIN_TF32=0: not), a labelled row that is never the yardstick.
#   tags batch-sweep-b<B>[-tile|-fp16|-fp16-mma|-fp16-wgmma|-cublaslt-<p>|[-fp16]-row-chain|-compiled-graph[-tf32]]
#   seeds   W1 accuracy, phase 5 own, persistent, pipelined and cluster32, twins graph and compiled-graph,
#           seeds 1 2 3.
#                                                                                tags w1-seed<s>-*
#   fashion W1 as the w1 stage, on Fashion-MNIST (--dataset fashion-mnist, $FASHION_DATA): phase 4
#           fp32 and fp16, phase 5 own fp32, persistent, pipelined, cluster32 and cuBLASLt, twins eager/compile/graph/
#           compiled-graph on phase 4's init and order.                          tags w1-fashion-*
#   autotune  W1 twin with torch.compile mode="max-autotune" (slow to compile; not in the default
#           stages), on phase 4's init and order (written afresh if the w1 stage did not run).
#                                                                tags w1-compile-max-autotune
#
# The w1, match and seeds stages also run phase 5 with --launch persistent, pipelined and cluster32
# (tags *-persistent, *-pipelined, *-cluster32).
# Environment: RECORDS_DIR (default profiles/<device-slug> via the programs), DATA (default
# data/mnist, or .carry/data/mnist when that exists), FASHION_DATA (the same for fashion-mnist),
# PYTHON (python3 with torch), DEPS_PREFIX (default .carry/deps when present), JOBS (16), NO_BUILD (1: run
# the binaries in build/ as they are, e.g. carried from a host build; missing ones fail), STAGES
# ("w1 match w2 gemm persist sweep seeds fashion"), W1_EPOCHS (5: the w1, match and seeds stages),
# TWIN_W1_IMPLS / TWIN_MATCH_IMPLS / TWIN_W2_IMPLS / TWIN_SEEDS_IMPLS (the twin modes per stage; W1's
# also for fashion), TWIN_COMPILE_MODE (auto) and SWEEP_TWIN_MODE (default): the compiled-graph
# twin's --compile-mode,
# W2_HS ("128 256 512 1024 2048 4096 8192"), W2_STEPS (5000), W2_STEPS_SLOW (500),
# JAX_W1_IMPLS / JAX_MATCH_IMPLS / JAX_W2_IMPLS / JAX_SWEEP_IMPLS (the JAX twin's modes in the w1, match,
# w2 and sweep stages, on the PyTorch twin's init and order, always with --validate),
# TWIN_COMPILE_W2 (h values where twin compile runs, default "128"), SWEEP_BATCHES
# ("32 64 128 256 512 1024 2048 4096 8192"), SWEEP_EPOCHS (2), SWEEP_PATHS ("tile fp16 fp16-mma fp16-wgmma cublaslt row-chain"; empty:
# the default path only), SWEEP_TWIN_TF32 (1), P5_REPEATS (3), PERSIST_BLOCKS
# ("16 32 64 128": fewer than 16 blocks would give a block more than the kernel's 8 units),
# W2_PROFILE_HS (unset: the W2 twins run --profile at every width; set: only at these),
# W2_PAIRED_HS ("128 1024 8192"), W2_NOPDL_HS ("128 1024 8192"), W2_CLUSTER_HS ("128"; these three
# and TWIN_COMPILE_W2 set empty mean none: no such runs), W2_TWINS and
# SEEDS_TWIN (1; 0 skips those twin runs), CHECK_LEVEL (full; quick = kernel tests + W1 validation).
# Exit status: 0 when every run succeeded (a deliberate divergence in --check must exit 7), else 1.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

MODE=bench
case "${1:-}" in
  --check) MODE=check ;;
  --table) MODE=table ;;
esac
if [ -z "${DEPS_PREFIX:-}" ] && [ -d .carry/deps ]; then export DEPS_PREFIX=.carry/deps; fi
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-16}"
STAGES="${STAGES:-w1 match w2 gemm persist sweep seeds fashion}"
W2_HS="${W2_HS:-128 256 512 1024 2048 4096 8192}"
W2_STEPS="${W2_STEPS:-5000}"
W2_STEPS_SLOW="${W2_STEPS_SLOW:-500}"
TWIN_COMPILE_W2="${TWIN_COMPILE_W2-128}"
SWEEP_BATCHES="${SWEEP_BATCHES:-32 64 128 256 512 1024 2048 4096 8192}"
SWEEP_EPOCHS="${SWEEP_EPOCHS:-2}"
SWEEP_PATHS="${SWEEP_PATHS-tile fp16 fp16-mma fp16-wgmma cublaslt row-chain}"
# The sweep's twin compiles in inductor's default mode: max-autotune-no-cudagraphs (which --compile-mode
# auto keeps at W1 and W2) costs about a minute of GEMM autotuning per batch size.
SWEEP_TWIN_MODE="${SWEEP_TWIN_MODE:-default}"
# The twins' modes per stage (make run's quick notebook trims them) and the compiled-graph twin's
# inductor mode everywhere but the sweep (auto: default and max-autotune-no-cudagraphs, the faster kept).
TWIN_W1_IMPLS="${TWIN_W1_IMPLS:-eager,compile,graph,compiled-graph}"
TWIN_MATCH_IMPLS="${TWIN_MATCH_IMPLS:-eager,graph,compiled-graph}"
TWIN_W2_IMPLS="${TWIN_W2_IMPLS:-eager,graph,compiled-graph,compile-max-autotune}"
TWIN_SEEDS_IMPLS="${TWIN_SEEDS_IMPLS:-graph,compiled-graph}"
TWIN_COMPILE_MODE="${TWIN_COMPILE_MODE:-auto}"
W1_EPOCHS="${W1_EPOCHS:-5}"
P5_REPEATS="${P5_REPEATS:-3}"
PERSIST_BLOCKS="${PERSIST_BLOCKS:-16 32 64 128}"
W2_PAIRED_HS="${W2_PAIRED_HS-128 1024 8192}"
W2_NOPDL_HS="${W2_NOPDL_HS-128 1024 8192}"
W2_CLUSTER_HS="${W2_CLUSTER_HS-128}"
if [ -z "${DATA:-}" ]; then
  DATA=data/mnist
  [ -d .carry/data/mnist ] && DATA=.carry/data/mnist
fi
if [ -z "${FASHION_DATA:-}" ]; then
  FASHION_DATA=data/fashion-mnist
  [ -d .carry/data/fashion-mnist ] && FASHION_DATA=.carry/data/fashion-mnist
fi
P4=build/phase4_mlp
P5=build/phase5_batched
TWIN=baselines/pytorch/mlp.py
JAX_TWIN=baselines/jax/mlp.py
# The JAX twin (where JAX is importable: the GPU machines; elsewhere one skip line a stage) on the same
# init and order as the PyTorch twin, with --validate; its modes per stage:
JAX_W1_IMPLS="${JAX_W1_IMPLS:-jit-step,jit-epoch,jit-run}"
JAX_MATCH_IMPLS="${JAX_MATCH_IMPLS:-jit-epoch,jit-run}"
JAX_W2_IMPLS="${JAX_W2_IMPLS:-jit-epoch,jit-run}"
JAX_SWEEP_IMPLS="${JAX_SWEEP_IMPLS:-jit-run}"
HAVE_JAX=0
"$PYTHON" -c 'import jax' >/dev/null 2>&1 && HAVE_JAX=1
LT_MLP=build/libtorch_mlp
WORK=build/bench_mlp
LOGS=$WORK/logs
FAILS=0
T_START=$(date +%s)
mkdir -p "$LOGS"

note() { printf '[%4ds] %s\n' $(( $(date +%s) - T_START )) "$*"; }
# jax_run NAME ARGS...: the JAX twin, or one line saying it is skipped where JAX is not importable
jax_run() {
  local name="$1"
  shift
  if [ "$HAVE_JAX" = 1 ]; then
    run "$name" 0 "$PYTHON" "$JAX_TWIN" "$@"
  else
    note "skip   $name: JAX is not importable by $PYTHON"
  fi
}
# run NAME EXPECTED_RC CMD...: output to $LOGS/NAME.log; a different exit status counts as a failure
# (EXPECTED_RC "any": only reported).
run() {
  local name="$1" want="$2"
  shift 2
  local t0=$(date +%s)
  "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  if [ "$want" = any ]; then
    note "exit $rc $name: $(tail -n 1 "$LOGS/$name.log")"
  elif [ "$rc" -ne "$want" ]; then
    FAILS=$((FAILS + 1))
    note "FAILED $name (exit $rc, expected $want): $*"
    tail -n 12 "$LOGS/$name.log" | sed 's/^/    | /'
  else
    note "ok     $name ($(( $(date +%s) - t0 )) s)"
  fi
  return 0
}

table() {
  "$PYTHON" - "$1" <<'PYEOF'
import glob, json, math, os, re, sys
d = sys.argv[1]
recs = {}
for f in sorted(glob.glob(os.path.join(d, "*.json"))):
    try:
        r = json.load(open(f))
    except Exception:
        continue
    if r.get("schema") != "cuda-notebook-run-record":
        continue
    recs[os.path.basename(f)[:-5]] = r

def get(name):
    return recs.get(name)

def med(r):
    return ((r or {}).get("timing", {}).get("total_ms", {}) or {}).get("median")

def per_epoch(r):
    # as the report: the median over repeats of a run's total, divided by its epochs (per_epoch_ms
    # holds the last repeat's epochs only)
    t = (r or {}).get("timing", {})
    pe = t.get("per_epoch_ms") or []
    tot = (t.get("total_ms") or {}).get("median")
    return tot / len(pe) if pe and tot is not None else None

def per_step(r):
    return ((r or {}).get("timing", {}).get("per_step_ms") or {}).get("median")

def acc(r):
    return ((r or {}).get("metrics") or {}).get("test_accuracy")

def fmt(v, f="%.2f"):
    return "-" if v is None else f % v

print("\n== W1 (784-128-64-10, Adam, dropout 0.2, batch 32, 5 epochs): epoch time (median run / epochs), test accuracy")
w1 = [("phase4_mlp__w1-fp32", "phase 4 fp32 (SIMT)"), ("phase4_mlp__w1-fp16", "phase 4 fp16 (WMMA)"),
      ("phase5_batched__w1-own", "phase 5 own fp32"), ("phase5_batched__w1-own-nopdl", "phase 5 own fp32 no PDL"),
      ("phase5_batched__w1-own-fp16", "phase 5 own fp16"), ("phase5_batched__w1-persistent", "phase 5 persistent fp32"),
      ("phase5_batched__w1-pipelined", "phase 5 pipelined fp32"), ("phase5_batched__w1-cluster32", "phase 5 cluster32 fp32"),
      ("phase5_batched__w1-cublaslt", "phase 5 cuBLASLt fp32"), ("pytorch_mlp__w1-eager", "PyTorch eager"),
      ("pytorch_mlp__w1-compile", "PyTorch compile"),
      ("pytorch_mlp__w1-compile-max-autotune", "PyTorch compile autotune"), ("pytorch_mlp__w1-graph", "PyTorch CUDA graph"),
      ("pytorch_mlp__w1-compiled-graph", "PyTorch compiled-graph"),
      ("libtorch_mlp__w1-eager", "libtorch eager (C++)"), ("libtorch_mlp__w1-graph", "libtorch CUDA graph (C++)"),
      ("jax_mlp__w1-jit-step", "JAX jit-step"), ("jax_mlp__w1-jit-epoch", "JAX jit-epoch"),
      ("jax_mlp__w1-jit-run", "JAX jit-run")]
eager = per_epoch(get("pytorch_mlp__w1-eager"))
# "x fastest": against the fastest framework mode among these records (PyTorch in Python or C++, JAX),
# named in the heading
fastest = min(((per_epoch(get(k)), label) for k, label in w1 if k.split("__")[0] in ("pytorch_mlp", "libtorch_mlp", "jax_mlp")
               and per_epoch(get(k))), default=(None, "-"))
graph = fastest[0]
print("(x fastest: against %s, %s ms an epoch)" % (fastest[1], fmt(fastest[0], "%.1f")))
# traced: our CUDA phases time their runs without our CUPTI tracer and then trace one more run;
# its time over the median timed run's is what the tracer costs (the twins: -)
print("%-24s %12s %10s %10s %9s %12s %9s" % ("implementation", "epoch ms", "x eager", "x fastest", "acc %", "peak MB",
      "traced x"))
for k, label in w1:
    r = get(k)
    if not r:
        continue
    e = per_epoch(r)
    mem = (r.get("metrics") or {}).get("peak_device_memory_bytes")
    traced = (r.get("timing") or {}).get("traced_run_ms")
    print("%-24s %12s %10s %10s %9s %12s %9s" % (label, fmt(e, "%.1f"), fmt(eager / e if e and eager else None, "%.1f"),
          fmt(graph / e if e and graph else None, "%.2f"), fmt(acc(r)), fmt(mem / 2**20 if mem else None, "%.0f"),
          fmt(traced / med(r) if traced and med(r) else None, "%.2f")))

fashion = [(k.replace("__w1-", "__w1-fashion-"), label) for k, label in w1 if "nopdl" not in k and "own-fp16" not in k
           and "autotune" not in k]
if any(get(k) for k, _ in fashion):
    print("\n== W1 on Fashion-MNIST (the same model and flags; x eager: against eager on Fashion-MNIST)")
    feager = per_epoch(get("pytorch_mlp__w1-fashion-eager"))
    print("%-24s %12s %10s %9s" % ("implementation", "epoch ms", "x eager", "acc %"))
    for k, label in fashion:
        r = get(k)
        if r:
            e = per_epoch(r)
            print("%-24s %12s %10s %9s" % (label, fmt(e, "%.1f"), fmt(feager / e if e and feager else None, "%.1f"),
                  fmt(acc(r))))

def loss_match(a, b):
    ra, rb = get(a), get(b)
    if not ra or not rb:
        return None
    pa, pb = ra["loss"]["per_step"], rb["loss"]["per_step"]
    f = [abs(x - y) / abs(y) for x, y in zip(pa["first_exact"], pb["first_exact"]) if x is not None and y]
    m = [abs(x - y) / abs(y) for x, y in zip(pa["values"], pb["values"]) if x is not None and y]
    same = (ra.get("metrics") or {}).get("steps") == (rb.get("metrics") or {}).get("steps")
    da = None if not same or acc(ra) is None or acc(rb) is None else abs(acc(ra) - acc(rb))
    # The issue's criterion: 100-step means over the first epoch (later, the trajectories of any two
    # implementations drift apart: float rounding is amplified by training itself).
    n_ep = max(1, len((ra.get("loss") or {}).get("per_epoch") or []))
    w1 = max(1, ((ra.get("metrics") or {}).get("steps") or 0) // n_ep // 100)
    return (max(f) if f else None, max(m[:w1]) if m else None, max(m) if m else None, da, len(m))

print("\n== loss matching against the twin (same init, same order; relative differences of step losses,")
print("   first 20 exactly, then 100-step means)")
print("%-36s %13s %13s %13s %11s %8s" % ("pair", "first-20 max", "epoch-1 max", "all-steps max", "|d acc| pt",
      "windows"))
pairs = [("phase4_mlp__w1-nodrop-fp32", "pytorch_mlp__w1-nodrop-eager"),
         ("phase5_batched__w1-nodrop-own", "pytorch_mlp__w1-nodrop-eager"),
         ("phase5_batched__w1-nodrop-cublaslt", "pytorch_mlp__w1-nodrop-eager"),
         ("phase5_batched__w1-nodrop-persistent", "pytorch_mlp__w1-nodrop-eager"),
         ("phase5_batched__w1-nodrop-pipelined", "pytorch_mlp__w1-nodrop-eager"),
         ("phase5_batched__w1-nodrop-cluster32", "pytorch_mlp__w1-nodrop-eager"),
         ("pytorch_mlp__w1-nodrop-graph", "pytorch_mlp__w1-nodrop-eager"),
         ("pytorch_mlp__w1-nodrop-compiled-graph", "pytorch_mlp__w1-nodrop-eager"),
         ("libtorch_mlp__w1-nodrop-eager", "pytorch_mlp__w1-nodrop-eager"),
         ("libtorch_mlp__w1-nodrop-graph", "pytorch_mlp__w1-nodrop-eager"),
         ("jax_mlp__w1-nodrop-jit-epoch", "pytorch_mlp__w1-nodrop-eager"),
         ("jax_mlp__w1-nodrop-jit-run", "pytorch_mlp__w1-nodrop-eager"),
         ("phase5_batched__w1-nodrop-own", "jax_mlp__w1-nodrop-jit-run")]
for h in (128, 1024, 8192):
    pairs.append((f"phase5_batched__w2-h{h}-own", f"pytorch_mlp__w2-h{h}-eager"))
pairs.append(("phase5_batched__w2-h128-cluster", "pytorch_mlp__w2-h128-eager"))
for a, b in pairs:
    m = loss_match(a, b)
    if m:
        who = ("libtorch " if a.startswith("libtorch") else "") + a.split("__")[1]
        print("%-36s %13s %13s %13s %11s %8d" % (who + " vs " + b.split("__")[1].rsplit("-", 1)[1],
              fmt(m[0], "%.2e"), fmt(m[1], "%.2e"), fmt(m[2], "%.2e"), fmt(m[3], "%.2f"), m[4]))

hs = sorted({int(k.split("-h")[1].split("-")[0]) for k in recs if "__w2-h" in k})
if hs:
    print("\n== W2 (784-h-h-h-10, SGD 0.003, fp16, batch 32): median ms per step")
    cols = [("phase5_batched__w2-h{}-own", "p5 own"), ("phase5_batched__w2-h{}-own-paired", "p5 paired"),
            ("phase5_batched__w2-h{}-own-nopdl", "p5 no PDL"), ("phase5_batched__w2-h{}-cluster", "p5 cluster"),
            ("phase5_batched__w2-h{}-cublaslt", "p5 cuBLASLt"),
            ("phase4_mlp__w2-h{}-fp16", "p4 fp16"), ("phase4_mlp__w2-h{}-fp32", "p4 fp32"),
            ("pytorch_mlp__w2-h{}-eager", "eager"), ("pytorch_mlp__w2-h{}-compile", "compile"),
            ("pytorch_mlp__w2-h{}-compile-max-autotune", "autotune"),
            ("pytorch_mlp__w2-h{}-graph", "graph"), ("pytorch_mlp__w2-h{}-compiled-graph", "comp-graph"),
            ("jax_mlp__w2-h{}-jit-epoch", "jax epoch"), ("jax_mlp__w2-h{}-jit-run", "jax run")]
    print("%6s" % "h" + "".join("%12s" % c[1] for c in cols) + "%10s%10s" % ("x eager", "x fastest"))  # best phase 5 path
    for h in hs:
        vals = [per_step(get(c[0].format(h))) for c in cols]
        best = min((v for v in vals[:5] if v), default=None)  # the fastest phase 5 path
        x = vals[7] / best if best and vals[7] else None
        fast = min((v for v in vals[7:] if v), default=None)  # the fastest framework mode (PyTorch, JAX)
        xf = fast / best if best and fast else None
        print("%6d" % h + "".join("%12s" % fmt(v, "%.4f") for v in vals) + "%10s%10s" % (fmt(x, "%.1f"), fmt(xf, "%.2f")))

gc = [k for k in recs if "gemm-compare" in k]
for k in sorted(gc):
    print("\n== %s (the GEMM benchmark: each own rung and cuBLASLt, every product)" % k.split("__")[1])
    for row in recs[k]["metrics"].get("gemm_bench", []):  # the GEMM benchmark: one row per product and rung
        print("  L%d %-15s %5dx%5dx%5d  %-14s %.4f ms  %6.2f TFLOP/s  rel.err %.1e" % (
            row["layer"], row["product"], row["M"], row["N"], row["K"], row["impl"], row["ms"], row["tflops"],
            row["rel_err"] if row.get("rel_err") is not None else float("nan")))

sw = sorted((int(m.group(1)), k) for k in recs for m in [re.search(r"^phase5_batched__batch-sweep-b(\d+)$", k)] if m)
if sw:
    print("\n== batch sweep (phase 5 own vs the fastest twin: PyTorch compiled-graph or JAX jit-run, W1 model): samples/s")
    for b, k in sw:
        m = recs[k].get("metrics") or {}
        twins = [(((get(f) or {}).get("metrics") or {}).get("samples_per_s"), lab)
                 for f, lab in (("pytorch_mlp__batch-sweep-b%d-compiled-graph" % b, "PyTorch compiled-graph"),
                                ("jax_mlp__batch-sweep-b%d-jit-run" % b, "JAX jit-run"))]
        tsps, tlab = max(((v, lab) for v, lab in twins if v), default=(None, "-"))
        print("  batch %5d  %12s samples/s  %8s ms/epoch  acc %s   fastest twin %12s samples/s (%s)  x %s" % (
              b, fmt(m.get("samples_per_s"), "%.3g"), fmt(per_epoch(recs[k]), "%.2f"), fmt(acc(recs[k])),
              fmt(tsps, "%.3g"), tlab, fmt(m["samples_per_s"] / tsps if m.get("samples_per_s") and tsps else None)))

import re
pg = sorted((int(m.group(1)), k) for k in recs for m in [re.search(r"__w1-persistent-g(\d+)$", k)] if m)
if pg:
    print("\n== phase 5 persistent kernel, blocks sweep (W1): epoch ms (median run / epochs)")
    for g, k in pg:
        m = (recs[k].get("metrics") or {}).get("persistent") or {}
        print("  blocks %4d  units/block %s/%s  smem %s B  %10s ms/epoch" % (g, m.get("first_layer_units_per_block"),
              m.get("second_layer_units_per_block"), m.get("shared_memory_bytes_per_block"), fmt(per_epoch(recs[k]), "%.2f")))
k = "phase5_batched__w1-persistent-generic"
if k in recs:
    m = (recs[k].get("metrics") or {}).get("persistent") or {}
    print("  default split, generic instance (shape not compiled in; compiled in: %s)  %10s ms/epoch"
          % (m.get("shape_compiled_in"), fmt(per_epoch(recs[k]), "%.2f")))

for impl in ("phase5_batched__w1-seed{}-own", "phase5_batched__w1-seed{}-persistent",
             "phase5_batched__w1-seed{}-pipelined", "phase5_batched__w1-seed{}-cluster32", "pytorch_mlp__w1-seed{}-graph",
             "pytorch_mlp__w1-seed{}-compiled-graph"):
    a = [acc(get(impl.format(s))) for s in (1, 2, 3)]
    a = [v for v in a if v is not None]
    if a:
        print("\n== W1 accuracy over seeds, %s: %s  mean %.2f%%" % (impl.replace("{}", "<s>"), ", ".join("%.2f" % v for v in a),
              sum(a) / len(a)))

bad = [k for k, r in recs.items() if r.get("status") != "ok"]
val = [(k, r["validation"]["errors"]) for k, r in recs.items() if (r.get("validation") or {}).get("performed")]
if val:
    print("\n== validation (float64 reference)")
    for k, e in sorted(val):
        print("  %-44s %s %s" % (k, recs[k]["validation"]["passed"], " ".join("%s=%s" % (n, fmt(v, "%.1e")) for n, v in e.items())))
if bad:
    print("\nrecords with status != ok: " + ", ".join("%s (%s)" % (k, recs[k].get("status")) for k in bad))
PYEOF
}

if [ "$MODE" = table ]; then
  table "${2:?usage: bench_mlp.sh --table DIR}"
  exit 0
fi

# ---------------------------------------------------------------------------- build
TARGETS=("$P4" "$P5")
[ "$MODE" = check ] && TARGETS+=(build/tests/gpu_tests)
# the w2 stage also times one product phase of the grid step alone (tools/exchange_product), where it builds
[ "${NO_BUILD:-0}" != 1 ] && [ -f tools/exchange_product.cu ] && [[ " $STAGES ${THEN_STAGES:-} " == *" w2 "* ]] &&
  TARGETS+=(build/tools/exchange_product)
if [ "${NO_BUILD:-0}" = 1 ]; then  # binaries built elsewhere (a carried build): they must be there
  for t in "${TARGETS[@]}"; do [ -x "$t" ] || { note "NO_BUILD=1 but $t is missing"; exit 1; }; done
  note "NO_BUILD=1: ${TARGETS[*]} as they are"
else
  note "building ${TARGETS[*]} (make -j$JOBS${DEPS_PREFIX:+ DEPS_PREFIX=$DEPS_PREFIX})"
  if ! make -j"$JOBS" ${DEPS_PREFIX:+DEPS_PREFIX=$DEPS_PREFIX} "${TARGETS[@]}" >"$LOGS/make.log" 2>&1; then
    tail -n 40 "$LOGS/make.log"
    note "build failed"
    exit 1
  fi
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'

if [ "$MODE" = check ]; then
  OUTD="${RECORDS_DIR:-build/mlp_check}"
  mkdir -p "$OUTD"
  R=(--out "$OUTD" --data "$DATA")
  run gpu_tests 0 build/tests/gpu_tests -tc="mlp*"
  if [ "${CHECK_LEVEL:-full}" = quick ]; then  # the kernel tests and the W1 validations only
    for pr in fp32 fp16; do
      run "p4-w1-$pr" 0 "$P4" "${R[@]}" --precision "$pr" --steps 100 --validate --tag "check-w1-$pr"
      run "p5-w1-own-$pr" 0 "$P5" "${R[@]}" --precision "$pr" --steps 100 --validate --tag "check-w1-own-$pr"
    done
    run p5-w1-persistent 0 "$P5" "${R[@]}" --launch persistent --steps 100 --validate --tag check-w1-persistent
    run p5-w1-pipelined 0 "$P5" "${R[@]}" --launch pipelined --steps 100 --validate --tag check-w1-pipelined
    run p5-w1-cluster32 0 "$P5" "${R[@]}" --launch cluster32 --steps 100 --validate --tag check-w1-cluster32
  else
  run sanitizer 0 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 build/tests/gpu_tests -tc="mlp*"
  # Validation on W1 (with dropout: the reference uses the device's masks) and at awkward shapes.
  for pr in fp32 fp16; do
    run "p4-w1-$pr" 0 "$P4" "${R[@]}" --precision "$pr" --steps 300 --validate --tag "check-w1-$pr" --save-init "$WORK/ci" --save-order "$WORK/co.npy"
    for g in own cublas; do
      run "p5-w1-$g-$pr" 0 "$P5" "${R[@]}" --precision "$pr" --gemm "$g" --steps 300 --validate --tag "check-w1-$g-$pr"
    done
    run "p4-odd-$pr" 0 "$P4" "${R[@]}" --precision "$pr" --layers 784,100,300,10 --batch 33 --optimizer sgd --lr 0.01 --steps 100 --validate --tag "check-odd-$pr"
    run "p5-odd-$pr" 0 "$P5" "${R[@]}" --precision "$pr" --layers 784,100,300,10 --batch 33 --optimizer sgd --lr 0.01 --steps 100 --validate --tag "check-odd-$pr"
    run "p5-odd1-$pr" 0 "$P5" "${R[@]}" --precision "$pr" --layers 784,10 --batch 1 --steps 50 --validate --tag "check-odd1-$pr"
  done
  run p5-w1-persistent 0 "$P5" "${R[@]}" --launch persistent --steps 300 --validate --tag check-w1-persistent
  run p5-odd-persistent 0 "$P5" "${R[@]}" --launch persistent --layers 784,100,300,10 --batch 33 --optimizer sgd --lr 0.01 --steps 100 --validate --tag check-odd-persistent
  run p5-w1-pipelined 0 "$P5" "${R[@]}" --launch pipelined --steps 300 --validate --tag check-w1-pipelined
  run p5-odd-pipelined 0 "$P5" "${R[@]}" --launch pipelined --layers 784,100,300,10 --batch 33 --optimizer sgd --lr 0.01 --steps 100 --validate --tag check-odd-pipelined
  # the fused W1 update + first layer at an awkward shape (one unit a block, batch <= 32)
  run p5-odd2-pipelined 0 "$P5" "${R[@]}" --launch pipelined --layers 784,37,30,10 --batch 17 --steps 100 --validate --tag check-odd2-pipelined
  # rung 5f: W1, and awkward shapes (batch 17 with Adam; batch 33 needs the 64-row instance, SGD)
  run p5-w1-cluster32 0 "$P5" "${R[@]}" --launch cluster32 --steps 300 --validate --tag check-w1-cluster32
  run p5-odd-cluster32 0 "$P5" "${R[@]}" --launch cluster32 --layers 784,37,100,10 --batch 17 --steps 100 --validate --tag check-odd-cluster32
  run p5-odd2-cluster32 0 "$P5" "${R[@]}" --launch cluster32 --layers 784,100,30,10 --batch 33 --optimizer sgd --lr 0.01 --steps 100 --validate --tag check-odd2-cluster32
  run p5-w2-1000 0 "$P5" "${R[@]}" --precision fp16 --layers 784,1000,1000,1000,10 --optimizer sgd --lr 0.003 --dropout 0 --steps 300 --validate --tag check-w2-h1000
  run p5-w2-cluster 0 "$P5" "${R[@]}" --precision fp16 --launch cluster --layers 784,128,128,128,10 --optimizer sgd --lr 0.003 --dropout 0 --steps 300 --validate --tag check-w2-h128-cluster
  run p5-odd-cluster 0 "$P5" "${R[@]}" --precision fp16 --launch cluster --layers 784,100,300,10 --batch 31 --optimizer sgd --lr 0.01 --dropout 0 --steps 100 --validate --tag check-odd-cluster
  run p5-w2-1000-lt 0 "$P5" "${R[@]}" --precision fp16 --gemm cublas --layers 784,1000,1000,1000,10 --optimizer sgd --lr 0.003 --dropout 0 --steps 300 --validate --tag check-w2-h1000-lt
  # Divergence: exit 7 and a record with status "diverged". lr 10 overflows fp16 activations (max
  # 65504) within a few steps; in fp32 the loss of W1 at lr 10 stayed finite (~1e3) on the first
  # try, so that run is only reported.
  D16=(--precision fp16 --optimizer sgd --lr 10 --epochs 1)
  run p4-diverge 7 "$P4" "${R[@]}" "${D16[@]}" --tag check-diverge
  run p5-diverge 7 "$P5" "${R[@]}" "${D16[@]}" --tag check-diverge
  run p5-diverge-lt 7 "$P5" "${R[@]}" "${D16[@]}" --gemm cublas --tag check-diverge-lt
  run twin-diverge 7 "$PYTHON" "$TWIN" "${R[@]}" "${D16[@]}" --impl eager,graph --tag "check-diverge-{impl}"
  run p5-lr10-fp32 any "$P5" "${R[@]}" --lr 10 --epochs 1 --tag check-lr10-fp32
  # The twin: its own validation, on the phases' init and order.
  run twin-validate 0 "$PYTHON" "$TWIN" "${R[@]}" --init "$WORK/ci" --order "$WORK/co.npy" --steps 300 --impl eager,graph --validate --tag "check-w1-{impl}"
  # Timing probes (short).
  run probe-p4-w1 0 "$P4" "${R[@]}" --epochs 1 --tag probe-w1-fp32 --save-init "$WORK/pi" --save-order "$WORK/po.npy"
  run probe-p4-w1-16 0 "$P4" "${R[@]}" --epochs 1 --precision fp16 --tag probe-w1-fp16
  run probe-p5-w1 0 "$P5" "${R[@]}" --epochs 2 --tag probe-w1-own
  run probe-p5-w1-lt 0 "$P5" "${R[@]}" --epochs 2 --gemm cublas --tag probe-w1-cublaslt
  run probe-p5-w1-16 0 "$P5" "${R[@]}" --epochs 2 --precision fp16 --tag probe-w1-own-fp16
  fi
  table "$OUTD"
  note "check finished: $FAILS failure(s)"
  [ "$FAILS" -eq 0 ]
  CHECK_RC=$?
  # --check followed by stages: run them too (one device call), unless the check failed.
  [ -z "${THEN_STAGES:-}" ] && exit $CHECK_RC
  if [ "$CHECK_RC" -ne 0 ] && [ -z "${FORCE_STAGES:-}" ]; then
    note "check failed: stages $THEN_STAGES not run (FORCE_STAGES=1 runs them anyway)"
    exit 1
  fi
  STAGES="$THEN_STAGES"
  RECORDS_DIR="${BENCH_RECORDS_DIR:-${RECORDS_DIR:-}}"
  MODE=bench
fi

# ---------------------------------------------------------------------------- benchmark
O=()
[ -n "${RECORDS_DIR:-}" ] && O=(--out "$RECORDS_DIR") && mkdir -p "$RECORDS_DIR"
R=("${O[@]}" --data "$DATA")
R1=("${R[@]}" --epochs "$W1_EPOCHS")  # W1 runs (w1, match, seeds)
has() { [[ " $STAGES " == *" $1 "* ]]; }

if has w1; then
  note "stage w1"
  run w1-p4-fp32 0 "$P4" "${R1[@]}" --tag w1-fp32 --save-init "$WORK/w1init" --save-order "$WORK/w1order.npy"
  run w1-p4-fp16 0 "$P4" "${R1[@]}" --precision fp16 --tag w1-fp16
  run w1-p5-own 0 "$P5" "${R1[@]}" --repeats "$P5_REPEATS" --tag w1-own --save-init "$WORK/w1init5" --save-order "$WORK/w1order5.npy"
  run w1-p5-own16 0 "$P5" "${R1[@]}" --repeats "$P5_REPEATS" --precision fp16 --tag w1-own-fp16
  run w1-p5-nopdl 0 "$P5" "${R1[@]}" --repeats "$P5_REPEATS" --pdl off --tag w1-own-nopdl
  run w1-p5-lt 0 "$P5" "${R1[@]}" --repeats "$P5_REPEATS" --gemm cublas --tag w1-cublaslt
  run w1-p5-persist 0 "$P5" "${R1[@]}" --repeats "$P5_REPEATS" --launch persistent --tag w1-persistent
  run w1-p5-pipe 0 "$P5" "${R1[@]}" --repeats "$P5_REPEATS" --launch pipelined --tag w1-pipelined
  run w1-p5-c32 0 "$P5" "${R1[@]}" --repeats "$P5_REPEATS" --launch cluster32 --tag w1-cluster32
  run w1-twins 0 "$PYTHON" "$TWIN" "${R1[@]}" --init "$WORK/w1init" --order "$WORK/w1order.npy" --impl "$TWIN_W1_IMPLS" --compile-mode "$TWIN_COMPILE_MODE" --profile --tag "w1-{impl}"
  jax_run w1-jax "${R1[@]}" --init "$WORK/w1init" --order "$WORK/w1order.npy" --impl "$JAX_W1_IMPLS" --validate --profile --tag "w1-{impl}"
  # the same twin in C++ (libtorch): is the per-step cost Python's or the framework's?
  if [ -x "$LT_MLP" ]; then
    run w1-libtorch 0 "$LT_MLP" "${R1[@]}" --init "$WORK/w1init" --order "$WORK/w1order.npy" --impl eager,graph --tag w1
  else
    note "libtorch twin not built (make libtorch): W1 without it"
  fi
fi

if has match; then
  note "stage match (W1, dropout 0, fp32)"
  run m-p4 0 "$P4" "${R1[@]}" --dropout 0 --tag w1-nodrop-fp32 --save-init "$WORK/minit" --save-order "$WORK/morder.npy"
  run m-p5 0 "$P5" "${R1[@]}" --dropout 0 --tag w1-nodrop-own
  run m-p5-lt 0 "$P5" "${R1[@]}" --dropout 0 --gemm cublas --tag w1-nodrop-cublaslt
  run m-p5-persist 0 "$P5" "${R1[@]}" --dropout 0 --launch persistent --tag w1-nodrop-persistent
  run m-p5-pipe 0 "$P5" "${R1[@]}" --dropout 0 --launch pipelined --tag w1-nodrop-pipelined
  run m-p5-c32 0 "$P5" "${R1[@]}" --dropout 0 --launch cluster32 --tag w1-nodrop-cluster32
  run m-twins 0 "$PYTHON" "$TWIN" "${R1[@]}" --dropout 0 --init "$WORK/minit" --order "$WORK/morder.npy" --impl "$TWIN_MATCH_IMPLS" --compile-mode "$TWIN_COMPILE_MODE" --tag "w1-nodrop-{impl}"
  jax_run m-jax "${R1[@]}" --dropout 0 --init "$WORK/minit" --order "$WORK/morder.npy" --impl "$JAX_MATCH_IMPLS" --validate --tag "w1-nodrop-{impl}"
  [ -x "$LT_MLP" ] && run m-libtorch 0 "$LT_MLP" "${R1[@]}" --dropout 0 --init "$WORK/minit" --order "$WORK/morder.npy" --impl eager,graph --tag w1-nodrop
fi

if has w2; then
  note "stage w2 (h in $W2_HS; phase 5 $W2_STEPS steps, phase 4 and twins $W2_STEPS_SLOW)"
  # one product phase of 5g alone, per way of reading the exchanged activation (the phase 5 notes' floor)
  [ -x build/tools/exchange_product ] && run w2-exchange-product 0 build/tools/exchange_product "${O[@]}" --tag bench-mlp
  for h in $W2_HS; do
    W2=(--layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16)
    run "w2-$h-p5" 0 "$P5" "${R[@]}" "${W2[@]}" --steps "$W2_STEPS" --tag "w2-h$h-own" --save-init "$WORK/w2init$h" --save-order "$WORK/w2order$h.npy"
    run "w2-$h-p5lt" 0 "$P5" "${R[@]}" "${W2[@]}" --steps "$W2_STEPS" --gemm cublas --tag "w2-h$h-cublaslt"
    # The same trainer with the paired backward kernels (what the fused one-pass backward replaced).
    [[ " $W2_PAIRED_HS " == *" $h "* ]] && run "w2-$h-p5paired" 0 "$P5" "${R[@]}" "${W2[@]}" --steps "$W2_STEPS" --backward paired --tag "w2-h$h-own-paired"
    # ... and with every kernel launched after the one before it has finished (no PDL).
    [[ " $W2_NOPDL_HS " == *" $h "* ]] && run "w2-$h-p5nopdl" 0 "$P5" "${R[@]}" "${W2[@]}" --steps "$W2_STEPS" --pdl off --tag "w2-h$h-own-nopdl"
    if [[ " $W2_CLUSTER_HS " == *" $h "* ]]; then
      run "w2-$h-p5cluster" 0 "$P5" "${R[@]}" "${W2[@]}" --steps "$W2_STEPS" --launch cluster --tag "w2-h$h-cluster"
      # where its step goes (clock stamps inside the kernel: an ablation, not the timed run)
      run "w2-$h-p5cluster-bd" 0 "$P5" "${R[@]}" "${W2[@]}" --steps "$W2_STEPS" --launch cluster --breakdown --tag "w2-h$h-cluster-breakdown"
    fi
    run "w2-$h-p4" 0 "$P4" "${R[@]}" "${W2[@]}" --steps "$W2_STEPS_SLOW" --tag "w2-h$h-fp16"
    run "w2-$h-p4-32" 0 "$P4" "${R[@]}" "${W2[@]}" --precision fp32 --steps "$W2_STEPS_SLOW" --tag "w2-h$h-fp32"
    impls=$TWIN_W2_IMPLS
    [[ " $TWIN_COMPILE_W2 " == *" $h "* ]] && impls=compile,$TWIN_W2_IMPLS
    # The twins' kernel lists (--profile) at every width, or at $W2_PROFILE_HS only where that is set.
    prof=(--profile)
    [ -n "${W2_PROFILE_HS+x}" ] && [[ " $W2_PROFILE_HS " != *" $h "* ]] && prof=()
    # The twin reads phase 5's --steps order (which covers $W2_STEPS >= $W2_STEPS_SLOW steps).
    [ "${W2_TWINS:-1}" = 1 ] && jax_run "w2-$h-jax" "${R[@]}" "${W2[@]}" --steps "$W2_STEPS_SLOW" --init "$WORK/w2init$h" --order "$WORK/w2order$h.npy" --impl "$JAX_W2_IMPLS" --validate "${prof[@]}" --tag "w2-h$h-{impl}"
    [ "${W2_TWINS:-1}" = 1 ] && run "w2-$h-twins" 0 "$PYTHON" "$TWIN" "${R[@]}" "${W2[@]}" --steps "$W2_STEPS_SLOW" --init "$WORK/w2init$h" --order "$WORK/w2order$h.npy" --impl "$impls" --compile-mode "$TWIN_COMPILE_MODE" "${prof[@]}" --tag "w2-h$h-{impl}"
  done
fi

if has gemm; then
  note "stage gemm"
  run gemm16 0 "$P5" "${R[@]}" --layers 784,8192,8192,8192,10 --precision fp16 --gemm-compare --tag gemm-compare-h8192-fp16
  run gemm32 0 "$P5" "${R[@]}" --layers 784,8192,8192,8192,10 --precision fp32 --gemm-compare --tag gemm-compare-h8192-fp32
fi

if has persist; then
  note "stage persist (W1, persistent kernel, blocks in $PERSIST_BLOCKS, 2 epochs)"
  for g in $PERSIST_BLOCKS; do
    run "persist-g$g" 0 "$P5" "${R[@]}" --launch persistent --blocks "$g" --epochs 2 --tag "w1-persistent-g$g"
  done
  run persist-generic 0 "$P5" "${R[@]}" --launch persistent --generic-kernel --epochs 2 --tag w1-persistent-generic
  # where a step goes, W1's instance and the generic one (clock stamps of block 0: ablations)
  run persist-bd 0 "$P5" "${R[@]}" --launch persistent --breakdown --tag w1-persistent-breakdown
  run persist-generic-bd 0 "$P5" "${R[@]}" --launch persistent --generic-kernel --breakdown --tag w1-persistent-generic-breakdown
  # rung 5e (--launch pipelined): the generic instance, and both with --breakdown
  run pipe-generic 0 "$P5" "${R[@]}" --launch pipelined --generic-kernel --epochs 2 --tag w1-pipelined-generic
  run pipe-bd 0 "$P5" "${R[@]}" --launch pipelined --breakdown --tag w1-pipelined-breakdown
  run pipe-generic-bd 0 "$P5" "${R[@]}" --launch pipelined --generic-kernel --breakdown --tag w1-pipelined-generic-breakdown
  # rung 5f (--launch cluster32): the same three
  run c32-generic 0 "$P5" "${R[@]}" --launch cluster32 --generic-kernel --epochs 2 --tag w1-cluster32-generic
  run c32-bd 0 "$P5" "${R[@]}" --launch cluster32 --breakdown --tag w1-cluster32-breakdown
  run c32-generic-bd 0 "$P5" "${R[@]}" --launch cluster32 --generic-kernel --breakdown --tag w1-cluster32-generic-breakdown
fi

if has sweep; then
  note "stage sweep (batch in $SWEEP_BATCHES, $SWEEP_EPOCHS epochs)"
  for b in $SWEEP_BATCHES; do
    run "sweep-$b" 0 "$P5" "${R[@]}" --batch "$b" --epochs "$SWEEP_EPOCHS" --workload mlp_batch_sweep --tag "batch-sweep-b$b" \
      --save-init "$WORK/sw${b}init" --save-order "$WORK/sw${b}order.npy"
    # phase 5's other paths at the same batch: every product on the SIMT tile, fp16, cuBLASLt
    for path in $SWEEP_PATHS; do
      case "$path" in
        tile) run "sweep-$b-tile" 0 "$P5" "${R[@]}" --batch "$b" --epochs "$SWEEP_EPOCHS" --workload mlp_batch_sweep --fp32-gemm tile --tag "batch-sweep-b$b-tile" ;;
        fp16) run "sweep-$b-fp16" 0 "$P5" "${R[@]}" --batch "$b" --epochs "$SWEEP_EPOCHS" --workload mlp_batch_sweep --precision fp16 --tag "batch-sweep-b$b-fp16" ;;
        row-chain) run "sweep-$b-row-chain" 0 "$P5" "${R[@]}" --batch "$b" --epochs "$SWEEP_EPOCHS" --workload mlp_batch_sweep --row-chain on --tag "batch-sweep-b$b-row-chain"
          run "sweep-$b-fp16-row-chain" 0 "$P5" "${R[@]}" --batch "$b" --epochs "$SWEEP_EPOCHS" --workload mlp_batch_sweep --precision fp16 --row-chain on --tag "batch-sweep-b$b-fp16-row-chain" ;;
        fp16-mma) run "sweep-$b-fp16-mma" 0 "$P5" "${R[@]}" --batch "$b" --epochs "$SWEEP_EPOCHS" --workload mlp_batch_sweep --precision fp16 --fp16-gemm mma --tag "batch-sweep-b$b-fp16-mma" ;;
        fp16-wgmma) run "sweep-$b-fp16-wgmma" 0 "$P5" "${R[@]}" --batch "$b" --epochs "$SWEEP_EPOCHS" --workload mlp_batch_sweep --precision fp16 --fp16-gemm wgmma --tag "batch-sweep-b$b-fp16-wgmma" ;;
        cublaslt) for pr in fp32 fp16; do
            run "sweep-$b-lt-$pr" 0 "$P5" "${R[@]}" --batch "$b" --epochs "$SWEEP_EPOCHS" --workload mlp_batch_sweep --gemm cublas --precision "$pr" --tag "batch-sweep-b$b-cublaslt-$pr"
          done ;;
      esac
    done
    # the fastest PyTorch at the same batch, on phase 5's init and order
    [ "${SWEEP_TWIN:-1}" = 1 ] && run "sweep-$b-twin" 0 "$PYTHON" "$TWIN" "${R[@]}" --batch "$b" --epochs "$SWEEP_EPOCHS" \
      --workload mlp_batch_sweep --init "$WORK/sw${b}init" --order "$WORK/sw${b}order.npy" --impl compiled-graph \
      --compile-mode "$SWEEP_TWIN_MODE" --tag "batch-sweep-b$b-{impl}"
    # faster arithmetic, not the same numerics: drawn beside the others, never the yardstick
    [ "${SWEEP_TWIN:-1}" = 1 ] && [ "${SWEEP_TWIN_TF32:-1}" = 1 ] && run "sweep-$b-twin-tf32" 0 "$PYTHON" "$TWIN" "${R[@]}" --batch "$b" \
      --epochs "$SWEEP_EPOCHS" --workload mlp_batch_sweep --init "$WORK/sw${b}init" --order "$WORK/sw${b}order.npy" \
      --impl compiled-graph --compile-mode "$SWEEP_TWIN_MODE" --tf32 --tag "batch-sweep-b$b-{impl}-tf32"
    [ "${SWEEP_TWIN:-1}" = 1 ] && jax_run "sweep-$b-jax" "${R[@]}" --batch "$b" --epochs "$SWEEP_EPOCHS" \
      --workload mlp_batch_sweep --init "$WORK/sw${b}init" --order "$WORK/sw${b}order.npy" --impl "$JAX_SWEEP_IMPLS" \
      --validate --tag "batch-sweep-b$b-{impl}"
  done
fi

if has autotune; then
  note "stage autotune (W1 twin, torch.compile max-autotune)"
  if [ ! -f "$WORK/w1order.npy" ]; then  # phase 4's W1 init and order, its record kept out of the way
    mkdir -p "$WORK/scratch"
    run autotune-init 0 "$P4" --data "$DATA" --out "$WORK/scratch" --tag autotune-init --save-init "$WORK/w1init" --save-order "$WORK/w1order.npy"
  fi
  run autotune-twin 0 "$PYTHON" "$TWIN" "${R[@]}" --init "$WORK/w1init" --order "$WORK/w1order.npy" --impl compile-max-autotune --tag "w1-{impl}"
fi

if has seeds; then
  note "stage seeds"
  for s in 1 2 3; do
    run "seed-$s-p5" 0 "$P5" "${R1[@]}" --seed "$s" --tag "w1-seed$s-own" --save-init "$WORK/s${s}init" --save-order "$WORK/s${s}order.npy"
    run "seed-$s-p5p" 0 "$P5" "${R1[@]}" --seed "$s" --launch persistent --tag "w1-seed$s-persistent"
    run "seed-$s-p5e" 0 "$P5" "${R1[@]}" --seed "$s" --launch pipelined --tag "w1-seed$s-pipelined"
    run "seed-$s-p5f" 0 "$P5" "${R1[@]}" --seed "$s" --launch cluster32 --tag "w1-seed$s-cluster32"
    [ "${SEEDS_TWIN:-1}" = 1 ] && run "seed-$s-twin" 0 "$PYTHON" "$TWIN" "${R1[@]}" --seed "$s" --init "$WORK/s${s}init" --order "$WORK/s${s}order.npy" --impl "$TWIN_SEEDS_IMPLS" --compile-mode "$TWIN_COMPILE_MODE" --tag "w1-seed$s-{impl}"
  done
fi

if has fashion; then
  note "stage fashion (W1 on Fashion-MNIST)"
  F=("${O[@]}" --data "$FASHION_DATA" --dataset fashion-mnist)
  run f-p4-fp32 0 "$P4" "${F[@]}" --tag w1-fashion-fp32 --save-init "$WORK/finit" --save-order "$WORK/forder.npy"
  run f-p4-fp16 0 "$P4" "${F[@]}" --precision fp16 --tag w1-fashion-fp16
  run f-p5-own 0 "$P5" "${F[@]}" --repeats "$P5_REPEATS" --tag w1-fashion-own
  run f-p5-persist 0 "$P5" "${F[@]}" --repeats "$P5_REPEATS" --launch persistent --tag w1-fashion-persistent
  run f-p5-pipe 0 "$P5" "${F[@]}" --repeats "$P5_REPEATS" --launch pipelined --tag w1-fashion-pipelined
  run f-p5-c32 0 "$P5" "${F[@]}" --repeats "$P5_REPEATS" --launch cluster32 --tag w1-fashion-cluster32
  run f-p5-lt 0 "$P5" "${F[@]}" --repeats "$P5_REPEATS" --gemm cublas --tag w1-fashion-cublaslt
  run f-twins 0 "$PYTHON" "$TWIN" "${F[@]}" --init "$WORK/finit" --order "$WORK/forder.npy" --impl "$TWIN_W1_IMPLS" --compile-mode "$TWIN_COMPILE_MODE" --tag "w1-fashion-{impl}"
fi

if ! table "${RECORDS_DIR:-$(ls -d profiles/*/ 2>/dev/null | head -n 1)}"; then
  FAILS=$((FAILS + 1))
  note "FAILED the summary table"
fi
note "benchmark finished: $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
