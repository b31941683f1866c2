#!/usr/bin/env bash
# compare_builds.sh of 821baba's build (.carry/b/p5.xz) against the final one (.carry/i/p5.xz,
# NB_GIT_COMMIT) on W1's paths and W2 at h = 128 and 1,024. Results: $OUT/f8.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/f8; rm -rf $R; mkdir -p $R B0/build
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
mkdir -p build; xz -dc .carry/i/p5.xz > build/phase5_batched; xz -dc .carry/b/p5.xz > B0/build/phase5_batched
chmod +x build/phase5_batched B0/build/phase5_batched
t "new $(md5sum < build/phase5_batched | cut -c1-12) old $(md5sum < B0/build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
ONLY="^(w1-p5-own-fp(32|16)|w1-b8192-p5-own-fp(32|16)|w2-h128-p5-own-fp16|w2-h128-p5-cluster|w2-h1024-p5-own-fp16|w2-h1024-p5-grid)$" ROUNDS=2 REPEATS=3 NO_BUILD=1 \
  timeout ${CMP_LIMIT:-110} scripts/compare_builds.sh B0 $R/compare_builds.log > $R/compare.out 2>&1; t "compare rc $?"
tar czf $OUT/f8.tgz $R; tail -14 $R/compare_builds.log
