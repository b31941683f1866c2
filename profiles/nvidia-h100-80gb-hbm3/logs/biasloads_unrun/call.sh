#!/usr/bin/env bash
# The update epilogue's bias sums with 8 column sums a thread loaded before any is added (the same
# order: the same bits). New build .carry/j/p5bias.xz against main's (.carry/j/p5.xz): W1's step at
# 256 ... 8,192, fp32 and fp16, old/new alternating (2 rounds of 300 steps; checksums), both builds
# kernel by kernel with PDL off at 8,192, --validate on the new build, compare_builds.sh on phase 5's
# configurations. $OUT/j19.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j19; rm -rf $R; mkdir -p $R/ab $R/v $R/k
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j19.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j19.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build .carry/before/build
xz -dc .carry/j/p5bias.xz > build/phase5_batched; xz -dc .carry/j/p5.xz > .carry/before/build/phase5_batched
chmod +x build/phase5_batched .carry/before/build/phase5_batched
NEW=build/phase5_batched; OLD=.carry/before/build/phase5_batched; D=.carry/data/mnist
t "new $(md5sum < $NEW | cut -c1-12) old $(md5sum < $OLD | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
for r in 1 2; do for b in 8192 4096 1024 256; do for pr in fp32 fp16; do
  for v in old new; do [ $r = 2 ] && v=$([ $v = old ] && echo new || echo old); P=$NEW; [ $v = old ] && P=$OLD
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
for v in new old; do P=$NEW; [ $v = old ] && P=$OLD; for pr in fp32 fp16; do
  timeout 60 $P --data $D --batch 8192 --precision $pr --pdl off --steps 100 --out $R/k --tag k-$pr-$v > $R/k/$pr-$v.log 2>&1; t "kernels $pr $v rc $?"
done; done
python3 - $R/k > $R/k/kernels.txt <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], 'step %.2f us' % (d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:8]:
    print('  %8.2f us/call  %4d calls grid %5d  %s' % (k['mean_ns']/1e3, k['calls'], k['grid'][0], k['name'][:100]))
PY
cat $R/k/kernels.txt; pack
for x in "8192 fp32" "4097 fp32" "33 fp32" "8192 fp16"; do set -- $x
  timeout 60 $NEW --data $D --batch $1 --precision $2 --steps 4 --validate --validate-steps 2 --no-cupti --out $R/v --tag v-b$1-$2 > $R/v/b$1-$2.log 2>&1
  t "validate b=$1 $2 rc $? $(grep -ci fail $R/v/b$1-$2.log) fail-lines"
done; pack
NO_BUILD=1 ONLY="w1-p5-own|w1-b" ROUNDS=2 REPEATS=3 DATA=$D timeout 60 scripts/compare_builds.sh .carry/before $R/compare_builds.log > $R/compare.out 2>&1; t "compare_builds rc $?"
tail -30 $R/compare.out
kill $WD 2>/dev/null; pack; t done
