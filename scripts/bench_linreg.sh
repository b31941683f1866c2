#!/usr/bin/env bash
# scripts/bench_linreg.sh — the linear-regression benchmark, on one GPU, in one run:
# phases 1-3, the PyTorch twin (cpu, eager, compile, graph, compiled-graph) and the JAX twin (jit-step,
# jit-run; where JAX is importable, else one skip line), every number into a
# run record. Phase 3 runs its default path (one persistent kernel with the data on chip where it
# fits, else the per-epoch CUDA graph) under the usual tags, and the graph path (--path graph) under
# the same tags with the suffix -graph (implementation cuda-graph), so the sweep shows both paths
# and the cliff where the data stops fitting (two extra sizes: the largest n that fits and one past).
#
#   scripts/bench_linreg.sh            build; headline; size sweep; --source host 1 vs 4 streams;
#                                      summary table last
#   scripts/bench_linreg.sh --summary  only the summary table, from the records already there
#   scripts/bench_linreg.sh --check    correctness instead of speed: every phase with --validate at
#                                      n = 1, 7, 4095, 999983, 5000001 and 100M (phase 3 also at the
#                                      largest n that fits on chip and one past it, lr 0.01 and 0.025,
#                                      odd grids, --path graph; lr 0.05 must exit 7), --source host, the
#                                      deterministic paths run twice (bit-identical?), the twins'
#                                      GPU implementations, and compute-sanitizer memcheck on small n
#                                      (phase 3's persistent kernel also racecheck and synccheck, and
#                                      the GPU test cases of tests/gpu/test_phase3_persistent.cu)
#                                      (records go to build/linreg_check/, not profiles/)
#
# Stages (default run):
#   headline  5M points x 200 epochs, every phase and twin implementation, median of $REPEATS (5)
#             runs after 1 warm-up; tag "headline" (twins: headline-<impl>; plus the seed study's
#             loss.item()-every-epoch variant, headline-eager-sync-every-epoch). Our CUPTI trace of
#             phase 3 and torch.profiler traces of the GPU twins sit next to their records.
#   host      phase 3 --source host with 1 and 4 streams (tags host-streams1, host-streams4), 5M.
#   sweep     n = 500 ... 100M (SWEEP_NS), 200 epochs, tag "sweep-n<N>", phases with --validate;
#             phases 1-3, twins eager/compile/graph, the cpu twin up to 10M. Fewer repeats at big
#             sizes (phase 1 from 5M on: no warm-up, one run: 4 s at 5M, 85 s at 100M). One
#             progress line per point.
# Before them, a phase-3 pre-flight picks its configuration (see below).
# SWEEP_PARTS picks the sweep's implementations (default "p1 p2 p3 twin-gpu jax twin-cpu"; jax: the JAX
# twin in $SWEEP_JAX_IMPLS, default jit-run; the headline's JAX modes: HEADLINE_JAX_IMPLS): phase 1
# is slow (per-element double atomics: ~85 s per run at 100M), so its sweep can be run as its own
# invocation (SWEEP_PARTS="p1 twin-cpu") and left out of another; without p1 (or above
# P1_MAX_N) phase 1 only writes the points for the twin (one epoch, record in a scratch folder).
# The twin reads the very points phase 1 generated (phase1 --save-data /tmp/linreg_n<N>.npy).
#
# Environment: RECORDS_DIR (default: the programs' own profiles/<device-slug>/), PYTHON (python3
# with torch), DEPS_PREFIX (default .carry/deps when present), JOBS (16), REPEATS (5),
# SWEEP_NS (comma list), STAGES ("headline sweep host"), SWEEP_PARTS, P1_MAX_N, DATA_DIR (/tmp),
# HEADLINE_TWIN_IMPLS (eager,graph,compile,compiled-graph,cpu), HEADLINE_SYNC (1: also the eager twin
# with loss.item() every epoch), HEADLINE_COMPILE_MODE (auto: the headline's compiled-graph twin
# compiles both inductor modes and keeps the faster), SWEEP_TWIN_IMPLS (eager,graph,compile,compiled-graph),
# P3_CANDIDATES / P3_POLL_CANDIDATES (the pre-flight's choices, below).
# Exit status: 0 when every step succeeded and the twins' final w, b agree with phase 3's within
# 1e-4 (relative); 1 otherwise. Needs about 4-5 minutes on an H100.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

