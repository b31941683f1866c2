#!/usr/bin/env bash
# (phase 5 built here at 8b5cf70 with probe.py applied, nvcc 13.0, sm_90, carried xz'd.) The stamps
# of W1's last first-layer weight gradient (10 slices) and the ring of GEMM blocks, at batch 8,192
# (3 runs) and 2,048 (1 run), PDL on, --deterministic.
set -u
R=build/tail2; rm -rf $R; mkdir -p $R
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
D=(--data .carry/data/mnist)
xz -dc .carry/bins/p5_probe.xz > build/p5_probe; chmod +x build/p5_probe
t "$(nvidia-smi -L | head -1)"
for i in 1 2 3; do
  timeout 60 build/p5_probe "${D[@]}" --batch 8192 --epochs 1 --no-cupti --deterministic --out $R > $R/probe-8192-$i.log 2>&1; t "probe 8192 run $i rc $?"
done
timeout 60 build/p5_probe "${D[@]}" --batch 2048 --epochs 1 --no-cupti --deterministic --out $R > $R/probe-2048.log 2>&1; t "probe 2048 rc $?"
tar czf $OUT/tail2.tgz $R; t packed
