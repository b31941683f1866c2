#!/usr/bin/env bash
# (phase 5 built here, nvcc 13.0, sm_90, carried xz'd: old = 60a9493's build; new = 8b5cf70 with the
# tail probe of probe.py: thread 0 of each block of a split step-5/6 kernel stamps %globaltimer after
# entry (0), after the PDL wait (1), after the mainloop (2), after the split-K hand-over (3), after
# the first sub-tile's epilogue (4, last block only) and at the end (5, last block only); the
# program prints the last such launch's stamps at exit.)
# 1. the stamps of W1's last first-layer weight gradient at batch 8,192 (PDL on, 3 runs; PDL off, 1)
#    and 2,048; 2. the GEMM benchmark at 8,192 (fp32), old and new alternating, twice; 3. W1's
#    big-batch configurations of compare_builds.sh, old against new.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-8b5cf70+probe}
R=build/tail; rm -rf $R; mkdir -p $R/gemm
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/tail.tmp.tgz $R && mv $OUT/tail.tmp.tgz $OUT/tail.tgz; }
D=(--data .carry/data/mnist)
mkdir -p build/before/build
xz -dc .carry/old/p5_old.xz > build/before/build/phase5_batched; chmod +x build/before/build/phase5_batched
xz -dc .carry/bins/p5_probe.xz > build/phase5_batched; chmod +x build/phase5_batched; touch build/phase5_batched
t "$(nvidia-smi -L | head -1)"
for i in 1 2 3; do
  timeout 60 build/phase5_batched "${D[@]}" --batch 8192 --epochs 1 --no-cupti --deterministic > $R/probe-8192-$i.log 2>&1; t "probe 8192 run $i rc $?"
done
timeout 60 build/phase5_batched "${D[@]}" --batch 8192 --epochs 1 --no-cupti --deterministic --pdl off > $R/probe-8192-nopdl.log 2>&1; t "probe 8192 pdl off rc $?"
timeout 60 build/phase5_batched "${D[@]}" --batch 2048 --epochs 1 --no-cupti --deterministic > $R/probe-2048.log 2>&1; t "probe 2048 rc $?"
pack
for round in 1 2; do
  V="old new"; [ $round = 2 ] && V="new old"
  for v in $V; do
    B=build/phase5_batched; [ $v = old ] && B=build/before/build/phase5_batched
    timeout 90 $B "${D[@]}" --batch 8192 --gemm-compare --no-cupti --out $R/gemm --tag gemm-b8192-$v-r$round > $R/gemm/$v-r$round.log 2>&1; t "gemm $v r$round rc $?"
  done
done
pack
NO_BUILD=1 ONLY='^w1-b' timeout 420 scripts/compare_builds.sh build/before $R/compare_builds.log > $R/compare_builds.out 2>&1; t "compare_builds rc $?"
cat $R/compare_builds.log
pack; t packed
