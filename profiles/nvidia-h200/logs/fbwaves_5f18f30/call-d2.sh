#!/usr/bin/env bash
# Probe: the fused backward pass's row split (NB_FB_WAVES=w: w waves of 3 blocks an SM, rounded down;
# unset: ~8 blocks an SM, at most 16 slices with a backward-data product) and the hidden forward on
# step 6 (--fp16-gemm mma), W2 fp16 SGD at h = 2,048 / 4,096 / 8,192, 2 rounds alternating order.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-probe}
R=build/d2; rm -rf $R; mkdir -p $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/d2.tmp.tgz --exclude=scratch $R 2>/dev/null; mv $OUT/d2.tmp.tgz $OUT/d2.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/bins/p5_probe.xz > build/p5probe; chmod +x build/p5probe
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist
one() {  # h variant round
  local h=$1 v=$2 r=$3 extra=() envs=()
  case $v in old) ;; mma) extra=(--fp16-gemm mma) ;; w*) envs=(NB_FB_WAVES=${v#w}) ;; esac
  env "${envs[@]}" timeout 60 build/p5probe --data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 \
    --steps 600 --repeats 3 --no-cupti "${extra[@]}" --out $R/scratch --tag "h$h-$v-r$r" > $R/h$h-$v-r$r.log 2>&1
  local rc=$?
  python3 - "$R/scratch/phase5_batched__h$h-$v-r$r.json" "$h $v r$r rc=$rc" <<'PY' | tee -a $R/ab.txt
import json,sys
try:
  d=json.load(open(sys.argv[1])); m=d['metrics']
  print(sys.argv[2], 'step_us %.2f'%(d['timing']['per_step_ms']['median']*1000), m.get('param_checksum'))
except Exception as e: print(sys.argv[2], 'no record', e)
PY
}
for r in 1 2; do
  for h in 2048 4096 8192; do
    V="old w1 w2 w3 mma"; [ $r = 2 ] && V="mma w3 w2 w1 old"
    for v in $V; do one $h $v $r; done
  done
  pack
done
kill $WD 2>/dev/null; pack; t packed
