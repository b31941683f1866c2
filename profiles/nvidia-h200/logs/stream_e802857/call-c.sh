#!/usr/bin/env bash
# e802857 (s2: X3Stream staging, stages rotated) against the same tree at 4 stages (v4): GEMM
# benchmark at 8,192 / 4,096 / 2,048 / 1,024, fp16 and fp32, alternating, 2 rounds; the GEMM and
# the small GPU test binary's cases (test_mlp_kernels, test_mlp_fused) of s2 plain and under compute-sanitizer memcheck; Nsight Compute on
# s2's step 6 forward and step 5 forward at 8,192.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/c3; rm -rf $R; mkdir -p $R/scratch $R/ncu
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/c3.tmp.tgz --exclude='*.ncu-rep' --exclude=scratch $R 2>/dev/null; mv $OUT/c3.tmp.tgz $OUT/c3.tgz; }
( exec >/dev/null 2>&1; sleep 560; pack ) & WD=$!
mkdir -p build/tests
PIDS=""; for v in s2 v4; do mkdir -p build/$v/build; xz -dc .carry/bins/p5_$v.xz > build/$v/build/phase5_batched & PIDS="$PIDS $!"; done
xz -dc .carry/bins/tests_s2.xz > build/tests/gpu_tests & PIDS="$PIDS $!"
wait $PIDS
chmod +x build/s2/build/phase5_batched build/v4/build/phase5_batched build/tests/gpu_tests
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1; cat $R/gpu.txt
for r in 1 2; do for b in 8192 4096 2048 1024; do for pr in fp16 fp32; do
  V="s2 v4"; [ $r = 2 ] && V="v4 s2"
  for v in $V; do
    timeout 60 build/$v/build/phase5_batched --batch $b --precision $pr --gemm-compare --out $R/scratch --tag "g-b$b-$pr-$v-r$r" > $R/g-b$b-$pr-$v-r$r.log 2>&1
    echo "b=$b $pr $v r=$r rc $? fails $(grep -c 'FAIL' $R/g-b$b-$pr-$v-r$r.log): $(grep -h '^  L0.*own-\(f16-mma\|tf32x3\|fma64\)\|^  L0.*cublaslt' $R/g-b$b-$pr-$v-r$r.log | awk '{print substr($2,1,3), $8, $9}' | tr '\n' ' ')" | tee -a $R/ab.txt
  done
done; done; done
t ab; pack
timeout 240 build/tests/gpu_tests > $R/tests.log 2>&1; t "tests rc $?: $(tail -2 $R/tests.log | tr '\n' ' ')"
pack
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 build/tests/gpu_tests -tc='*step 5*,*step 6*,*step 7*,*gathered bytes*,*b_fresh*,*programmatic*,*first-layer update*' > $R/memcheck.log 2>&1; t "memcheck rc $?: $(tail -1 $R/memcheck.log)"
pack
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters"
for k in "f16fwd|fp16|gemm_f16mma_kernel.*GemmProblem<nb::mlp::GatherView" "x3fwd|fp32|gemm_tf32x3_kernel.*GemmProblem<nb::mlp::GatherView"; do
  IFS='|' read -r kn pr rx <<<"$k"
  timeout 120 ncu --kernel-name-base demangled --kernel-name "regex:$rx" --launch-skip 2 --launch-count 1 $S --import-source yes -o $R/ncu/$kn build/s2/build/phase5_batched --batch 8192 --precision $pr --gemm-compare --out $R/scratch --tag ncu > $R/ncu/$kn.out 2>&1
  ncu -i $R/ncu/$kn.ncu-rep > $R/ncu/$kn.txt 2>&1
  ncu -i $R/ncu/$kn.ncu-rep --page source --csv --print-source sass > $R/ncu/$kn-sass.csv 2>&1; t "ncu $kn rc $?"
done
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 560" 2>/dev/null
