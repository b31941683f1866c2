#!/usr/bin/env bash
# e802857 where the staging change reaches below batch 2,048: the batch sweep at 1,024 (the first
# layer's forward runs on step 5 there) with JAX, and the GEMM benchmark at 32 ... 512 (its step 5,
# 6 and 7 rows run at every batch).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/c8; rm -rf $R; mkdir -p $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/c8.tmp.tgz $R 2>/dev/null; mv $OUT/c8.tmp.tgz $OUT/c8.tgz; }
( exec >/dev/null 2>&1; while sleep 60; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/bins/p5_s2.xz > build/phase5_batched; chmod +x build/phase5_batched; touch build/phase5_batched
t "$(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)"
STAGES=sweep SWEEP_BATCHES="1024" SWEEP_TWINS="jax" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 120 scripts/bench_frameworks.sh > $R/sweep.log 2>&1
t "sweep rc $?"; mkdir -p $R/logs-sweep; cp build/bench_frameworks/logs/*.log $R/logs-sweep/ 2>/dev/null; pack
STAGES=gemm BATCHES="32 64 128 256 512" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 100 scripts/bench_gemm.sh > $R/gemm.log 2>&1; t "gemm rc $?"
mkdir -p $R/logs-gemm; cp build/bench_gemm/logs/*.log $R/logs-gemm/ 2>/dev/null
kill $WD 2>/dev/null; pack; t packed