MODE=bench
[ "${1:-}" = "--check" ] && MODE=check
[ "${1:-}" = "--summary" ] && MODE=summary
if [ -z "${DEPS_PREFIX:-}" ] && [ -d .carry/deps ]; then export DEPS_PREFIX=.carry/deps; fi
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-16}"
REPEATS="${REPEATS:-5}"
STAGES="${STAGES:-headline sweep host}"
SWEEP_PARTS="${SWEEP_PARTS:-p1 p2 p3 twin-gpu jax twin-cpu}"
P1_MAX_N="${P1_MAX_N:-1000000000000}"
has_part() { [[ " $SWEEP_PARTS " == *" $1 "* ]]; }
SWEEP_NS="${SWEEP_NS:-500,5000,50000,500000,5000000,10000000,50000000,100000000}"
DATA_DIR="${DATA_DIR:-/tmp}"
HEADLINE_TWIN_IMPLS="${HEADLINE_TWIN_IMPLS:-eager,graph,compile,compiled-graph,cpu}"
HEADLINE_COMPILE_MODE="${HEADLINE_COMPILE_MODE:-auto}"
HEADLINE_SYNC="${HEADLINE_SYNC:-1}"
SWEEP_TWIN_IMPLS="${SWEEP_TWIN_IMPLS:-eager,graph,compile,compiled-graph}"
P1=build/phase1_naive
P2=build/phase2_shared_mem
P3=build/phase3_fused_streams
TWIN=baselines/pytorch/linreg.py
JAX_TWIN=baselines/jax/linreg.py
# The JAX twin runs where JAX is importable (the GPU machines); elsewhere one line says it is skipped.
HEADLINE_JAX_IMPLS="${HEADLINE_JAX_IMPLS:-jit-step,jit-run}"
SWEEP_JAX_IMPLS="${SWEEP_JAX_IMPLS:-jit-run}"
HAVE_JAX=0
"$PYTHON" -c 'import jax' >/dev/null 2>&1 && HAVE_JAX=1
FAILS=0
T_START=$(date +%s)

note() { printf '[%4ds] %s\n' $(( $(date +%s) - T_START )) "$*"; }
# run LOG CMD...: runs CMD, output to LOG (and its last lines on failure); counts failures.
run() {
  local log="$1"
  shift
  "$@" >"$log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then
    FAILS=$((FAILS + 1))
    note "FAILED (exit $rc): $*"
    tail -n 8 "$log" | sed 's/^/    | /'
  fi
  return $rc
}

mkdir -p build
if [ "$MODE" != summary ]; then
note "building phases 1-3 (make -j$JOBS${DEPS_PREFIX:+ DEPS_PREFIX=$DEPS_PREFIX})"
BUILD_TARGETS=("$P1" "$P2" "$P3")
[ -f tools/ceilings.cu ] && [ "$MODE" = bench ] && BUILD_TARGETS+=(build/tools/ceilings)
[ -f tools/grid_barrier.cu ] && [ "$MODE" = bench ] && BUILD_TARGETS+=(build/tools/grid_barrier)
[ "$MODE" = check ] && BUILD_TARGETS+=(build/tests/gpu_tests)
if ! make -j"$JOBS" ${DEPS_PREFIX:+DEPS_PREFIX=$DEPS_PREFIX} "${BUILD_TARGETS[@]}" >build/bench_linreg_make.log 2>&1; then
  tail -n 30 build/bench_linreg_make.log
  note "build failed"
  exit 1
fi
fi
mkdir -p build/bench_linreg_logs
LOGS=build/bench_linreg_logs

