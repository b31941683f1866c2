#!/usr/bin/env bash
# Main's build (.carry/j/p5.xz, phase 5 of 7f13858 = main's phase 5 code): the batch sweep at 8,192
# with the twins (PyTorch compiled-graph, JAX jit-run), on an H200. $OUT/j30.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j30; rm -rf $R; mkdir -p $R/rec $R/logs
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j30.XXXXXX); cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null; tar czf $f $R 2>/dev/null; mv $f $OUT/j30.tgz; }
( exec >/dev/null 2>&1; while sleep 10; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/j/p5.xz > build/phase5_batched; chmod +x build/phase5_batched
t "p5 $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
SWEEP_TWINS="torch jax" STAGES=sweep SWEEP_BATCHES="8192" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 240 scripts/bench_frameworks.sh > $R/sweep.log 2>&1; t "sweep rc $?"
kill $WD 2>/dev/null; pack; grep -v "^\s*$" $R/sweep.log | cut -c1-170 | tail -16; t done
