#!/usr/bin/env bash
# Right after c5 on the same warm machine: W2 at h = 4,096 (2 rounds alternating old/new, 400 steps),
# each build's kernels with PDL off at h = 2,048 / 4,096, and main's W1 step at batch 8,192 kernel by
# kernel with PDL off (fp32, fp16). $OUT/c6.tgz.
set -u
R=build/c6; rm -rf $R; mkdir -p $R/s B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .c6.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/c6.tgz; }
( exec >/dev/null 2>&1; while sleep 10; do pack; done ) & WD=$!
xz -dc .carry/c2/p5.xz > B/old; xz -dc .carry/c3/p5n.xz > B/new; chmod +x B/*
D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --dropout 0 --precision fp16"
c() { [ $1 = old ] && export NB_GIT_COMMIT=3fe2cee || export NB_GIT_COMMIT=1be175e; }
for r in 1 2; do for b in old new; do c $b; timeout 15 B/$b --data $D $W --layers 784,4096,4096,4096,10 --steps 400 --no-cupti --out $R/s --tag ab-h4096-$b-$r > /dev/null 2>&1; done; done; t ab; pack
for h in 2048 4096; do for b in old new; do c $b; timeout 15 B/$b --data $D $W --layers 784,$h,$h,$h,10 --steps 200 --pdl off --out $R/s --tag k-h$h-$b > /dev/null 2>&1; done; done; t kernels; pack
c old; for p in fp32 fp16; do timeout 20 B/old --data $D --layers 784,128,64,10 --optimizer adam --dropout 0.2 --precision $p --batch 8192 --epochs 2 --pdl off --out $R/s --tag k8192-$p-pdloff > /dev/null 2>&1; done; t k8192
pack; kill $WD 2>/dev/null
python3 - $R <<'PY' | tee $R/summary.txt | cut -c1-130
import json,glob,sys
R=sys.argv[1]
for f in sorted(glob.glob(R+'/s/*__ab-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1][:-5], '%.2f'%(d['timing']['per_step_ms']['median']*1e3), d['metrics'].get('param_checksum'))
for f in sorted(glob.glob(R+'/s/*__k*.json')):
  d=json.load(open(f)); print(f.split('__')[-1][:-5], 'step %.2f'%(d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d['kernels'], key=lambda k:-k['total_ns'])[:10]:
    if k['calls']>=50: print('   %7.2f us x%d  %s'%(k['mean_ns']/1e3, k['calls'], k['name'][:95]))
PY
