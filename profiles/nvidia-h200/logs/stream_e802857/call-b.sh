#!/usr/bin/env bash
# Staging by streams (X3Stream: each chunk's place, bounds and source worked out once a tile) and the
# fp16 conversion's constant in a register (s1) against the committed tile (b0): GEMM benchmark at
# 8,192 / 4,096 / 2,048 / 1,024, fp16 and fp32, alternating, 2 rounds; Nsight Compute on s1's step 6
# (forward, weight gradient) and step 5 forward at 8,192; --validate on the step (fp32, fp16, fma) at
# 8,192 and 4,097 (300/100); W1's step at 2,048 / 8,192 (compare_builds, NO_BUILD: s1 after b0).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/c2b; rm -rf $R; mkdir -p $R/scratch $R/ncu
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/c2b.tmp.tgz --exclude='*.ncu-rep' --exclude=scratch $R 2>/dev/null; mv $OUT/c2b.tmp.tgz $OUT/c2b.tgz; }
( exec >/dev/null 2>&1; sleep 560; pack ) & WD=$!
for v in b0 s1; do [ -x build/$v/build/phase5_batched ] || { echo "no $v binary: machine was fresh"; exit 5; }; done
V="--data .carry/data/mnist --no-cupti --epochs 1 --validate --validate-steps 1"
for c in "8192|--precision fp32" "8192|--precision fp16" "8192|--fp32-gemm fma" "4097|--precision fp32 --layers 784,300,100,10" "4097|--precision fp16 --layers 784,300,100,10"; do
  IFS='|' read -r b a <<<"$c"
  timeout 150 build/s1/build/phase5_batched $V --batch $b $a --out $R/scratch --tag val > $R/val-$b-${a// /_}.log 2>&1
  echo "validate b=$b $a rc $?: $(grep -i valid $R/val-$b-${a// /_}.log | tail -2 | tr '\n' ' ')" | tee -a $R/validate.txt
done
t validate; pack
mkdir -p build; cp build/s1/build/phase5_batched build/phase5_batched
NO_BUILD=1 ONLY='w1-b(2048|8192)-p5-own' ROUNDS=3 REPEATS=5 timeout 200 scripts/compare_builds.sh build/b0 $R/cmp.log > $R/cmp.out 2>&1; t "compare rc $?"
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 560" 2>/dev/null
