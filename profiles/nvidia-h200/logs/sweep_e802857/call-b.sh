#!/usr/bin/env bash
# scripts/compare_builds.sh, 3b7f804's kernels (b0, carried) against e802857 (left under build/ by part
# a, with the data): the paths the staging change leaves alone (W1 at batch 32: own fp32/fp16,
# persistent, pipelined, cluster32; W2 h = 128 and 1,024: own fp32/fp16, the cluster kernel) and W1's
# model at 2,048 and 8,192 (own fp32/fp16: steps 5 and 6).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/c5b; rm -rf $R; mkdir -p $R
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/c5b.tmp.tgz $R 2>/dev/null; mv $OUT/c5b.tmp.tgz $OUT/c5b.tgz; }
[ -x build/s2/build/phase5_batched ] && [ -d build/data/mnist ] || { echo "part a's files are gone: a fresh machine"; exit 5; }
mkdir -p build/b0/build; xz -dc .carry/bins/p5_b0.xz > build/b0/build/phase5_batched; chmod +x build/b0/build/phase5_batched
cp build/s2/build/phase5_batched build/phase5_batched
DATA=build/data/mnist NO_BUILD=1 ONLY='^(w1-p5-own-fp32|w1-p5-own-fp16|w1-p5-persistent|w1-p5-pipelined|w1-p5-cluster32|w2-h(128|1024)-p5-own-fp(32|16)|w2-h128-p5-cluster|w1-b(2048|8192)-p5-own-fp(32|16))$' \
  timeout 330 scripts/compare_builds.sh build/b0 $R/compare_builds.log > $R/compare_builds.out 2>&1
t "compare_builds rc $?"; cat $R/compare_builds.log; pack
