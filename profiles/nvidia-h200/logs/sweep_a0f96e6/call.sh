#!/usr/bin/env bash
# call 4 (no build: build/phase5_batched built here with nvcc 13.0 for sm_90 at a0f96e6, carried gzipped): the batch
# sweep of W1's model at 32 ... 8,192 (every phase-5 path; the backward branched), the JAX twin at every
# batch, PyTorch's compiled graph at 8,192 (with TF32 allowed there too).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call4; rm -rf $R; mkdir -p $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call4.tmp.tgz $R && mv $OUT/call4.tmp.tgz $OUT/call4.tgz; }
( exec >/dev/null 2>&1; sleep 560; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
mkdir -p build; gunzip -c .carry/bins/p5_new.gz > build/phase5_batched; chmod +x build/phase5_batched
sweep() {  # sweep NAME BATCHES TWINS
  STAGES=sweep SWEEP_BATCHES="$2" SWEEP_TWINS="$3" NO_BUILD=1 RECORDS_DIR=$R/rec timeout "$4" scripts/bench_frameworks.sh > $R/sweep-$1.log 2>&1
  t "sweep $1 rc $?"; mkdir -p $R/logs-$1; cp build/bench_frameworks/logs/*.log $R/logs-$1/ 2>/dev/null; rm -rf build/bench_frameworks/logs; pack
}
sweep a "2048 64 4096 512 128 256" "jax" 280
sweep c "8192" "torch torch-tf32 jax" 120
sweep b "32 1024" "jax" 110
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 560" 2>/dev/null
cat $R/sweep-*.log | grep -v "^\s*$" | cut -c1-150
