#!/usr/bin/env bash
# A/B on the warm machine: e802857's fused pass and row split (build/plan with the old-rule knobs) against
# v4 (build/v4, left by the call before) with the old split and with the wave split, W2 fp16 SGD at
# h = 1,024 / 2,048 / 4,096 / 8,192, 2 rounds alternating order.
set -u
R=build/d9; rm -rf $R; mkdir -p $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/d9.tmp.tgz --exclude=scratch $R 2>/dev/null; mv $OUT/d9.tmp.tgz $OUT/d9.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/plan; xz -dc .carry/bins/p5_plan.xz > build/plan/phase5_batched; chmod +x build/plan/phase5_batched
ls build/v4/phase5_batched build/data/mnist > /dev/null || { t "no v4 binary or data left by the call before"; exit 1; }
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=build/data/mnist
one() {  # h variant round
  local h=$1 v=$2 r=$3 b envs=()
  case $v in old) b=plan; envs=(NB_FB_WAVES=0 NB_FB_WAVES_FIRST=0) ;; v4old) b=v4; envs=(NB_FB_WAVES=0 NB_FB_WAVES_FIRST=0) ;; v4) b=v4; envs=(NB_FB_X=1) ;; esac
  env "${envs[@]}" timeout 60 build/$b/phase5_batched --data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 \
    --steps 600 --repeats 3 --no-cupti --out $R/scratch --tag "h$h-$v-r$r" > $R/h$h-$v-r$r.log 2>&1
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
  for h in 1024 2048 4096 8192; do
    V="old v4old v4"; [ $r = 2 ] && V="v4 v4old old"
    for v in $V; do one $h $v $r; done
  done
  pack
done
kill $WD 2>/dev/null; pack; t packed
