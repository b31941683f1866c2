#!/usr/bin/env bash
# (phase 5 built here, nvcc 13.0, sm_90, carried xz'd: old = 60a9493's build, new = this commit's;
# the GPU tests built on the machine.) PART=1: the GPU tests; scripts/compare_builds.sh, old against
# new, on phase 5's own-GEMM paths (W1 at batch 32 fp32/fp16, pipelined, cluster32; W2 h = 128 and
# 1,024 fp32/fp16 and the cluster kernel; W1 at 2,048 and 8,192 fp32/fp16). PART=2: the batch sweep
# at 2,048 and 4,096 with JAX and at 8,192 with JAX and PyTorch's compiled graph (also with TF32
# allowed); the GEMM benchmark (scripts/bench_gemm.sh STAGES=gemm) at 2,048, 4,096 and 8,192.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
PART=${PART:-1}
R=build/final$PART; rm -rf $R; mkdir -p $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/final$PART.tmp.tgz $R && mv $OUT/final$PART.tmp.tgz $OUT/final$PART.tgz; }
( exec >/dev/null 2>&1; while sleep 60; do pack; done ) & WD=$!
mkdir -p build/before/build
[ -x build/before/build/phase5_batched ] || { xz -dc .carry/old/p5_old.xz > build/before/build/phase5_batched; chmod +x build/before/build/phase5_batched; }
xz -dc .carry/bins/p5_new.xz > build/phase5_batched; chmod +x build/phase5_batched; touch build/phase5_batched
t "$(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)"
if [ "$PART" = 1 ]; then
  make -j16 DEPS_PREFIX=.carry/deps build/tests/gpu_tests > $R/make_tests.log 2>&1; t "make gpu_tests rc $?"
  timeout 200 build/tests/gpu_tests > $R/gpu_tests.log 2>&1; t "gpu_tests rc $?: $(tail -n 3 $R/gpu_tests.log | tr '\n' ' ')"
  pack
  NO_BUILD=1 ONLY='^(w1-p5-own-fp32|w1-p5-own-fp16|w1-p5-pipelined|w1-p5-cluster32|w2-h(128|1024)-p5-own-fp(32|16)|w2-h128-p5-cluster|w1-b(2048|8192)-p5-own-fp(32|16))$' \
    timeout 330 scripts/compare_builds.sh build/before $R/compare_builds.log > $R/compare_builds.out 2>&1
  t "compare_builds rc $?"; cat $R/compare_builds.log
else
  sweep() {  # sweep NAME BATCHES TWINS TIMEOUT
    STAGES=sweep SWEEP_BATCHES="$2" SWEEP_TWINS="$3" NO_BUILD=1 RECORDS_DIR=$R/rec timeout "$4" scripts/bench_frameworks.sh > $R/sweep-$1.log 2>&1
    t "sweep $1 rc $?"; mkdir -p $R/logs-$1; cp build/bench_frameworks/logs/*.log $R/logs-$1/ 2>/dev/null; rm -rf build/bench_frameworks/logs; pack
  }
  sweep a "2048 4096" "jax" 150
  sweep c "8192" "torch torch-tf32 jax" 160
  STAGES=gemm BATCHES="2048 4096 8192" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 120 scripts/bench_gemm.sh > $R/gemm.log 2>&1; t "gemm rc $?"
  mkdir -p $R/logs-gemm; cp build/bench_gemm/logs/*.log $R/logs-gemm/ 2>/dev/null
fi
kill $WD 2>/dev/null; pack; t packed
