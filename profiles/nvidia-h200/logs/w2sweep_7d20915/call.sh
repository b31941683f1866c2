#!/usr/bin/env bash
# call 4 (two parts, W2_HS given): the width sweep, bench_frameworks.sh stage w2 with no build (phase 5 built
# here with nvcc 13.0 for sm_90 and carried): phase 5's graph path, grid kernel (and cluster at 128), PyTorch
# compiled-graph and JAX jit-epoch / jit-run on the same init and order.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
PART=${PART:-a}
R=build/call4$PART; mkdir -p $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
PACK=$OUT/call4$PART.tgz NO_BUILD=1 STAGES=w2 W2_HS="$W2_HS" RECORDS_DIR=$R/rec timeout ${LIMIT:-500} scripts/bench_frameworks.sh > $R/w2.log 2>&1; t "w2 rc $?"
cp -r build/bench_frameworks/logs $R/w2_logs 2>/dev/null
tar czf $OUT/call4$PART.tgz --exclude="*.trace.json" $R
tail -40 $R/w2.log
