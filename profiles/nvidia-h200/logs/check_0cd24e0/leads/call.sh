#!/usr/bin/env bash
# call 7 (no build: build/phase5_batched of 0cd24e0, carried): leads for the batches where phase 5 trails JAX --
# W1's model at batch 64 on the one-launch rungs (persistent, pipelined), and the graph step's kernel
# table with PDL off at batch 2,048 and 64 (per-kernel times; under PDL a kernel's time includes its wait).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call7; rm -rf $R; mkdir -p $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call7.tmp.tgz $R && mv $OUT/call7.tmp.tgz $OUT/call7.tgz; }
( exec >/dev/null 2>&1; sleep 150; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
P5=build/phase5_batched; D=(--data .carry/data/mnist)
for l in persistent pipelined; do
  timeout 60 $P5 "${D[@]}" --batch 64 --epochs 2 --workload mlp_batch_sweep --launch $l --out $R/rec --tag b64-$l > $R/b64-$l.log 2>&1
  t "b64 $l rc $?: $(grep -h 'epoch 1\|error\|refuse\|needs' $R/b64-$l.log | tail -1 | cut -c1-200)"
done
for b in 2048 64; do
  timeout 60 $P5 "${D[@]}" --batch $b --epochs 2 --workload mlp_batch_sweep --pdl off --out $R/rec --tag b$b-pdloff > $R/b$b-pdloff.log 2>&1
  t "b$b pdl off rc $?"
done
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 150" 2>/dev/null
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob("build/call7/rec/*.json")):
    r = json.load(open(f)); print(f.split("/")[-1], "%.2f us a step" % (r["timing"]["per_step_ms"]["median"] * 1000))
    if "pdloff" in f:
        for k in r["kernels"]:
            if k["calls"] >= 20: print("   %7.2f us  grid %4d  %s" % (k["mean_ns"] / 1000, k["grid"][0], k["name"][10:90]))
PY
