#!/usr/bin/env bash
# Step 7: rows interleaved (il, a88bbab) against il + each warp converting the bytes it reads
# (wl, 701cecf: no second block barrier a k-tile). GEMM benchmark at 8,192 / 4,096 / 2,048, both builds
# alternating, 3 rounds; then both builds' fp32 GEMM records at every batch (bench_gemm, one dir
# each); the GPU tests (GEMM cases + gathered bytes) and memcheck on step 7 with the wl build's tests.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/f3; rm -rf $R; mkdir -p $R/scratch $R/rec-il $R/rec-wl
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/f3.tmp.tgz $R 2>/dev/null; mv $OUT/f3.tmp.tgz $OUT/f3.tgz; }
mkdir -p build/tests build/il build/wl
xz -dc .carry/bins/p5_il.xz > build/il/phase5_batched & P1=$!
xz -dc .carry/bins/p5_wl.xz > build/wl/phase5_batched & P2=$!
[ -f .carry/bins/tests_wl.xz ] && { xz -dc .carry/bins/tests_wl.xz > build/tests/gpu_tests & P3=$!; wait $P3; chmod +x build/tests/gpu_tests; }
wait $P1 $P2; chmod +x build/il/phase5_batched build/wl/phase5_batched
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1; cat $R/gpu.txt
for r in 1 2 3; do for b in 8192 4096 2048; do
  V="il wl"; [ $r = 2 ] && V="wl il"
  for v in $V; do
    timeout 60 build/$v/phase5_batched --batch $b --gemm-compare --out $R/scratch --tag "g-b$b-$v-r$r" > $R/g-b$b-$v-r$r.log 2>&1
    echo "b=$b $v r=$r rc $?: $(grep -h 'L0.*own-fma64\|L0.*cublaslt-fp32' $R/g-b$b-$v-r$r.log | awk '{print $2, $8, $9}' | tr '\n' ' ')" | tee -a $R/ab.txt
  done
done; done
t ab; pack
for v in il wl; do
  mkdir -p build/bench_gemm; rm -rf build/bench_gemm/logs
  cp build/$v/phase5_batched build/phase5_batched; touch build/phase5_batched
  C=a88bbab; [ $v = wl ] && C=701cecf
  NB_GIT_COMMIT=$C PRECISIONS=fp32 NO_BUILD=1 STAGES=gemm RECORDS_DIR=$R/rec-$v timeout 200 scripts/bench_gemm.sh > $R/bench_gemm-$v.out 2>&1; t "bench_gemm $v rc $?"
  cp -r build/bench_gemm/logs $R/gemm-logs-$v
done
pack
if [ -x build/tests/gpu_tests ]; then
  timeout 240 build/tests/gpu_tests -tc='*GEMM*,*gathered bytes*' > $R/tests.log 2>&1; t "tests rc $?: $(tail -2 $R/tests.log | tr '\n' ' ')"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 build/tests/gpu_tests -tc='*step 7*,*gathered bytes*' > $R/memcheck.log 2>&1; t "memcheck rc $?: $(tail -1 $R/memcheck.log)"
fi
pack; t packed
