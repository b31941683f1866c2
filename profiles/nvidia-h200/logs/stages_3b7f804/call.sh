#!/usr/bin/env bash
# Deeper cp.async pipelines for the 64 x 64 tile (steps 5, 6, 7): the committed 3 stages (b0) against
# v1 (X3 4, F16 4, FMA 4) and v2 (X3 6, F16 8, FMA 5), built from the same tree with
# -DNB_EXP_STAGES_{X3,F16,FMA}. GEMM benchmark at 8,192 / 2,048, fp32 and fp16, alternating, 2 rounds;
# Nsight Compute on b0's step 6 (forward, weight gradient) and step 5 forward at 8,192.
# (W1's step: a later call, with the data.)
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/c1; rm -rf $R; mkdir -p $R/scratch $R/ncu
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/c1.tmp.tgz $R 2>/dev/null; mv $OUT/c1.tmp.tgz $OUT/c1.tgz; }
( exec >/dev/null 2>&1; sleep 560; pack ) & WD=$!
PIDS=""; for v in b0 v2; do mkdir -p build/$v/build; xz -dc .carry/bins/p5_$v.xz > build/$v/build/phase5_batched & PIDS="$PIDS $!"; done
wait $PIDS
for v in b0 v2; do chmod +x build/$v/build/phase5_batched; done
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1; cat $R/gpu.txt
for r in 1 2; do for b in 8192 2048; do for pr in fp16 fp32; do
  V="b0 v2"; [ $r = 2 ] && V="v2 b0"
  for v in $V; do
    timeout 60 build/$v/build/phase5_batched --batch $b --precision $pr --gemm-compare --out $R/scratch --tag "g-b$b-$pr-$v-r$r" > $R/g-b$b-$pr-$v-r$r.log 2>&1
    echo "b=$b $pr $v r=$r rc $?: $(grep -h '^  L0.*own-\(f16-mma\|tf32x3\|fma64\)\|^  L0.*cublaslt' $R/g-b$b-$pr-$v-r$r.log | awk '{print $2, $8, $9}' | tr '\n' ' ')" | tee -a $R/ab.txt
  done
done; done; done
t ab; pack
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables --section InstructionStats --section Occupancy --section LaunchStats --section SourceCounters"
for k in "f16fwd|fp16|gemm_f16mma_kernel.*GemmProblem<nb::mlp::GatherView" "f16wg|fp16|gemm_f16mma_kernel.*GemmProblem<nb::mlp::MatView.*GatherView" "x3fwd|fp32|gemm_tf32x3_kernel.*GemmProblem<nb::mlp::GatherView"; do
  IFS='|' read -r kn pr rx <<<"$k"
  timeout 120 ncu --kernel-name-base demangled --kernel-name "regex:$rx" --launch-skip 2 --launch-count 1 $S --import-source yes -o $R/ncu/$kn build/b0/build/phase5_batched --batch 8192 --precision $pr --gemm-compare --out $R/scratch --tag ncu > $R/ncu/$kn.out 2>&1
  t "ncu $kn rc $?"
  ncu -i $R/ncu/$kn.ncu-rep > $R/ncu/$kn.txt 2>&1
  ncu -i $R/ncu/$kn.ncu-rep --page source --csv --print-source sass > $R/ncu/$kn-sass.csv 2>&1; t "sass page rc $?"
done
pack
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 560" 2>/dev/null
