#!/usr/bin/env bash
# The mainloop's steady iterations without bounds tests (s4: the k-tiles whose copies go by the
# streams' fast path, then the last few with every test) against e802857 (s2): GEMM benchmark at
# 8,192 / 4,096 / 2,048 / 1,024, fp32 and fp16, alternating, 2 rounds; s4's GPU test binary plain and
# steps 5-7 under memcheck; Nsight Compute on s4's step 5 weight gradient.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/c7; rm -rf $R; mkdir -p $R/scratch $R/ncu
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/c7.tmp.tgz --exclude='*.ncu-rep' --exclude=scratch $R 2>/dev/null; mv $OUT/c4.tmp.tgz $OUT/c7.tgz; }
( exec >/dev/null 2>&1; sleep 560; pack ) & WD=$!
mkdir -p build/tests
PIDS=""; for v in s2 s4; do mkdir -p build/$v/build; xz -dc .carry/bins/p5_$v.xz > build/$v/build/phase5_batched & PIDS="$PIDS $!"; done
xz -dc .carry/bins/tests_s4.xz > build/tests/gpu_tests & PIDS="$PIDS $!"
wait $PIDS
chmod +x build/s2/build/phase5_batched build/s4/build/phase5_batched build/tests/gpu_tests
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1; cat $R/gpu.txt
for r in 1 2; do for b in 8192 4096 2048 1024; do for pr in fp32 fp16; do
  V="s2 s4"; [ $r = 2 ] && V="s4 s2"
  for v in $V; do
    timeout 60 build/$v/build/phase5_batched --batch $b --precision $pr --gemm-compare --out $R/scratch --tag "g-b$b-$pr-$v-r$r" > $R/g-b$b-$pr-$v-r$r.log 2>&1
    echo "b=$b $pr $v r=$r rc $? fails $(grep -c 'FAIL' $R/g-b$b-$pr-$v-r$r.log): $(grep -h '^  L[01].*own-\(f16-mma\|tf32x3\|fma64\)\|^  L0.*cublaslt-fp\(32\|16\)' $R/g-b$b-$pr-$v-r$r.log | awk '{print $1 substr($2,1,3), $8, $9}' | tr '\n' ' ')" | tee -a $R/ab.txt
  done
done; done; done
t ab; pack
timeout 240 build/tests/gpu_tests > $R/tests.log 2>&1; t "tests rc $?: $(tail -2 $R/tests.log | tr '\n' ' ')"
pack
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 build/tests/gpu_tests -tc='*step 5*,*step 6*,*step 7*,*gathered bytes*,*b_fresh*,*programmatic*,*first-layer update*' > $R/memcheck.log 2>&1; t "memcheck rc $?: $(tail -1 $R/memcheck.log)"
pack
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters"
for k in "x3wg|fp32|gemm_tf32x3_kernel.*GemmProblem<nb::mlp::MatView.*GatherView" "f16fwd|fp16|gemm_f16mma_kernel.*GemmProblem<nb::mlp::GatherView"; do
  IFS='|' read -r kn pr rx <<<"$k"
  timeout 120 ncu --kernel-name-base demangled --kernel-name "regex:$rx" --launch-skip 2 --launch-count 1 $S --import-source yes -o $R/ncu/$kn build/s4/build/phase5_batched --batch 8192 --precision $pr --gemm-compare --out $R/scratch --tag ncu > $R/ncu/$kn.out 2>&1
  ncu -i $R/ncu/$kn.ncu-rep > $R/ncu/$kn.txt 2>&1
  ncu -i $R/ncu/$kn.ncu-rep --page source --csv --print-source sass > $R/ncu/$kn-sass.csv 2>&1; t "ncu $kn rc $?"
done
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 560" 2>/dev/null
