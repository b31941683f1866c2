#!/usr/bin/env bash
# The next forward's one hand-over a slice (cluster of the column tiles; --next-forward pass against kernel;
# .carry/n/p5.xz, tests.xz; NB_GIT_COMMIT): GPU tests, --validate over 3 chained steps, memcheck,
# racecheck, W2's step A/B (2 rounds alternating, h = 1,024 ... 8,192), each W2 step kernel alone
# (PDL off) at 2,048 and 4,096. Results: $OUT/h3.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/h3; rm -rf $R; mkdir -p $R/ab $R/v $R/k B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .h3.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/h3.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/n/p5.xz > build/phase5_batched; xz -dc .carry/n/tests.xz > B/gpu_tests
chmod +x build/phase5_batched B/gpu_tests
t "p5 $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 150 B/gpu_tests -tc="*fused backward*,*step 8*" > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E 'test cases|assertions' $R/tests.log | tr -s ' ' | tr '\n' ' ')"
grep -B3 -A12 "ERROR\|FAILED" $R/tests.log | head -60
D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --precision fp16"; A="--optimizer adam --lr 0.001 --precision fp16 --backward fused"
for v in "1000 1 0 S" "2048 32 0.2 S" "3000 7 0 S" "2000 20 0.1 A" "104 32 0.2 S"; do set -- $v
  O="$W"; [ $4 = A ] && O="$A";
  timeout 90 build/phase5_batched --data $D $O --dropout $3 --layers 784,$1,$1,$1,10 --batch $2 --steps 6 --validate --validate-steps 3 --no-cupti --out $R/v --tag v-h$1-b$2-d$3-$4 > $R/v/h$1-b$2-d$3-$4.log 2>&1
  t "validate h=$1 b=$2 dropout $3 $4 rc $? ok $(grep -c ' ok$' $R/v/h$1-b$2-d$3-$4.log) fail $(grep -ci fail $R/v/h$1-b$2-d$3-$4.log) $(grep -h 'then forward' $R/v/h$1-b$2-d$3-$4.log | tr -s ' ' | tr '\n' ' ')"
done; pack
grep -h -i "fail\|error" $R/v/*.log | head -20
for tool in memcheck racecheck; do
  timeout 110 compute-sanitizer --tool $tool --error-exitcode 99 build/phase5_batched --data $D $W --dropout 0.2 --layers 784,1100,1100,1100,10 --steps 3 --no-cupti --out $R/v --tag san-$tool > $R/v/$tool.log 2>&1
  t "$tool rc $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/v/$tool.log | head -1) $(grep -h 'then forward' $R/v/$tool.log | tr -s ' ' | tr '\n' ' ')"
done; pack
for r in 1 2; do for h in 1024 2048 4096 8192; do for m in kernel pass; do
  timeout 15 build/phase5_batched --data $D $W --dropout 0 --layers 784,$h,$h,$h,10 --next-forward $m --steps 400 --no-cupti --out $R/ab --tag ab-h$h-$m-$r > $R/ab/h$h-$m-$r.log 2>&1
done; done; t "ab round $r"; done
python3 - $R <<'PY' > $R/ab-summary.txt
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/ab/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=(d['metrics'].get('param_checksum'), d['metrics'].get('next_forward'), d['metrics'].get('launches_per_step'), [q.get('next_handover') for q in d['metrics'].get('gemm_plan',[]) if q.get('product')=='backward 0'])
for k in sorted(v, key=lambda s:(int(s.split('-')[0][1:]), s)): print('%-14s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
grep -h "note:" $R/ab/*.log | sort | uniq -c >> $R/ab-summary.txt
cat $R/ab-summary.txt; pack
for h in 2048 4096; do for m in kernel pass; do
  timeout 60 build/phase5_batched --data $D $W --dropout 0 --layers 784,$h,$h,$h,10 --next-forward $m --pdl off --steps 400 --out $R/k --tag k-h$h-$m > $R/k/h$h-$m.log 2>&1; t "kernels h=$h $m rc $?"
done; done
python3 - $R/k > $R/k/kernels.txt <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], 'step %.2f us' % (d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:9]:
    if k['calls'] >= 390: print('  %8.2f us/call  %4d calls grid %5d  %s' % (k['mean_ns']/1e3, k['calls'], k['grid'][0], k['name'][:100]))
PY
kill $WD 2>/dev/null; pack; t done
cat $R/k/kernels.txt
