#!/usr/bin/env bash
# Probe (build s8p = the step-8 kernel with its W words rolled a stage ahead in 32 registers, plus
# variants by NB_SR_V): 0 plain, 1 W loads L1::no_allocate, 2/3/4 plus a TMA bulk prefetch of each
# W row's stage into L2 2/4/8 stages ahead, 5 = 3 without no_allocate, 6/7/8 prefetches of 4/4/8
# stages at once, 4/8/8 ahead. Each variant's kernel time (PDL off, CUPTI) at h = 4,096 / 8,192 and
# W2's step (PDL on) at 2,048 ... 8,192 with --fp16-stream on, against off (the old plan).
set -u
R=build/s2; rm -rf $R; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/s2.tmp.tgz --exclude='*.ncu-rep' --exclude=scratch $R 2>/dev/null; mv $OUT/s2.tmp.tgz $OUT/s2.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/s8p; xz -dc .carry/bins/s8p_p5.xz > build/s8p/phase5_batched; chmod +x build/s8p/*
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist
P=build/s8p/phase5_batched
kt() {  # h variant: kernel table, PDL off
  local h=$1 v=$2
  NB_SR_V=$v timeout 60 $P --data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --fp16-stream on --steps 400 --pdl off --out $R/rec --tag "kt-h$h-v$v" > $R/kt-h$h-v$v.log 2>&1
  python3 - "$R/rec/phase5_batched__kt-h$h-v$v.json" "h=$h v=$v" <<'PY' | tee -a $R/kt.txt
import json,sys
d=json.load(open(sys.argv[1]))
ks={k['name'].split('<')[1].split(',')[0]+('/'+k['name'].split('::')[2].split('<')[0] if 'stream' in k['name'] else ''):k for k in d['kernels']}
out=[sys.argv[2], 'step %.2f'%(d['timing']['per_step_ms']['median']*1000)]
for k in d['kernels']:
  if 'stream_rows' in k['name'] or 'fwd_gather' in k['name']:
    tag=k['name'].split('<')[1].split(',')[0].split('::')[-1]
    out.append('%s %.2f'%(tag,k['mean_ns']/1e3))
print(' | '.join(out))
PY
}
for h in 8192 4096; do for v in 0 1 2 3 4 5 6 7 8; do kt $h $v; done; pack; done
one() {  # h variant round
  local h=$1 v=$2 r=$3 on=on; [ $v = off ] && on=off
  NB_SR_V=${v#v} timeout 60 $P --data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --fp16-stream $on \
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
  for h in 2048 4096 8192; do
    V="off v0 v3 v6"; [ $r = 2 ] && V="v6 v3 v0 off"
    for v in $V; do one $h $v $r; done
  done
  pack
done
kill $WD 2>/dev/null; pack; t packed
