#!/usr/bin/env bash
# call 5 (no build: build/phase5_batched built here with nvcc 13.0 for sm_90 at a0f96e6, carried
# gzipped): the GEMM benchmark's gemm stage at every batch 32 ... 8,192, fp32 and fp16.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call5; rm -rf $R; mkdir -p $R/rec
mkdir -p build; gunzip -c .carry/bins/p5_new.gz > build/phase5_batched; chmod +x build/phase5_batched
STAGES=gemm NO_BUILD=1 RECORDS_DIR=$R/rec timeout 200 scripts/bench_gemm.sh > $R/bench_gemm.log 2>&1
echo "bench_gemm rc $?"
mkdir -p $R/logs; cp -r build/bench_gemm/logs/. $R/logs/ 2>/dev/null
tar czf $OUT/call5.tgz $R
tail -n 3 $R/bench_gemm.log
