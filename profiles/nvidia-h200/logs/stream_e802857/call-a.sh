#!/usr/bin/env bash
# Staging by streams (X3Stream: each chunk's place, bounds and source worked out once a tile) and the
# fp16 conversion's constant in a register (s1) against the committed tile (b0): GEMM benchmark at
# 8,192 / 4,096 / 2,048 / 1,024, fp16 and fp32, alternating, 2 rounds; Nsight Compute on s1's step 6
# (forward, weight gradient) and step 5 forward at 8,192; --validate on the step (fp32, fp16, fma) at
# 8,192 and 4,097 (300/100); W1's step at 2,048 / 8,192 (compare_builds, NO_BUILD: s1 after b0).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/c2; rm -rf $R; mkdir -p $R/scratch $R/ncu
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/c2.tmp.tgz --exclude='*.ncu-rep' --exclude=scratch $R 2>/dev/null; mv $OUT/c2.tmp.tgz $OUT/c2.tgz; }
( exec >/dev/null 2>&1; sleep 560; pack ) & WD=$!
PIDS=""; for v in b0 s1; do mkdir -p build/$v/build; xz -dc .carry/bins/p5_$v.xz > build/$v/build/phase5_batched & PIDS="$PIDS $!"; done
wait $PIDS
for v in b0 s1; do chmod +x build/$v/build/phase5_batched; done
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1; cat $R/gpu.txt
for r in 1 2; do for b in 8192 4096 2048 1024; do for pr in fp16 fp32; do
  V="b0 s1"; [ $r = 2 ] && V="s1 b0"
  for v in $V; do
    timeout 60 build/$v/build/phase5_batched --batch $b --precision $pr --gemm-compare --out $R/scratch --tag "g-b$b-$pr-$v-r$r" > $R/g-b$b-$pr-$v-r$r.log 2>&1
    echo "b=$b $pr $v r=$r rc $? fails $(grep -c 'FAIL' $R/g-b$b-$pr-$v-r$r.log): $(grep -h '^  L0.*own-\(f16-mma\|tf32x3\|fma64\)\|^  L0.*cublaslt' $R/g-b$b-$pr-$v-r$r.log | awk '{print substr($2,1,3), $8, $9}' | tr '\n' ' ')" | tee -a $R/ab.txt
  done
done; done; done
t ab; pack
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section Occupancy --section LaunchStats --section SourceCounters"
for k in "f16fwd|fp16|gemm_f16mma_kernel.*GemmProblem<nb::mlp::GatherView" "f16wg|fp16|gemm_f16mma_kernel.*GemmProblem<nb::mlp::MatView.*GatherView" "x3fwd|fp32|gemm_tf32x3_kernel.*GemmProblem<nb::mlp::GatherView" "x3wg|fp32|gemm_tf32x3_kernel.*GemmProblem<nb::mlp::MatView.*GatherView"; do
  IFS='|' read -r kn pr rx <<<"$k"
  timeout 120 ncu --kernel-name-base demangled --kernel-name "regex:$rx" --launch-skip 2 --launch-count 1 $S --import-source yes -o $R/ncu/$kn build/s1/build/phase5_batched --batch 8192 --precision $pr --gemm-compare --out $R/scratch --tag ncu > $R/ncu/$kn.out 2>&1
  ncu -i $R/ncu/$kn.ncu-rep > $R/ncu/$kn.txt 2>&1
  ncu -i $R/ncu/$kn.ncu-rep --page source --csv --print-source sass > $R/ncu/$kn-sass.csv 2>&1; t "ncu $kn rc $?"
done
pack
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 560" 2>/dev/null
