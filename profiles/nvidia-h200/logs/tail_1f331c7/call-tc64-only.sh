#!/usr/bin/env bash
# The whole 64-row tile's epilogue for GEMM steps 5-7 and 9 only (d1e0854: the 32-row tiles' update
# epilogue exactly as main's) against main's build (.carry/j/p5.xz): W1's step at 1,024 and 8,192,
# fp32 and fp16, old/new in turn (2 rounds of 300 steps, the order reversed in round 2; checksums);
# the new build kernel by kernel with PDL off at 8,192 (main's: the call of j23). $OUT/j24.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j24; rm -rf $R; mkdir -p $R/ab $R/k
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j24.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j24.tgz; }
( exec >/dev/null 2>&1; while sleep 10; do pack; done ) & WD=$!
mkdir -p build .carry/before/build
xz -dc .carry/j/p5tc64.xz > build/phase5_batched; xz -dc .carry/j/p5.xz > .carry/before/build/phase5_batched
chmod +x build/phase5_batched .carry/before/build/phase5_batched
NEW=build/phase5_batched; OLD=.carry/before/build/phase5_batched; D=.carry/data/mnist
t "new $(md5sum < $NEW | cut -c1-12) old $(md5sum < $OLD | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
for r in 1 2; do for b in 8192 1024; do for pr in fp32 fp16; do
  vs="old new"; [ $r = 2 ] && vs="new old"
  for v in $vs; do P=$NEW; [ $v = old ] && P=$OLD
    timeout 30 $P --data $D --batch $b --precision $pr --steps 300 --no-cupti --out $R/ab --tag ab-b$b-$pr-$v-$r > $R/ab/b$b-$pr-$v-$r.log 2>&1
  done
done; done; t "ab round $r"; pack; done
python3 - $R/ab > $R/ab-summary.txt <<'PY'
import json,glob,sys,collections
v=collections.defaultdict(list); c=collections.defaultdict(set)
for f in sorted(glob.glob(sys.argv[1]+'/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k].add(d['metrics'].get('param_checksum'))
for k in sorted(v): print('%-16s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), ' '.join(sorted(c[k]))))
PY
cat $R/ab-summary.txt; pack
for pr in fp32 fp16; do
  timeout 60 $NEW --data $D --batch 8192 --precision $pr --pdl off --steps 100 --out $R/k --tag k-$pr-new > $R/k/$pr-new.log 2>&1; t "kernels $pr new rc $?"
done
kill $WD 2>/dev/null; pack; t done
