#!/usr/bin/env bash
# The fused backward pass's row split by waves (build/plan: dgrad layers 3, 2 or 1 waves of 3 blocks an
# SM, the most that keeps 16 slices; the first layer one wave) against the old split (~8 blocks an SM),
# each half alone: W2 fp16 SGD at h = 1,024 / 2,048 / 4,096 / 8,192, 2 rounds alternating. Then
# Nsight Compute's source counters on the pass at h = 8,192 (its code is the same in both).
set -u
R=build/d5; rm -rf $R; mkdir -p $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/d5.tmp.tgz --exclude=scratch --exclude='*.ncu-rep' $R 2>/dev/null; mv $OUT/d5.tmp.tgz $OUT/d5.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/plan build/data; xz -dc .carry/bins/p5_plan.xz > build/plan/phase5_batched; chmod +x build/plan/phase5_batched
cp -r .carry/data/mnist build/data/ 2>/dev/null
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=build/data/mnist
one() {  # h variant round
  local h=$1 v=$2 r=$3 envs=()
  case $v in old) envs=(NB_FB_WAVES=0 NB_FB_WAVES_FIRST=0) ;; new) envs=(NB_FB_X=1) ;; dgnew) envs=(NB_FB_WAVES_FIRST=0) ;; firstnew) envs=(NB_FB_WAVES=0) ;; esac
  env "${envs[@]}" timeout 60 build/plan/phase5_batched --data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 \
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
    V="old new dgnew firstnew"; [ $r = 2 ] && V="firstnew dgnew new old"
    for v in $V; do one $h $v $r; done
  done
  pack
done
S="--section SourceCounters --section WarpStateStats --section SpeedOfLight"
timeout 120 ncu --kernel-name-base demangled --kernel-name regex:'fused_update_bwd' --launch-skip 13 --launch-count 1 $S --import-source yes -o $R/ncu-fb8192 -f \
  build/plan/phase5_batched --data $D --layers "784,8192,8192,8192,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --steps 8 --no-cupti --out $R/scratch > $R/ncu-fb8192.out 2>&1
t "ncu rc $?"
ncu -i $R/ncu-fb8192.ncu-rep > $R/ncu-fb8192.txt 2>&1
ncu -i $R/ncu-fb8192.ncu-rep --page source --csv --print-source sass > $R/ncu-fb8192-sass.csv 2>&1
python3 scripts/ncu_sass_summary.py $R/ncu-fb8192-sass.csv 40 > $R/ncu-fb8192-sass-summary.txt 2>&1; t "summary rc $?"
xz -9 $R/ncu-fb8192-sass.csv
kill $WD 2>/dev/null; pack; t packed
