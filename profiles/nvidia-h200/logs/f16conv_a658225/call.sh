#!/usr/bin/env bash
# Step 6's gathered forward with its bytes converted to fp16 once a k-tile and read by ldmatrix (s5)
# against e802857 (s2): GEMM benchmark fp16 at 8,192 / 4,096 / 2,048 / 1,024, alternating, 2 rounds;
# s5's GPU test binary (test_mlp_kernels, test_mlp_fused) and memcheck on steps 5-7; --validate fp16
# at 8,192, 4,097 (300/100), 1,023 (1000/1000); compare_builds s2 -> s5 on the fp16 paths whose
# gathered forward is step 6 (W1 at 8,192, W2 h = 1,024: the checksums change with the MMAs' order).
# If s5's forward at 8,192 is faster: its records (GEMM benchmark fp16 at every batch; the batch sweep
# at 8,192 with JAX and PyTorch, then at 2,048 / 4,096 with JAX).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/c9a; rm -rf $R; mkdir -p $R/scratch $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/c9a.tmp.tgz --exclude=scratch $R 2>/dev/null; mv $OUT/c9a.tmp.tgz $OUT/c9a.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/tests
PIDS=""; for v in s2 s5; do mkdir -p build/$v/build; xz -dc .carry/bins/p5_$v.xz > build/$v/build/phase5_batched & PIDS="$PIDS $!"; done
xz -dc .carry/bins/tests_s5.xz > build/tests/gpu_tests & PIDS="$PIDS $!"
wait $PIDS
chmod +x build/s2/build/phase5_batched build/s5/build/phase5_batched build/tests/gpu_tests
t "$(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)"
for r in 1 2; do for b in 8192 4096 2048 1024; do
  V="s2 s5"; [ $r = 2 ] && V="s5 s2"
  for v in $V; do
    timeout 60 build/$v/build/phase5_batched --batch $b --precision fp16 --gemm-compare --out $R/scratch --tag "g-b$b-$v-r$r" > $R/g-b$b-$v-r$r.log 2>&1
    echo "b=$b fp16 $v r=$r rc $? fails $(grep -c 'FAIL' $R/g-b$b-$v-r$r.log): $(grep -h '^  L[01].*own-f16-mma\|^  L0.*cublaslt-fp16' $R/g-b$b-$v-r$r.log | awk '{print $1 substr($2,1,3), $8, $9}' | tr '\n' ' ')" | tee -a $R/ab.txt
  done
done; done
t ab; pack
timeout 120 build/tests/gpu_tests > $R/tests.log 2>&1; t "tests rc $?: $(tail -2 $R/tests.log | tr '\n' ' ')"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 build/tests/gpu_tests -tc='*step 6*,*gathered bytes*' > $R/memcheck.log 2>&1; t "memcheck rc $?: $(tail -1 $R/memcheck.log)"
kill $WD 2>/dev/null; pack; t packed