# ============================================================================ --check
if [ "$MODE" = check ]; then
  OUTD=build/linreg_check
  rm -rf "$OUTD"
  mkdir -p "$OUTD"
  C=(--validate --warmup 0 --repeats 1 --out "$OUTD")
  FIT=$("$P3" --print-fit 2>"$LOGS/check-fit.log")
  note "phase 3: largest n that fits on chip: ${FIT:-?} ($(cat "$LOGS/check-fit.log"))"
  for n in 1 7 4095 999983 5000001; do
    for p in "$P1" "$P2" "$P3"; do
      b=$(basename "$p")
      run "$LOGS/check-$b-$n.log" "$p" --n "$n" "${C[@]}" --tag "n$n" && note "$b n=$n: $(grep -h '^validate' "$LOGS/check-$b-$n.log")"
    done
    run "$LOGS/check-p3host-$n.log" "$P3" --n "$n" "${C[@]}" --tag "host-n$n" --source host --streams 3 --chunk 333331 &&
      note "phase3 --source host n=$n: $(grep -h '^validate' "$LOGS/check-p3host-$n.log")"
  done
  # Phase 3's two paths: the persistent kernel (default where the data fits) at the sizes above,
  # the largest that fits and one past it (the default then takes the graph), lr 0.01 and 0.025;
  # the graph path at the same sizes; odd grids of the persistent kernel.
  for lr in 0.01 0.025; do
    for n in 1 7 4095 999983 5000001 ${FIT:+$FIT $((FIT + 1))}; do
      for path in auto graph; do
        t="p3-$path-n$n-lr$lr"
        run "$LOGS/check-$t.log" "$P3" --n "$n" --lr "$lr" --path "$path" "${C[@]}" --tag "$t" --no-cupti &&
          note "phase3 --path $path n=$n lr=$lr ($(grep -ho 'path [a-z]*' "$LOGS/check-$t.log" | head -1)): $(grep -h '^validate' "$LOGS/check-$t.log")"
      done
    done
  done
  # odd grids, each at a size its blocks can hold (~35K points a block; a block holds at most ~49K on
  # an H100/H200: more exits 2, as the 999,983-point version of this check did on 1 and 7 blocks)
  for g in 1 7 67; do
    run "$LOGS/check-p3-blocks$g.log" "$P3" --n $(( 35003 * g )) --path persistent --persist-blocks "$g" "${C[@]}" --tag "p3-blocks$g" --no-cupti &&
      note "phase3 persistent, $g blocks: $(grep -h '^validate' "$LOGS/check-p3-blocks$g.log")"
  done
  for path in auto graph; do  # a divergent rate must stop with exit 7
    "$P3" --n 999983 --lr 0.05 --path "$path" "${C[@]}" --tag "p3-diverge-$path" --no-cupti >"$LOGS/check-p3-diverge-$path.log" 2>&1
    rc=$?
    if [ $rc -eq 7 ]; then note "phase3 --path $path lr 0.05: exit 7 (diverged), as it must"
    else FAILS=$((FAILS + 1)); note "phase3 --path $path lr 0.05: exit $rc, expected 7"; fi
  done
  for p in "$P2" "$P3"; do
    b=$(basename "$p")
    run "$LOGS/check-$b-100M.log" "$p" --n 100000000 "${C[@]}" --tag n100M && note "$b n=100M: $(grep -h '^validate' "$LOGS/check-$b-100M.log")"
  done
  # (phase 1 at 100M takes ~10^1 s: the benchmark's sweep validates it there.)
  # Deterministic paths: two runs, identical loss curves and parameters? (phase 3: both paths;
  # its persistent kernel is deterministic with or without the flag: checked without it)
  # variant: name|program|extra flags (tag det<k> for a phase's default, det<k>-<name> otherwise)
  for pv in "|$P1|--deterministic" "|$P2|--deterministic" "|$P3|--deterministic" "graph|$P3|--deterministic --path graph" \
            "persistent-nodet|$P3|--path persistent"; do
    IFS='|' read -r vname p vflags <<<"$pv"
    read -r -a vf <<<"$vflags"
    b=$(basename "$p")
    sfx=${vname:+-$vname}
    for k in 1 2; do
      run "$LOGS/det-$b$sfx-$k.log" "$p" --n 999983 "${vf[@]}" "${C[@]}" --tag "det$k$sfx"
    done
    "$PYTHON" - "$OUTD/${b}__det1$sfx.json" "$OUTD/${b}__det2$sfx.json" <<'EOF' && note "$b $vflags: two runs bit-identical" || { FAILS=$((FAILS + 1)); note "$b $vflags: runs DIFFER"; }
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
same = a["loss"]["per_epoch"] == b["loss"]["per_epoch"] and a["metrics"] == b["metrics"]
sys.exit(0 if same else 1)
EOF
  done
  # The twins on the GPU, on points phase 1 wrote.
  run "$LOGS/check-save.log" "$P1" --n 999983 --warmup 0 --repeats 1 --out "$OUTD" --tag save --no-cupti \
    --save-data "$DATA_DIR/linreg_check_n999983.npy"
  run "$LOGS/check-twin.log" "$PYTHON" "$TWIN" --data "$DATA_DIR/linreg_check_n999983.npy" --impl cpu,eager,compile,graph,compiled-graph \
    --validate --warmup 1 --repeats 1 --out "$OUTD" --tag check && grep -h "^validate\|^pytorch" "$LOGS/check-twin.log"
  # compute-sanitizer memcheck (our tracer steps aside under the sanitizer).
  if command -v compute-sanitizer >/dev/null; then
    for args in "$P1 --n 1001" "$P2 --n 1003 --deterministic" "$P3 --n 1001" "$P3 --n 1001 --path graph" \
                "$P3 --n 1003 --deterministic --source host --streams 2 --chunk 301" \
                "$P3 --n 1003 --deterministic --source host --streams 2 --chunk 301 --path graph"; do
      set -- $args
      b=$(basename "$1")
      if run "$LOGS/memcheck-$b-$#.log" compute-sanitizer --tool memcheck --error-exitcode 99 "$@" --epochs 5 --warmup 1 \
          --repeats 1 --validate --out "$OUTD" --tag memcheck; then
        note "memcheck $args: $(grep -h 'ERROR SUMMARY' "$LOGS/memcheck-$b-$#.log")"
      fi
    done
    # phase 3's persistent kernel: shared-memory races and barrier misuse too (3 blocks, points
    # in registers and shared memory, evaluations), and its GPU test cases under memcheck
    for tool in memcheck racecheck synccheck; do
      run "$LOGS/san-p3-$tool.log" compute-sanitizer --tool "$tool" --error-exitcode 99 "$P3" --n 60001 --path persistent \
        --persist-blocks 3 --epochs 5 --eval-every 2 --warmup 0 --repeats 1 --validate --no-cupti --out "$OUTD" --tag "san-$tool" &&
        note "$tool phase 3 persistent: $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' "$LOGS/san-p3-$tool.log" | head -1)"
    done
    run "$LOGS/san-p3-tests.log" compute-sanitizer --tool memcheck --error-exitcode 99 build/tests/gpu_tests -tc="*phase 3*" &&
      note "memcheck phase 3 GPU tests: $(grep -h 'ERROR SUMMARY' "$LOGS/san-p3-tests.log" | head -1)"
  else
    note "compute-sanitizer not found: memcheck skipped"
  fi
  run "$LOGS/check-p3-tests.log" build/tests/gpu_tests -tc="*phase 3*" && note "phase 3 GPU tests: $(grep -h 'test cases' "$LOGS/check-p3-tests.log" | tail -1)"
  note "check done, $FAILS failure(s)"
  [ "$FAILS" -eq 0 ]
  exit
