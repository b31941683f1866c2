#!/usr/bin/env bash
# The update epilogue's tail, two variants against main's build (.carry/j/p5.xz): bias = the bias sums
# with 8 column sums a thread loaded before any is added (.carry/j/p5bias.xz, 6fceb67); whole = that and
# the 64-row tile's two sub-tiles in one epilogue call, their optimizer state and bias sums loaded in one
# round (.carry/j/p5whole.xz, 1f331c7). Both keep the same arithmetic (the same bits). W1's step at
# 256, 1,024 and 8,192, fp32 and fp16, the three builds in turn (2 rounds of 300 steps, the order reversed in
# round 2; checksums), whole and main kernel by kernel with PDL off at 8,192, --validate on whole,
# compare_builds.sh whole against main on W1 (batch 32 and 8,192) and W2 h = 1,024's graph path.
# $OUT/j23.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j23; rm -rf $R; mkdir -p $R/ab $R/v $R/k
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j23.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j23.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build .carry/before/build
xz -dc .carry/j/p5whole.xz > build/phase5_batched; xz -dc .carry/j/p5.xz > .carry/before/build/phase5_batched
xz -dc .carry/j/p5bias.xz > build/p5bias; chmod +x build/phase5_batched build/p5bias .carry/before/build/phase5_batched
NEW=build/phase5_batched; OLD=.carry/before/build/phase5_batched; BIAS=build/p5bias; D=.carry/data/mnist
bin() { case $1 in old) echo $OLD;; bias) echo $BIAS;; *) echo $NEW;; esac; }
t "whole $(md5sum < $NEW | cut -c1-12) bias $(md5sum < $BIAS | cut -c1-12) old $(md5sum < $OLD | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
for r in 1 2; do for b in 8192 1024 256; do for pr in fp32 fp16; do
  vs="old bias whole"; [ $r = 2 ] && vs="whole bias old"
  for v in $vs; do P=$(bin $v)
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
for v in whole old; do P=$(bin $v); for pr in fp32 fp16; do
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
NO_BUILD=1 ONLY="w1-p5-own|w1-b8192|w2-h1024-p5-own" ROUNDS=2 REPEATS=2 DATA=$D timeout 120 scripts/compare_builds.sh .carry/before $R/compare_builds.log > $R/compare.out 2>&1; t "compare_builds rc $?"
tail -30 $R/compare.out
kill $WD 2>/dev/null; pack; t done
