#!/usr/bin/env bash
# (phase 5 built here at 60a9493, nvcc 13.0, sm_90, carried xz'd: the phase-5 code of this commit)
# scripts/compare_builds.sh's big-batch configurations (ONLY='^w1-b') with the same build on both
# sides: the configurations run, the checksums match, and how far apart two runs of one binary fall.
set -u
mkdir -p build/before/build
xz -dc .carry/old/p5_old.xz > build/phase5_batched; chmod +x build/phase5_batched; touch build/phase5_batched
cp build/phase5_batched build/before/build/phase5_batched
NO_BUILD=1 ONLY='^w1-b' timeout 400 scripts/compare_builds.sh build/before $OUT/compare_builds.log > $OUT/compare_builds.out 2>&1
echo "rc $?"; cat $OUT/compare_builds.log
