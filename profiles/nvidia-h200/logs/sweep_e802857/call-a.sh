#!/usr/bin/env bash
# e802857's records (phase 5 built on the host, nvcc 13.0, sm_90, carried): the batch sweep at 2,048
# and 4,096 with JAX and at 8,192 with JAX and PyTorch's compiled graph (also with TF32 allowed); the
# GEMM benchmark (scripts/bench_gemm.sh STAGES=gemm) at 1,024 ... 8,192, fp32 and fp16; --validate on
# the step's paths at 8,192 and 4,097 (300/100). Leaves the binary and the data under build/ for part b.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/c5; rm -rf $R; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/c5.tmp.tgz --exclude=scratch $R 2>/dev/null; mv $OUT/c5.tmp.tgz $OUT/c5.tgz; }
( exec >/dev/null 2>&1; while sleep 60; do pack; done ) & WD=$!
mkdir -p build/s2/build build/data; cp -r .carry/data/mnist build/data/
xz -dc .carry/bins/p5_s2.xz > build/s2/build/phase5_batched; chmod +x build/s2/build/phase5_batched
cp build/s2/build/phase5_batched build/phase5_batched; touch build/phase5_batched
t "$(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)"
sweep() {  # sweep NAME BATCHES TWINS TIMEOUT
  STAGES=sweep SWEEP_BATCHES="$2" SWEEP_TWINS="$3" NO_BUILD=1 RECORDS_DIR=$R/rec timeout "$4" scripts/bench_frameworks.sh > $R/sweep-$1.log 2>&1
  t "sweep $1 rc $?"; mkdir -p $R/logs-$1; cp build/bench_frameworks/logs/*.log $R/logs-$1/ 2>/dev/null; rm -rf build/bench_frameworks/logs; pack
}
sweep a "2048 4096" "jax" 150
sweep c "8192" "torch torch-tf32 jax" 170
STAGES=gemm BATCHES="1024 2048 4096 8192" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 120 scripts/bench_gemm.sh > $R/gemm.log 2>&1; t "gemm rc $?"
mkdir -p $R/logs-gemm; cp build/bench_gemm/logs/*.log $R/logs-gemm/ 2>/dev/null; pack
V="--data .carry/data/mnist --no-cupti --epochs 1 --validate --validate-steps 1"
for c in "8192|--precision fp32" "8192|--precision fp16" "8192|--fp32-gemm fma" "4097|--precision fp32 --layers 784,300,100,10" "4097|--precision fp16 --layers 784,300,100,10" "4097|--fp32-gemm fma --layers 784,300,100,10"; do
  IFS='|' read -r b a <<<"$c"
  timeout 150 build/phase5_batched $V --batch $b $a --out $R/scratch --tag val > $R/val-$b-${a// /_}.log 2>&1
  echo "validate b=$b $a rc $?: $(grep -i valid $R/val-$b-${a// /_}.log | tail -2 | tr '\n' ' ')" | tee -a $R/validate.txt
done
t validate
kill $WD 2>/dev/null; pack; t packed
