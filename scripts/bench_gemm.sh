#!/usr/bin/env bash
# scripts/bench_gemm.sh — the GEMM ladder against cuBLASLt. (What the rungs buy a training step:
# scripts/bench_frameworks.sh's sweep runs phase 5's plan and --fp32-gemm tile beside the twins.)
#
#   test   the GEMM cases of the GPU tests (every rung against float64 at awkward shapes), plain and
#          under compute-sanitizer memcheck
#   gemm   phase 5's GEMM benchmark (--gemm-compare) on the W1 model (784-128-64-10) at every batch in
#          $BATCHES, fp32 and fp16: every product of a step, each own rung and cuBLASLt, checked
#          against float64 and timed; the first layer's X gathered from image bytes as the step
#          reads it.                                                       tags gemm-b<B>[-fp16]
#
# Environment: STAGES ("test gemm"), BATCHES ("32 64 128 256 512 1024 2048 4096 8192"), PRECISIONS
# ("fp32 fp16": the gemm stage's runs),
# RECORDS_DIR (default profiles/<device-slug>), DATA (.carry/data/mnist or data/mnist), JOBS (16),
# PACK (a .tgz of the records and logs, rewritten after every stage), NO_BUILD (1: run the programs
# already under build/, e.g. built elsewhere for this GPU and carried). Exit status: 0 when every run
# succeeded (and validated); 1 otherwise; 3 without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
if [ -z "${DEPS_PREFIX:-}" ] && [ -d .carry/deps ]; then export DEPS_PREFIX=.carry/deps; fi
STAGES="${STAGES:-test gemm}"
BATCHES="${BATCHES:-32 64 128 256 512 1024 2048 4096 8192}"
PRECISIONS="${PRECISIONS:-fp32 fp16}"
JOBS="${JOBS:-16}"
if [ -z "${DATA:-}" ]; then
  DATA=data/mnist
  [ -d .carry/data/mnist ] && DATA=.carry/data/mnist
fi
nvidia-smi -L >/dev/null 2>&1 || { echo "bench_gemm: no GPU"; exit 3; }
WORK=build/bench_gemm
LOGS=$WORK/logs
mkdir -p "$LOGS"
FAILS=0
T_START=$(date +%s)
note() { printf '[%4ds] %s\n' $(( $(date +%s) - T_START )) "$*"; }
run() {  # run NAME CMD...: output to $LOGS/NAME.log, a summary line shown; a non-zero exit counts
  local name="$1"
  shift
  local t0=$(date +%s)
  "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    FAILS=$((FAILS + 1))
    note "FAILED $name (exit $rc): $*"
    tail -n 12 "$LOGS/$name.log" | sed 's/^/    | /'
  else
    note "ok     $name ($(( $(date +%s) - t0 )) s): $(grep -h '^record\|^\[doctest\] test cases\|median' "$LOGS/$name.log" | tail -n 1 | cut -c1-150)"
  fi
}
has() { [[ " $STAGES " == *" $1 "* ]]; }
pack() {
  [ -n "${PACK:-}" ] || return 0
  tar czf "$PACK.tmp" -C "${RECORDS_DIR:-profiles}" . -C "$PWD/$WORK" logs 2>/dev/null && mv "$PACK.tmp" "$PACK"
}

TARGETS=(build/phase5_batched)
has test && TARGETS+=(build/tests/gpu_tests)
if [ "${NO_BUILD:-0}" = 1 ]; then
  note "no build (NO_BUILD=1)"
  for t in "${TARGETS[@]}"; do [ -x "$t" ] || { echo "bench_gemm: NO_BUILD=1 but $t is not built"; exit 1; }; done
else
  note "build"
  make -j"$JOBS" "${TARGETS[@]}" >"$LOGS/build.log" 2>&1 || { tail -n 20 "$LOGS/build.log"; exit 1; }
fi
O=()
[ -n "${RECORDS_DIR:-}" ] && O=(--out "$RECORDS_DIR") && mkdir -p "$RECORDS_DIR"

if has test; then
  note "stage test"
  TC='-tc=*GEMM*'
  run test-gemm build/tests/gpu_tests "$TC"
  run test-gemm-memcheck compute-sanitizer --tool memcheck --error-exitcode 99 build/tests/gpu_tests "$TC"
  pack
fi

if has gemm; then
  note "stage gemm (batches $BATCHES)"
  for b in $BATCHES; do
    [[ " $PRECISIONS " == *" fp32 "* ]] && run "gemm-b$b" build/phase5_batched "${O[@]}" --batch "$b" --gemm-compare --tag "gemm-b$b"
    [[ " $PRECISIONS " == *" fp16 "* ]] &&
      run "gemm-b$b-fp16" build/phase5_batched "${O[@]}" --batch "$b" --precision fp16 --gemm-compare --tag "gemm-b$b-fp16"
  done
  pack
fi

pack
note "done: $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
