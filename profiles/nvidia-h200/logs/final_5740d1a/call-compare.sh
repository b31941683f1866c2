#!/usr/bin/env bash
# 5740d1a's phase 5 (the 32 x 64 tile's two-level fix-up as the one-sub-tile case of the 64-row tile's):
# compare_builds f620a8f (= 90f4663's phase 5) -> this build on the paths whose split-K fix-up it touches.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-5740d1a}
R=build/fc; rm -rf $R; mkdir -p $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/fc.tmp.tgz $R 2>/dev/null; mv $OUT/fc.tmp.tgz $OUT/fc.tgz; }
( exec >/dev/null 2>&1; sleep 540; pack ) & WD=$!
mkdir -p build/before/build
xz -dc .carry/bins/p5_final.xz > build/phase5_batched & P1=$!
xz -dc .carry/bins/p5_A.xz > build/before/build/phase5_batched & P2=$!
wait $P1 $P2; chmod +x build/phase5_batched build/before/build/phase5_batched; touch build/phase5_batched
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1; cat $R/gpu.txt
pack
NO_BUILD=1 ONLY='^(w1-p5-own-fp32|w1-p5-own-fp16|w1-p5-pipelined|w1-b(2048|8192)-p5-own-fp(32|16)|w2-h(128|1024)-p5-own-fp(16|32))$' \
  timeout 330 scripts/compare_builds.sh build/before $R/compare_builds.log > $R/compare_builds.out 2>&1
t "compare_builds rc $?"; cat $R/compare_builds.log
pack
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 540" 2>/dev/null
