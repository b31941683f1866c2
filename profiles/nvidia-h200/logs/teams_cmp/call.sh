#!/usr/bin/env bash
# scripts/compare_builds.sh, feeee3e's phase 5 (before) against f620a8f's (5g's two teams), on the paths
# the change leaves alone: W1 at batch 32 (own fp32 / fp16, pipelined, cluster32), W2 h = 128 and 1,024
# (own fp32 / fp16) and h = 128's cluster kernel. No build: both binaries carried xz'd.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-f620a8f}
R=build/cmp; rm -rf $R; mkdir -p $R
mkdir -p build/before/build
xz -dc .carry/bins/old.xz > build/before/build/phase5_batched; chmod +x build/before/build/phase5_batched
xz -dc .carry/bins/p5_A.xz > build/phase5_batched; chmod +x build/phase5_batched; touch build/phase5_batched
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1 > $R/gpu.txt
NO_BUILD=1 ONLY='^(w1-p5-own-fp32|w1-p5-own-fp16|w1-p5-pipelined|w1-p5-cluster32|w2-h(128|1024)-p5-own-fp(32|16)|w2-h128-p5-cluster)$' \
  timeout 250 scripts/compare_builds.sh build/before $R/compare_builds.log > $R/compare_builds.out 2>&1
echo "compare_builds rc $?" >> $R/compare_builds.log
tar czf $OUT/cmp.tgz $R; cat $R/compare_builds.log