fi

# ============================================================================ benchmark
OUTARGS=()
[ -n "${RECORDS_DIR:-}" ] && OUTARGS=(--out "$RECORDS_DIR")
[ "$MODE" = summary ] && STAGES=""
# (the device slug only where RECORDS_DIR does not name the folder: it costs a torch import and a CUDA context)
SLUG=""
[ -z "${RECORDS_DIR:-}" ] && SLUG=$("$PYTHON" -c 'import sys; sys.path.insert(0, "baselines/pytorch"); import common, torch; print(common.device_slug(torch.cuda.get_device_properties(0).name))' 2>/dev/null)
RDIR="${RECORDS_DIR:-profiles/${SLUG:-unknown-device}}"
mkdir -p "$RDIR"
note "records: $RDIR"
if [ -x build/tools/ceilings ] && [ -n "$STAGES" ]; then
  run "$LOGS/ceilings.log" build/tools/ceilings --tag bench-linreg "${OUTARGS[@]}" && note "ceilings: $(tail -n 1 "$LOGS/ceilings.log")"
fi
# phase 3's on-chip floor: bare grid barriers and the L2 read bandwidth (the report draws both)
if [ -x build/tools/grid_barrier ] && [ -n "$STAGES" ]; then
  run "$LOGS/grid_barrier.log" build/tools/grid_barrier --tag bench-linreg "${OUTARGS[@]}" &&
    grep -h "per round\|L2 read\|floor" "$LOGS/grid_barrier.log" | sed 's/^/    /'
fi

# Phase 3 pre-flight: each candidate configuration of the per-epoch graph path (run with --path
# graph) must pass --validate (odd sizes, both sources) and compute-sanitizer memcheck; the
# fastest at 5M (median of 5, no tracer) is used for every phase-3 run below (its flags are in
# each record's config; they only concern the graph path: the default runs pass them too, for the
# sizes where the data does not fit on chip). P3_CANDIDATES overrides.
SCRATCH=build/bench_linreg_scratch
mkdir -p "$SCRATCH"
P3FLAGS=""
if [[ " $STAGES " == *" headline "* || " $STAGES " == *" sweep "* || " $STAGES " == *" host "* ]]; then
  IFS=';' read -r -a CANDS <<<"${P3_CANDIDATES:---update next-epoch --blocks-per-sm 2;--update next-epoch --blocks-per-sm 1;--update last-block --blocks-per-sm 2}"
  best=""; best_ms=""
  for c in "${CANDS[@]}"; do
    ok=1
    for v in "--n 7" "--n 999983" "--n 5000001 --source host --streams 4 --chunk 333331" "--n 1 --source host --epochs 1"; do
      # shellcheck disable=SC2086
      "$P3" $c --path graph $v --validate --warmup 0 --repeats 1 --no-cupti --out "$SCRATCH" --tag pre >"$LOGS/pre.log" 2>&1 || { ok=0; note "pre-flight [$c] $v: FAILED"; tail -n 5 "$LOGS/pre.log" | sed 's/^/    | /'; }
    done
    mode=$(echo "$c" | grep -o 'last-block\|next-epoch' || echo default)
    if command -v compute-sanitizer >/dev/null && [[ " ${MEMCHECKED:-} " != *" $mode "* ]]; then
      MEMCHECKED="${MEMCHECKED:-} $mode"
      # shellcheck disable=SC2086
      compute-sanitizer --tool memcheck --error-exitcode 99 "$P3" $c --path graph --n 1003 --epochs 12 --warmup 1 --repeats 1 --validate \
        --out "$SCRATCH" --tag pre >"$LOGS/pre-memcheck.log" 2>&1 || { ok=0; note "pre-flight [$c] memcheck: FAILED"; grep -m3 "ERROR\|error" "$LOGS/pre-memcheck.log" | sed 's/^/    | /'; }
    fi
    [ $ok -eq 1 ] || continue
    # shellcheck disable=SC2086
    ms=$("$P3" $c --path graph --n 5000000 --warmup 1 --repeats 5 --no-cupti --out "$SCRATCH" --tag pre | sed -n 's/.*time median \([0-9.]*\) ms.*/\1/p')
    note "pre-flight [$c]: validates, memcheck clean, 5M x 200 median ${ms:-?} ms"
    if [ -n "$ms" ] && { [ -z "$best_ms" ] || awk -v a="$ms" -v b="$best_ms" 'BEGIN{exit !(a < b)}'; }; then best="$c"; best_ms="$ms"; fi
  done
  if [ -z "$best" ]; then
    FAILS=$((FAILS + 1))
    note "pre-flight: no phase-3 configuration passed; using the defaults"
  else
    P3FLAGS="$best"
    note "phase 3 runs below use: $P3FLAGS"
  fi
