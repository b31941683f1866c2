#!/usr/bin/env bash
# Softmax-CE's epilogue prefetch hoisted under the slice's first loads (GEMM step 8's narrow kernel):
# the new build (.carry/n/p5.xz, NB_GIT_COMMIT) against d9fc1ae's (.carry/e/p5.xz). GPU tests of step 8
# (.carry/n/tests.xz), --validate where softmax-CE runs on the narrow kernel, memcheck and racecheck,
# W2's step A/B (2 rounds alternating, h = 1,024 ... 8,192), the new step kernel by kernel with PDL
# off at 4,096, then W2's sweep at h = 4,096 with both twins. Results: $OUT/e5.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/e5; rm -rf $R; mkdir -p $R/ab $R/v $R/k $R/rec B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .e5.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/e5.tgz; }
( exec >/dev/null 2>&1; while sleep 20; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/n/p5.xz > build/phase5_batched; xz -dc .carry/e/p5.xz > B/old; chmod +x build/phase5_batched B/old
t "new $(md5sum < build/phase5_batched | cut -c1-12) old $(md5sum < B/old | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
if [ -f .carry/n/tests.xz ]; then
  xz -dc .carry/n/tests.xz > B/gpu_tests; chmod +x B/gpu_tests
  timeout 120 B/gpu_tests -tc="*step 8*" > $R/tests.log 2>&1; t "gpu tests (step 8) rc $? $(grep -E 'test cases|assertions' $R/tests.log | tr -s ' ' | tr '\n' ' ')"
fi
D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --dropout 0 --precision fp16"
for v in "1000 1 on" "2000 32 auto" "3000 7 auto" "1100 32 on"; do set -- $v
  timeout 60 build/phase5_batched --data $D $W --layers 784,$1,$1,$1,10 --batch $2 --fp16-stream $3 --steps 6 --validate --validate-steps 2 --no-cupti --out $R/v --tag v-h$1-b$2 > $R/v/h$1-b$2.log 2>&1
  t "validate h=$1 b=$2 --fp16-stream $3 rc $? ok $(grep -c ' ok$' $R/v/h$1-b$2.log) fail $(grep -ci fail $R/v/h$1-b$2.log) $(grep -o 'f16-stream[a-z-]*' $R/v/h$1-b$2.log | sort | uniq -c | tr '\n' ' ')"
done
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 99 build/phase5_batched --data $D $W --layers 784,1100,1100,1100,10 --fp16-stream on --steps 3 --no-cupti --out $R/v --tag san-$tool > $R/v/$tool.log 2>&1
  t "$tool rc $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/v/$tool.log | head -2 | tr '\n' ' ')"
done; pack
for r in 1 2; do for h in 1024 2048 4096 8192; do for m in old new; do
  b=build/phase5_batched; [ $m = old ] && b=B/old
  timeout 15 $b --data $D $W --layers 784,$h,$h,$h,10 --steps 400 --no-cupti --out $R/ab --tag ab-h$h-$m-$r > /dev/null 2>&1
done; done; t "ab round $r"; done
python3 - $R <<'PY' > $R/ab-summary.txt
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/ab/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=d['metrics'].get('param_checksum')
for k in sorted(v, key=lambda s:(int(s.split('-')[0][1:]), s)): print('%-12s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
cat $R/ab-summary.txt; pack
timeout 60 build/phase5_batched --data $D $W --layers 784,4096,4096,4096,10 --pdl off --steps 400 --out $R/k --tag k-h4096 > $R/k/h4096.log 2>&1; t "kernels h=4096 rc $?"
STAGES=w2 W2_HS="${W2_HS:-4096}" NO_BUILD=1 RECORDS_DIR=$R/rec timeout ${LIMIT:-200} scripts/bench_frameworks.sh > $R/w2.log 2>&1; t "w2 rc $?"
mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
kill $WD 2>/dev/null; pack; t done
grep -v "^\s*$" $R/w2.log | cut -c1-160 | tail -8
