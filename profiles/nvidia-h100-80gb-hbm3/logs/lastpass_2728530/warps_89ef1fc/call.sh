#!/usr/bin/env bash
# (g4, shorter) 8-warp blocks for the fused passes with a backward-data product (.carry/n/p5.xz, tests.xz;
# NB_GIT_COMMIT): GPU tests, --validate, memcheck, racecheck, W2's step A/B (--fused-warps 4 against 8,
# 2 rounds alternating), the kernels alone at 2,048 (PDL off), then W2's width sweep at 1,024 ... 8,192
# with both twins (the default). Results: $OUT/g5.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/g5; rm -rf $R; mkdir -p $R/ab $R/v $R/k $R/rec B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .g5.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/g5.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/n/p5.xz > build/phase5_batched; xz -dc .carry/n/tests.xz > B/gpu_tests
chmod +x build/phase5_batched B/gpu_tests
t "p5 $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 120 B/gpu_tests -tc="*fused backward*" > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E 'test cases|assertions' $R/tests.log | tr -s ' ' | tr '\n' ' ')"
D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --precision fp16"; A="--optimizer adam --lr 0.001 --precision fp16 --backward fused"
for v in "2048 32 0.2 S" "2000 20 0.1 A"; do set -- $v
  O="$W"; [ $4 = A ] && O="$A"
  timeout 60 build/phase5_batched --data $D $O --dropout $3 --layers 784,$1,$1,$1,10 --batch $2 --steps 4 --validate --validate-steps 1 --no-cupti --out $R/v --tag v-h$1-b$2-d$3-$4 > $R/v/h$1-b$2-d$3-$4.log 2>&1
  t "validate h=$1 b=$2 dropout $3 $4 rc $? ok $(grep -c ' ok$' $R/v/h$1-b$2-d$3-$4.log) fail $(grep -ci fail $R/v/h$1-b$2-d$3-$4.log)"
done; pack
for tool in memcheck racecheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 99 build/phase5_batched --data $D $W --dropout 0.2 --layers 784,1100,1100,1100,10 --steps 3 --no-cupti --out $R/v --tag san-$tool > $R/v/$tool.log 2>&1
  t "$tool rc $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/v/$tool.log | head -1)"
done; pack
for r in 1 2; do for h in 1024 2048 4096; do for m in 4 8; do
  timeout 15 build/phase5_batched --data $D $W --dropout 0 --layers 784,$h,$h,$h,10 --fused-warps $m --steps 400 --no-cupti --out $R/ab --tag ab-h$h-w$m-$r > $R/ab/h$h-w$m-$r.log 2>&1
done; done; t "ab round $r"; done
python3 - $R <<'PY' > $R/ab-summary.txt
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/ab/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=(d['metrics'].get('param_checksum'), d['metrics'].get('fused_warps'))
for k in sorted(v, key=lambda s:(int(s.split('-')[0][1:]), s)): print('%-14s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
cat $R/ab-summary.txt; pack
for m in 4 8; do
  timeout 30 build/phase5_batched --data $D $W --dropout 0 --layers 784,2048,2048,2048,10 --fused-warps $m --pdl off --steps 400 --out $R/k --tag k-h2048-w$m > $R/k/h2048-w$m.log 2>&1; t "kernels h=2048 w$m rc $?"
done
python3 - $R/k > $R/k/kernels.txt <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], 'step %.2f us' % (d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:9]:
    if k['calls'] >= 400: print('  %8.2f us/call  %4d calls grid %5d  %s' % (k['mean_ns']/1e3, k['calls'], k['grid'][0], k['name'][:100]))
PY
cat $R/k/kernels.txt; pack
STAGES=w2 W2_HS="${W2_HS:-1024 2048 4096 8192}" NO_BUILD=1 RECORDS_DIR=$R/rec timeout ${LIMIT:-340} scripts/bench_frameworks.sh > $R/w2.log 2>&1; t "w2 rc $?"
mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
kill $WD 2>/dev/null; pack; t done
grep -v "^\s*$" $R/w2.log | cut -c1-160 | tail -16