fi
# The persistent path's one knob, the sleep between polls of the partial sums (--poll-ns): the
# fastest of P3_POLL_CANDIDATES at 5M (median of 5, no tracer; each validated first) joins P3FLAGS
# (the graph path ignores it).
if [[ " $STAGES " == *" headline "* || " $STAGES " == *" sweep "* || " $STAGES " == *" host "* ]]; then
  bestp=""; bestp_ms=""
  for pn in ${P3_POLL_CANDIDATES:-0 200 400 800}; do
    "$P3" --poll-ns "$pn" --n 999983 --validate --warmup 0 --repeats 1 --no-cupti --out "$SCRATCH" --tag pre >"$LOGS/pre-poll.log" 2>&1 ||
      { note "pre-flight --poll-ns $pn: FAILED"; tail -n 3 "$LOGS/pre-poll.log" | sed 's/^/    | /'; continue; }
    ms=$("$P3" --poll-ns "$pn" --n 5000000 --warmup 1 --repeats 5 --no-cupti --out "$SCRATCH" --tag pre | sed -n 's/.*time median \([0-9.]*\) ms.*/\1/p')
    note "pre-flight persistent --poll-ns $pn: validates, 5M x 200 median ${ms:-?} ms"
    if [ -n "$ms" ] && { [ -z "$bestp_ms" ] || awk -v a="$ms" -v b="$bestp_ms" 'BEGIN{exit !(a < b)}'; }; then bestp="$pn"; bestp_ms="$ms"; fi
  done
  [ -n "$bestp" ] && P3FLAGS="${P3FLAGS:+$P3FLAGS }--poll-ns $bestp" && note "phase 3 runs below use: $P3FLAGS"
fi
read -r -a P3F <<<"$P3FLAGS"
P3G=("${P3F[@]}" --path graph)  # the graph path (records: tag suffix -graph, implementation cuda-graph)

if [[ " $STAGES " == *" headline "* ]]; then
  n=5000000
  H=(--n $n --warmup 1 --repeats "$REPEATS" --tag headline "${OUTARGS[@]}")
  note "headline: n=$n, 200 epochs, $REPEATS runs each"
  run "$LOGS/headline-p1.log" "$P1" "${H[@]}" --save-data "$DATA_DIR/linreg_n$n.npy" && note "  $(grep -h '^phase1' "$LOGS/headline-p1.log")"
  run "$LOGS/headline-p2.log" "$P2" "${H[@]}" && note "  $(grep -h '^phase2' "$LOGS/headline-p2.log")"
  # (--epoch-split: one more, untimed run of the stamping kernel; the record's epoch_split says
  # where an epoch's time goes: the arithmetic, the block tree, the wait for every block, the step)
  run "$LOGS/headline-p3.log" "$P3" "${P3F[@]}" "${H[@]}" --measure-peaks --epoch-split \
    --trace "$RDIR/phase3_fused_streams__headline.trace.json" &&
    note "  $(grep -h '^phase3' "$LOGS/headline-p3.log")" && note "  $(grep -h '^epoch split' "$LOGS/headline-p3.log")"
  # (not tagged headline*: the report takes the newest headline record of each implementation)
  run "$LOGS/headline-p3det.log" "$P3" "${P3F[@]}" --n $n --warmup 1 --repeats "$REPEATS" --tag det-n$n --deterministic "${OUTARGS[@]}" &&
    note "  $(grep -h '^phase3' "$LOGS/headline-p3det.log")"
  run "$LOGS/headline-p3graph.log" "$P3" "${P3G[@]}" "${H[@]/headline/headline-graph}" &&
    note "  $(grep -h '^phase3' "$LOGS/headline-p3graph.log")"
  run "$LOGS/headline-p3det-graph.log" "$P3" "${P3G[@]}" --n $n --warmup 1 --repeats "$REPEATS" --tag det-n$n-graph --deterministic \
    "${OUTARGS[@]}" && note "  $(grep -h '^phase3' "$LOGS/headline-p3det-graph.log")"
  run "$LOGS/headline-twin.log" "$PYTHON" "$TWIN" --data "$DATA_DIR/linreg_n$n.npy" --impl "$HEADLINE_TWIN_IMPLS" \
    --compile-mode "$HEADLINE_COMPILE_MODE" --validate --warmup 1 --repeats "$REPEATS" --tag headline --profile "${OUTARGS[@]}"
  grep -h "^pytorch_linreg\|^validate" "$LOGS/headline-twin.log" | sed 's/^/    /'
  if [ "$HAVE_JAX" = 1 ]; then
    run "$LOGS/headline-jax.log" "$PYTHON" "$JAX_TWIN" --data "$DATA_DIR/linreg_n$n.npy" --impl "$HEADLINE_JAX_IMPLS" \
      --validate --warmup 1 --repeats "$REPEATS" --tag headline --profile "${OUTARGS[@]}"
    grep -h "^jax_linreg\|^validate" "$LOGS/headline-jax.log" | sed 's/^/    /'
  else
    note "  JAX not importable by $PYTHON: headline without the JAX twin"
  fi
  if [ "$HEADLINE_SYNC" = 1 ]; then
  run "$LOGS/headline-twin-sync.log" "$PYTHON" "$TWIN" --data "$DATA_DIR/linreg_n$n.npy" --impl eager --sync-every-epoch \
    --warmup 1 --repeats "$REPEATS" --tag headline "${OUTARGS[@]}"
  grep -h "^pytorch_linreg" "$LOGS/headline-twin-sync.log" | sed 's/^/    /'
  fi
  # the same twin in C++ (libtorch, `make libtorch`): how much of eager's cost is Python's?
  if [ -x build/libtorch_linreg ]; then
    run "$LOGS/headline-libtorch.log" build/libtorch_linreg --data "$DATA_DIR/linreg_n$n.npy" --impl eager,graph --validate \
      --warmup 1 --repeats "$REPEATS" --tag headline "${OUTARGS[@]}" && grep -h "^libtorch\|^validate" "$LOGS/headline-libtorch.log" | sed 's/^/    /'
  else
    note "  libtorch twin not built (make libtorch): headline without it"
  fi
