#!/usr/bin/env bash
# (phase 5 built here, nvcc 13.0, sm_90, carried xz'd.) scripts/validate_sweep.sh on phase 5's fp32
# and fp16 plans (every shape of the sweep, up to batch 8,192: the forward's dropout bits drawn
# before the PDL wait, the step's first kernel after the epoch's permutation kernel without PDL).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/validate; rm -rf $R; mkdir -p $R
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
xz -dc .carry/bins/p5_new.xz > build/phase5_batched; chmod +x build/phase5_batched; touch build/phase5_batched
t "$(nvidia-smi -L | head -1)"
NO_BUILD=1 ONLY='phase5_batched --precision (fp32|fp16)$' timeout 150 scripts/validate_sweep.sh $R/validate_sweep.log > $R/validate_sweep.out 2>&1
t "validate_sweep rc $?: $(tail -n 1 $R/validate_sweep.log)"
tar czf $OUT/validate.tgz $R; t packed
