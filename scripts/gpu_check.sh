#!/usr/bin/env bash
# scripts/gpu_check.sh — one command for a GPU machine (`make gpu-check`), run from the repo root.
#
#  1. builds the common libraries, the GPU tests, the tools, then each phase on its own (a phase
#     that fails to build is reported and the rest go on);
#  2. `make test-gpu`: the GPU doctest suite, plainly and under compute-sanitizer memcheck;
#  3. tools/ceilings and tools/tracer_overhead (their records go to profiles/<device-slug>/);
#  4. each phase that exists, briefly, with --validate and --tag check;
#  5. prints a table (step, exit code, seconds) last, and packs the run records written by this
#     run plus every log into $OUT_DIR/gpu_check.tgz (OUT_DIR: $OUT when set, else build/).
# Exit status: 0 when every step passed, else 1. Each step's output is in its log.
#
# Environment: DEPS_PREFIX (default .carry/deps when that folder exists), DATA_SRC for
# `make data` (default .carry/data when present), JOBS (default 16), STEP_TIMEOUT (seconds per
# phase run, default 240).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

if [ -z "${DEPS_PREFIX:-}" ] && [ -d .carry/deps ]; then export DEPS_PREFIX=.carry/deps; fi
if [ -n "${OUT:-}" ]; then OUT_DIR="$OUT"; fi
OUT_DIR="${OUT_DIR:-build}"
JOBS="${JOBS:-16}"
STEP_TIMEOUT="${STEP_TIMEOUT:-240}"
LOGS=build/gpu_check
mkdir -p "$LOGS" "$OUT_DIR"
rm -f "$LOGS"/*.log
STAMP="$LOGS/.started"
touch "$STAMP"
sleep 1  # records written from now on are newer than the stamp

NAMES=()
CODES=()
SECS=()
# step NAME CMD...: runs CMD with its output in $LOGS/NAME.log (and a one-line note on stdout).
step() {
  local name="$1"
  shift
  local log="$LOGS/$name.log" t0 t1 rc
  echo "== $name: $*"
  t0=$(date +%s.%N)
  "$@" >"$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  NAMES+=("$name")
  CODES+=("$rc")
  SECS+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')")
  if [ "$rc" -ne 0 ]; then
    echo "   exit $rc; last lines of $log:"
    tail -n 15 "$log" | sed 's/^/   | /'
  fi
  return 0
}
skip() {  # skip NAME REASON
  NAMES+=("$1")
  CODES+=("skip")
  SECS+=("-")
  echo "== $1: skipped ($2)"
}

PHASES=(phase1_naive phase2_shared_mem phase3_fused_streams phase4_mlp phase5_batched)
has_sources() { compgen -G "$1/*.cu" >/dev/null; }

# ---- 1. build
nvidia-smi -L >"$LOGS/nvidia-smi.txt" 2>&1 || true
step build_common make -j"$JOBS" build/libnb_cuda.a build/libnb_host.a build/tests/gpu_tests tools
for p in "${PHASES[@]}"; do
  if has_sources "$p"; then step "build_$p" make -j"$JOBS" "build/$p"; fi
done

# ---- 2. GPU tests, plain and under compute-sanitizer memcheck
step test_gpu make test-gpu

# ---- 3. ceilings and tracer overhead (real measurements: default tag, default folder)
if [ -f build/tools/ceilings ]; then step ceilings build/tools/ceilings; else skip ceilings "not built"; fi
if [ -f build/tools/tracer_overhead ]; then step tracer_overhead build/tools/tracer_overhead; else skip tracer_overhead "not built"; fi

# ---- 4. each phase briefly with --validate
# make data also wants fashion-mnist; when only that is missing from DATA_SRC, go on with mnist.
fetch_data() {
  make data DATA_SRC="$1"
  local rc=$? n
  n=$(find data/mnist -name '*-ubyte*' 2>/dev/null | wc -l)
  if [ "$rc" -ne 0 ] && [ "$n" -ge 4 ]; then
    echo "gpu_check: make data exited $rc, but data/mnist has its 4 files: going on with MNIST only"
    return 0
  fi
  return "$rc"
}
if [ ! -d data/mnist ] && [ -d "${DATA_SRC:-.carry/data}" ]; then
  step data fetch_data "${DATA_SRC:-.carry/data}"
fi
# MNIST: data/mnist after `make data`; without it (no fetch script yet, say) read DATA_SRC's copy.
MNIST=data/mnist
if [ ! -d "$MNIST" ] && [ -d "${DATA_SRC:-.carry/data}/mnist" ]; then MNIST="${DATA_SRC:-.carry/data}/mnist"; fi
declare -A ARGS=(
  [phase1_naive]="--n 999983 --epochs 200 --validate --tag check"
  [phase2_shared_mem]="--n 999983 --epochs 200 --validate --tag check"
  [phase3_fused_streams]="--n 999983 --epochs 200 --validate --tag check"
  [phase4_mlp]="--epochs 1 --validate --tag check --data $MNIST"
  [phase5_batched]="--epochs 1 --validate --tag check --data $MNIST"
)
for p in "${PHASES[@]}"; do
  if [ -f "build/$p" ] && [ -x "build/$p" ]; then
    # shellcheck disable=SC2086  # ARGS holds several words on purpose
    step "run_$p" timeout "$STEP_TIMEOUT" "build/$p" ${ARGS[$p]}
  elif has_sources "$p"; then
    skip "run_$p" "did not build"
  fi
done

# ---- 5. archive: the records this run wrote, every log
mapfile -t RECORDS < <(find profiles -newer "$STAMP" -type f 2>/dev/null | sort)
tar -czf "$OUT_DIR/gpu_check.tgz" "$LOGS"/*.log "$LOGS/nvidia-smi.txt" "${RECORDS[@]}" 2>/dev/null ||
  echo "warning: could not write $OUT_DIR/gpu_check.tgz"

fail=0
echo
echo "gpu-check on $(head -n 1 "$LOGS/nvidia-smi.txt")"
printf '%-26s %6s %8s\n' step exit seconds
for i in "${!NAMES[@]}"; do
  printf '%-26s %6s %8s\n' "${NAMES[$i]}" "${CODES[$i]}" "${SECS[$i]}"
  case "${CODES[$i]}" in 0 | skip) ;; *) fail=1 ;; esac
done
echo "records written: ${#RECORDS[@]}; archive: $OUT_DIR/gpu_check.tgz"
exit "$fail"
