#!/usr/bin/env bash
# scripts/bench_lanes.sh — the two benchmarks (bench_linreg.sh, bench_mlp.sh) and their --check,
# spread over the GPUs of one host: each lane is a list of invocations that runs on one GPU
# (CUDA_VISIBLE_DEVICES), the lanes run side by side. Every comparison a record makes (a phase
# against the twins of its stage) stays inside one lane, so on one GPU, in the same run.
#
#   scripts/bench_lanes.sh              build once, then the lanes; a summary last
#   LANES=1 scripts/bench_lanes.sh      everything on GPU 0, one invocation after another
#
# Lanes for 4 GPUs (fewer GPUs: lanes are folded round-robin onto the ones there are):
#   0  bench_linreg.sh (headline, sweep, host; phase 1 only in the headline: its sweep takes
#      minutes and phase 1 has its records), then bench_linreg.sh --check
#   1  bench_mlp.sh w1 match seeds fashion  (the W1 shapes: their compiled twins share one cache),
#      then scripts/validate_sweep.sh (--validate on every MLP path at awkward shapes)
#   2  bench_mlp.sh w2 for h = 128 256 512 1024 2048, then gemm
#   3  bench_mlp.sh w2 for h = 4096 8192, then persist and sweep
# LANE_EXTRA="..." appends one invocation to lane 0 (e.g. "scripts/bench_mlp.sh --check").
# The side-by-side lanes share the host's CPU cores: each torch.compile gets
# TORCHINDUCTOR_COMPILE_THREADS (default 12) workers, so a compiling twin in one lane leaves cores
# for the launch-bound phases timed in another.
#
# On a copy of the working tree (the device machine) set NB_GIT_COMMIT / NB_GIT_DIRTY: the copy's git
# may not know the commit, and every record writer takes these over the repository it finds.
# Environment: LANES (GPUs to use, default: every visible GPU, at most 4), LOG_DIR (default
# build/bench_lanes; each lane's output in lane<k>.log), JOBS (build jobs, default nproc), the
# benchmarks' own variables (passed through). Exit status: 0 when every invocation succeeded.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
if [ -z "${DEPS_PREFIX:-}" ] && [ -d .carry/deps ]; then export DEPS_PREFIX=.carry/deps; fi
LOG_DIR="${LOG_DIR:-build/bench_lanes}"
JOBS="${JOBS:-$(nproc)}"
export TORCHINDUCTOR_COMPILE_THREADS="${TORCHINDUCTOR_COMPILE_THREADS:-12}"
export PYTHONUNBUFFERED=1
have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${have:-0}" -lt 1 ]; then
  echo "bench_lanes: no GPU visible (nvidia-smi -L lists none)"
  exit 3
fi
LANES="${LANES:-$have}"
[ "$LANES" -gt 4 ] && LANES=4
[ "$LANES" -gt "$have" ] && LANES=$have
mkdir -p "$LOG_DIR"
T0=$(date +%s)
note() { printf '[%4ds] %s\n' $(( $(date +%s) - T0 )) "$*"; }

note "building everything once (make -j$JOBS), $LANES lane(s)"
targets=(all build/tests/gpu_tests)
if ! make -j"$JOBS" ${DEPS_PREFIX:+DEPS_PREFIX=$DEPS_PREFIX} "${targets[@]}" >"$LOG_DIR/make.log" 2>&1; then
  tail -n 30 "$LOG_DIR/make.log"
  note "build failed"
  exit 1
fi
if make -n libtorch >/dev/null 2>&1; then
  make libtorch >"$LOG_DIR/make_libtorch.log" 2>&1 || { tail -n 20 "$LOG_DIR/make_libtorch.log"; note "libtorch twin: build failed"; }
fi

# The lanes: one line per invocation, "NAME=value ... script args" (word-split, no quoting inside;
# an underscore in a value stands for a space).
LANE0=("SWEEP_PARTS=p2_p3_twin-gpu_twin-cpu scripts/bench_linreg.sh" "scripts/bench_linreg.sh --check")
[ -n "${LANE_EXTRA:-}" ] && LANE0+=("$LANE_EXTRA")
LANE1=("STAGES=w1_match_seeds_fashion scripts/bench_mlp.sh" "scripts/validate_sweep.sh $LOG_DIR/validate_sweep.log")
LANE2=("STAGES=w2_gemm W2_HS=128_256_512_1024_2048 scripts/bench_mlp.sh")
LANE3=("STAGES=w2_persist_sweep W2_HS=4096_8192 scripts/bench_mlp.sh")

# lane_run K GPU: the invocations of lane K, in order, on GPU (its output in lane<K>.log)
lane_run() {
  local k="$1" gpu="$2" fails=0 line
  local -n list="LANE$k"
  for line in "${list[@]}"; do
    read -r -a words <<<"$line"
    local envs=() cmd=()
    for w in "${words[@]}"; do
      # NAME=a_b_c sets NAME to "a b c" (underscores in the value only: names keep theirs)
      if [ ${#cmd[@]} -eq 0 ] && [[ "$w" == *=* ]]; then local v="${w#*=}"; envs+=("${w%%=*}=${v//_/ }"); else cmd+=("$w"); fi
    done
    echo "=== lane $k, GPU $gpu: $line"
    if ! env CUDA_VISIBLE_DEVICES="$gpu" "${envs[@]}" bash "${cmd[@]}"; then
      fails=$((fails + 1))
      echo "=== lane $k: FAILED $line"
    fi
  done
  return $fails
}

declare -A PIDS
for k in 0 1 2 3; do
  gpu=$(( k % LANES ))
  if [ "$k" -lt "$LANES" ]; then
    ( rc=0; for j in 0 1 2 3; do if [ $(( j % LANES )) -eq "$k" ]; then lane_run "$j" "$gpu" || rc=1; fi; done; exit $rc ) \
      >"$LOG_DIR/lane$k.log" 2>&1 &
    PIDS[$k]=$!
    note "lane $k on GPU $gpu (pid ${PIDS[$k]})"
  fi
done
FAILS=0
for k in "${!PIDS[@]}"; do
  if wait "${PIDS[$k]}"; then note "lane $k done"; else FAILS=$((FAILS + 1)); note "lane $k: a step FAILED (see $LOG_DIR/lane$k.log)"; fi
done
grep -h "FAILED\|benchmark finished\|check done" "$LOG_DIR"/lane*.log | head -n 40
note "all lanes finished: $FAILS lane(s) with failures"
[ "$FAILS" -eq 0 ]