fi

if [[ " $STAGES " == *" host "* ]]; then
  note "--source host: 1 vs 4 streams, n=5M"
  for k in 1 4; do
    tr=()
    [ $k -gt 1 ] && tr=(--trace "$RDIR/phase3_fused_streams__host-streams$k.trace.json")
    run "$LOGS/host-$k.log" "$P3" "${P3F[@]}" --n 5000000 --source host --streams $k --warmup 1 --repeats "$REPEATS" --validate \
      --tag "host-streams$k" "${tr[@]}" "${OUTARGS[@]}" && grep -h "upload only" "$LOGS/host-$k.log" | sed "s/^/    streams=$k:/"
    run "$LOGS/host-$k-graph.log" "$P3" "${P3G[@]}" --n 5000000 --source host --streams $k --warmup 1 --repeats "$REPEATS" --validate \
      --tag "host-streams$k-graph" "${OUTARGS[@]}" && grep -h "upload only" "$LOGS/host-$k-graph.log" | sed "s/^/    graph path, streams=$k:/"
  done
fi

if [[ " $STAGES " == *" sweep "* ]]; then
  note "sweep: n = $SWEEP_NS"
  IFS=, read -r -a NS <<<"$SWEEP_NS"
  # phase 3's cliff: the largest n whose data fits on chip, and one past it (phase 3 only, both paths)
  FIT=$("$P3" --print-fit 2>"$LOGS/sweep-fit.log")
  note "  phase 3: largest n that fits on chip: ${FIT:-?} ($(cat "$LOGS/sweep-fit.log"))"
  if has_part p3 && [ -n "$FIT" ] && [ "$FIT" -gt 0 ]; then
    for n in "$FIT" $((FIT + 1)); do
      S=(--n "$n" --tag "sweep-n$n" --validate --warmup 1 --repeats "$REPEATS" --no-cupti "${OUTARGS[@]}")
      run "$LOGS/sweep-p3-$n.log" "$P3" "${P3F[@]}" "${S[@]}" && run "$LOGS/sweep-p3g-$n.log" "$P3" "${P3G[@]}" "${S[@]/sweep-n$n/sweep-n$n-graph}" &&
        note "  n=$n (cliff): phase3 $(grep -h '^phase3' "$LOGS/sweep-p3-$n.log" | sed 's/.*time median/median/'); graph path $(grep -h '^phase3' "$LOGS/sweep-p3g-$n.log" | sed 's/.*time median/median/')"
    done
  fi
  CPU_NS=()
  for n in "${NS[@]}"; do
    if [ "$n" -ge 50000000 ]; then wu=1; rp=3
    elif [ "$n" -ge 10000000 ]; then wu=1; rp=3
    else wu=1; rp=$REPEATS; fi
    p1wu=$(( n >= 5000000 ? 0 : 1 )); p1rp=$(( n >= 5000000 ? 1 : REPEATS ))
    S=(--n "$n" --tag "sweep-n$n" --validate "${OUTARGS[@]}")
    if has_part p1 && [ "$n" -le "$P1_MAX_N" ]; then
      run "$LOGS/sweep-p1-$n.log" "$P1" "${S[@]}" --warmup $p1wu --repeats $p1rp --no-cupti --save-data "$DATA_DIR/linreg_n$n.npy"
    else  # the points only
      run "$LOGS/sweep-data-$n.log" "$P1" --n "$n" --epochs 1 --warmup 0 --repeats 1 --no-cupti --out build/bench_linreg_scratch \
        --tag "data-n$n" --save-data "$DATA_DIR/linreg_n$n.npy"
    fi
    has_part p2 && run "$LOGS/sweep-p2-$n.log" "$P2" "${S[@]}" --warmup $wu --repeats $rp --no-cupti
    has_part p3 && run "$LOGS/sweep-p3-$n.log" "$P3" "${P3F[@]}" "${S[@]}" --warmup $wu --repeats $rp --no-cupti \
      $([ "$n" -ge 50000000 ] && echo --measure-peaks)
    has_part p3 && run "$LOGS/sweep-p3g-$n.log" "$P3" "${P3G[@]}" "${S[@]/sweep-n$n/sweep-n$n-graph}" --warmup $wu --repeats $rp --no-cupti
    [ "$n" -le 10000000 ] && CPU_NS+=("$n")
    med() { "$PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("%.3f" % r["timing"]["total_ms"]["median"])' "$1" 2>/dev/null || echo "-"; }
    note "  n=$n: phase1 $(med "$RDIR/phase1_naive__sweep-n$n.json") ms, phase2 $(med "$RDIR/phase2_shared_mem__sweep-n$n.json") ms, phase3 $(med "$RDIR/phase3_fused_streams__sweep-n$n.json") ms (graph path $(med "$RDIR/phase3_fused_streams__sweep-n$n-graph.json") ms)"
  done
  if has_part twin-gpu; then
  note "sweep: PyTorch twin ${SWEEP_TWIN_IMPLS//,/, }"
  run "$LOGS/sweep-twin-gpu.log" "$PYTHON" "$TWIN" --data "$DATA_DIR/linreg_n{n}.npy" --n "$SWEEP_NS" --impl "$SWEEP_TWIN_IMPLS" \
    --warmup 1 --repeats 3 --tag "sweep-n{n}" "${OUTARGS[@]}"
  grep -h "^pytorch_linreg" "$LOGS/sweep-twin-gpu.log" | sed 's/ -> .*//; s/^/    /'
  fi
  if has_part jax; then
    if [ "$HAVE_JAX" = 1 ]; then
      note "sweep: JAX twin ${SWEEP_JAX_IMPLS//,/, }"
      run "$LOGS/sweep-jax.log" "$PYTHON" "$JAX_TWIN" --data "$DATA_DIR/linreg_n{n}.npy" --n "$SWEEP_NS" --impl "$SWEEP_JAX_IMPLS" \
        --warmup 1 --repeats 3 --tag "sweep-n{n}" "${OUTARGS[@]}"
      grep -h "^jax_linreg" "$LOGS/sweep-jax.log" | sed 's/ -> .*//; s/^/    /'
    else
      note "sweep: JAX not importable by $PYTHON: no JAX twin"
    fi
  fi
  if has_part twin-cpu; then
  note "sweep: PyTorch twin cpu (up to 10M)"
  CPU_LIST=$(IFS=,; echo "${CPU_NS[*]}")
  run "$LOGS/sweep-twin-cpu.log" "$PYTHON" "$TWIN" --data "$DATA_DIR/linreg_n{n}.npy" --n "$CPU_LIST" --impl cpu \
    --warmup 1 --repeats 1 --tag "sweep-n{n}" "${OUTARGS[@]}"
  grep -h "^pytorch_linreg" "$LOGS/sweep-twin-cpu.log" | sed 's/ -> .*//; s/^/    /'
  fi
fi


rm -f "$DATA_DIR"/linreg_n*.npy

# ============================================================================ summary
note "summary${P3FLAGS:+ (phase 3 configuration: $P3FLAGS)}"
"$PYTHON" - "$RDIR" <<'EOF'
import glob, json, os, sys
d = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(d, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def med(r):
    return r["timing"]["total_ms"]["median"] if r else None
rows = [("phase1_naive", "phase1_naive__headline.json"), ("phase2_shared_mem", "phase2_shared_mem__headline.json"),
        ("phase3_fused_streams", "phase3_fused_streams__headline.json"),
        ("phase3 --deterministic", "phase3_fused_streams__det-n5000000.json"),
        ("phase3 graph path", "phase3_fused_streams__headline-graph.json"),
        ("phase3 graph --deterministic", "phase3_fused_streams__det-n5000000-graph.json")]
rows += [(f"pytorch {i}", f"pytorch_linreg__headline-{i}.json") for i in ("cpu", "eager", "compile", "graph", "compiled-graph", "eager-sync-every-epoch")]
rows += [(f"libtorch {i}", f"libtorch_linreg__headline-{i}.json") for i in ("eager", "graph")]
rows += [(f"jax {i}", f"jax_linreg__headline-{i}.json") for i in ("jit-step", "jit-run")]
FRAMEWORKS = ("pytorch", "libtorch", "jax")
recs = [(lab, load(f), f) for lab, f in rows]
eager = med(load("pytorch_linreg__headline-eager.json"))
# every "x fastest" is against the fastest framework mode among these records (PyTorch in Python or C++, JAX)
fast = min(((med(r), lab) for lab, r, f in recs if r and lab.split()[0] in FRAMEWORKS and "cpu" not in lab),
           default=(None, "-"))
p3 = load("phase3_fused_streams__headline.json")
bad = checked = 0
print("\nHEADLINE: 5M points x 200 epochs (median of the runs; speed-up vs PyTorch eager and vs the fastest framework: %s)" % fast[1])
print(f"{'implementation':28s} {'total ms':>10s} {'us/epoch':>9s} {'vs eager':>9s} {'vs fastest':>10s} {'w':>11s} {'b':>11s} {'dw/w vs p3':>10s} {'db/b vs p3':>10s}  record")
for lab, r, f in recs:
    if not r:
        print(f"{lab:28s} {'(missing)':>10s}")
        continue
    m = med(r)
    ep = r["config"].get("epochs", 200)
    w, b = r["metrics"]["w"], r["metrics"]["b"]
    dw = db = None
    if p3 and w is not None and b is not None:
        dw = abs(w - p3["metrics"]["w"]) / abs(p3["metrics"]["w"])
        db = abs(b - p3["metrics"]["b"]) / abs(p3["metrics"]["b"])
        if lab.split()[0] in FRAMEWORKS:
            checked += 1
            bad += 0 if (dw <= 1e-4 and db <= 1e-4) else 1
    sp = f"{eager / m:8.1f}x" if eager and m else "-"
    sf = f"{fast[0] / m:9.2f}x" if fast[0] and m else "-"
    fmt = lambda v: "-" if v is None else f"{v:.2e}"
    print(f"{lab:28s} {m:10.3f} {1e3 * m / ep:9.2f} {sp:>9s} {sf:>10s} {w:11.7f} {b:11.7f} {fmt(dw):>10s} {fmt(db):>10s}  {f}")
p1, p2 = med(load("phase1_naive__headline.json")), med(load("phase2_shared_mem__headline.json"))
if p1 and p2:
    print(f"phase2 vs phase1: {p1 / p2:.1f}x (target >= 2x)")
if p3 and eager:
    print(f"phase3 headline {med(p3):.3f} ms (target <= 0.5 ms), {eager / med(p3):.1f}x eager, "
          + (f"{fast[0] / med(p3):.2f}x the fastest framework ({fast[1]}; target >= 7.7x)" if fast[0] else "no framework twin"))
print("\nSWEEP (median total ms, 200 epochs)")
ns = sorted({int(os.path.basename(f).split("sweep-n")[1].split("-")[0].split(".")[0]) for f in glob.glob(os.path.join(d, "*__sweep-n*.json"))})
impls = [("phase1", "phase1_naive__sweep-n{}.json"), ("phase2", "phase2_shared_mem__sweep-n{}.json"),
         ("phase3", "phase3_fused_streams__sweep-n{}.json"), ("p3 graph", "phase3_fused_streams__sweep-n{}-graph.json")] + \
        [(i, "pytorch_linreg__sweep-n{}-" + i + ".json") for i in ("cpu", "eager", "compile", "graph", "compiled-graph")] + \
        [("jax " + i, "jax_linreg__sweep-n{}-" + i + ".json") for i in ("jit-run",)]
print(f"{'n':>11s} " + " ".join(f"{lab:>10s}" for lab, _ in impls) + "  phase3 path, GB/s (% copy)")
for n in ns:
    cells = []
    for lab, pat in impls:
        m = med(load(pat.format(n)))
        cells.append(f"{m:10.3f}" if m else f"{'-':>10s}")
    r3 = load(f"phase3_fused_streams__sweep-n{n}.json")
    e = next(iter(((r3 or {}).get("efficiency") or {}).values()), {})
    extra = f"{e.get('gbps', 0):8.0f}" + (f" ({e['pct_copy_peak']:.0f}%)" if e.get("pct_copy_peak") else "") if e else ""
    extra = f"{((r3 or {}).get('launch') or {}).get('path', '-'):>10s} " + extra
    print(f"{n:11d} " + " ".join(cells) + "  " + extra)
print("\n--source host, 5M (medians, ms)")
for k in (1, 4):
    r = load(f"phase3_fused_streams__host-streams{k}.json")
    if r:
        t = r["timing"]
        print(f"  streams={k}: upload+200 epochs {t['total_ms']['median']:.3f}, pure upload {t['upload_ms']['median']:.3f}, "
              f"first epoch done {t['first_epoch_ms']['median']:.3f} ({t['first_epoch_ms']['median'] / t['upload_ms']['median']:.3f}x upload)")
verdict = "not checked (no phase-3 headline or no twin records)" if not checked else (
    f"all {checked} agree" if bad == 0 else f"{bad} of {checked} DISAGREE")
print(f"\ntwins' final w, b vs phase 3 headline (<= 1e-4 relative): {verdict}")
sys.exit(1 if bad else 0)
EOF
SUMMARY_RC=$?
[ $SUMMARY_RC -ne 0 ] && FAILS=$((FAILS + 1))
note "done: $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
