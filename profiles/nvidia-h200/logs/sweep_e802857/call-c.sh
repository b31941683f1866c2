#!/usr/bin/env bash
# e802857: the batch sweep at 8,192 again (JAX and PyTorch compiled-graph, also with TF32 allowed),
# the same commands as part a of sweep_e802857, whose one timed JAX run took 622 us a step (248 at
# c3dc21f).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/c6; rm -rf $R; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/c6.tmp.tgz --exclude=scratch $R 2>/dev/null; mv $OUT/c6.tmp.tgz $OUT/c6.tgz; }
( exec >/dev/null 2>&1; while sleep 60; do pack; done ) & WD=$!
mkdir -p build/s2/build build/data; cp -r .carry/data/mnist build/data/
xz -dc .carry/bins/p5_s2.xz > build/s2/build/phase5_batched; chmod +x build/s2/build/phase5_batched
cp build/s2/build/phase5_batched build/phase5_batched; touch build/phase5_batched
t "$(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)"
sweep() {  # sweep NAME BATCHES TWINS TIMEOUT
  STAGES=sweep SWEEP_BATCHES="$2" SWEEP_TWINS="$3" NO_BUILD=1 RECORDS_DIR=$R/rec timeout "$4" scripts/bench_frameworks.sh > $R/sweep-$1.log 2>&1
  t "sweep $1 rc $?"; mkdir -p $R/logs-$1; cp build/bench_frameworks/logs/*.log $R/logs-$1/ 2>/dev/null; rm -rf build/bench_frameworks/logs; pack
}

sweep c "8192" "torch torch-tf32 jax" 170


kill $WD 2>/dev/null; pack; t packed
