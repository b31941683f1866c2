#!/usr/bin/env bash
# call 8 (no build: build/phase5_batched built here with nvcc 13.0 for sm_90, carried): --launch auto with W1's kind
# in the rule -- the rung it picks and the step's time for W1's model at batch 32, 64 and 128 (2 epochs, as the
# sweep), --validate at 64, and W2 at h = 128 / 1,024 still on the cluster / grid kernels.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call8; rm -rf $R; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call8.tmp.tgz $R && mv $OUT/call8.tmp.tgz $OUT/call8.tgz; }
( exec >/dev/null 2>&1; sleep 100; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
P5=build/phase5_batched; D=(--data .carry/data/mnist)
for b in 32 64 128; do
  timeout 40 $P5 "${D[@]}" --batch $b --epochs 2 --workload mlp_batch_sweep --launch auto --out $R/rec --tag batch-sweep-b$b-auto > $R/b$b-auto.log 2>&1
  t "W1 batch $b auto rc $?: $(grep -h 'launch plan' $R/b$b-auto.log)"
done
timeout 40 $P5 "${D[@]}" --batch 64 --steps 4 --warmup 0 --repeats 1 --no-cupti --launch auto --validate --out $R/scratch > $R/b64-auto-validate.log 2>&1
t "W1 batch 64 auto --validate rc $?"; grep -h "validate " $R/b64-auto-validate.log
w2() { echo --layers "784,$1,$1,$1,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16; }
for h in 128 1024; do
  timeout 30 $P5 "${D[@]}" $(w2 $h) --steps 300 --repeats 1 --no-cupti --out $R/scratch --launch auto --tag auto-h$h > $R/w2-$h-auto.log 2>&1
  t "W2 h=$h auto rc $?: $(grep -h 'launch plan' $R/w2-$h-auto.log)"
done
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 100" 2>/dev/null
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob("build/call8/rec/*.json")):
    r = json.load(open(f)); print(f.split("/")[-1], r["config"].get("launch"), "%.2f us a step" % (r["timing"]["per_step_ms"]["median"] * 1000))
PY
