#!/usr/bin/env bash
# Step 7 with the two-level fix-up for few-tile long-K products: the GEMM GPU tests (GEMM cases,
# gathered bytes, step 7's plan) and memcheck on step 7; the GEMM benchmark fp32 at every batch
# (records) and at 8,192 twice more.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/ta; rm -rf $R; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
xz -dc .carry/bins/p5_tl.xz > build/phase5_batched & P1=$!
xz -dc .carry/bins/gemm_tests_tl.xz > build/gemm_tests & P2=$!
wait $P1 $P2; chmod +x build/phase5_batched build/gemm_tests; touch build/phase5_batched
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1; cat $R/gpu.txt
timeout 200 build/gemm_tests -tc='*GEMM*,*gathered bytes*,*step 7*' > $R/tests.log 2>&1; t "tests rc $?: $(tail -2 $R/tests.log | tr '\n' ' ')"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 build/gemm_tests -tc='*step 7*,*gathered bytes*' > $R/memcheck.log 2>&1; t "memcheck rc $?: $(tail -1 $R/memcheck.log)"
PRECISIONS=fp32 NO_BUILD=1 STAGES=gemm RECORDS_DIR=$R/rec timeout 200 scripts/bench_gemm.sh > $R/bench_gemm.out 2>&1; t "bench_gemm rc $?"
cp -r build/bench_gemm/logs $R/gemm-logs
for r in 1 2; do
  timeout 60 build/phase5_batched --batch 8192 --gemm-compare --out $R/scratch --tag "g-r$r" > $R/g-8192-r$r.log 2>&1
done
grep -h "weight-gradient" $R/gemm-logs/gemm-b8192.log $R/g-8192-r*.log | grep "L1\|L2"
grep -h "L1 weight-gradient" $R/gemm-logs/gemm-b4096.log
tar czf $OUT/ta.tgz $R
