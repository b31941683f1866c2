#!/usr/bin/env bash
# (k5) scripts/compare_builds.sh: 65ee289's phase 5 (.carry/j/p5before.xz, before the L2 policy was made once a thread and before --fixup)
# against this build (build/phase5_batched, NB_GIT_COMMIT) on the phase 5 paths of W1 and
# W2 it could touch or leaves alone: the fused passes (W1 fp16, W2 own at h = 128 / 1,024), the batch-8,192
# step, the grid and cluster kernels. $OUT/k5.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/k5; rm -rf $R B/before; mkdir -p $R B/before/build
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .k5.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/k5.tgz; }
[ -x build/phase5_batched ] || { mkdir -p build; xz -dc .carry/j/p5.xz > build/phase5_batched; chmod +x build/phase5_batched; }
xz -dc .carry/j/p5before.xz > B/before/build/phase5_batched; chmod +x B/before/build/phase5_batched
t "before $(md5sum < B/before/build/phase5_batched | cut -c1-12) after $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
NO_BUILD=1 ROUNDS=${ROUNDS:-3} ONLY="${ONLY:-^(w1-p5-own-fp(32|16)|w1-b(2048|8192)-p5-own-fp(32|16)|w2-h128-p5-own-fp16|w2-h1024-p5-own-fp16|w2-h128-p5-cluster|w2-h1024-p5-grid)$}" \
  timeout ${LIMIT:-400} scripts/compare_builds.sh B/before $R/compare_builds.log > $R/compare.out 2>&1
t "compare rc $?"; pack; cat $R/compare_builds.log
