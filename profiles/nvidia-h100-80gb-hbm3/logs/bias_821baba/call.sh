#!/usr/bin/env bash
# GEMM step 8 with FwdHiddenEpi's bias loaded under the first stages (kBiasFrom): the new build
# (.carry/b/p5.xz, NB_GIT_COMMIT) against 1a38a69's (.carry/n/p5.xz). GPU tests (the fused forward
# test, now also on step 8, and step 8's own), --validate, memcheck, racecheck, W2's step A/B (2 rounds
# alternating, h = 1,024 ... 8,192), compare_builds.sh on W1's and W2's paths whose epilogue changed
# form, then W2 at h = 4,096 with both twins. Results: $OUT/e6.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/e6; rm -rf $R; mkdir -p $R/ab $R/v $R/rec B B0/build
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .e6.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/e6.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/b/p5.xz > build/phase5_batched; xz -dc .carry/n/p5.xz > B0/build/phase5_batched
xz -dc .carry/b/tests.xz > B/gpu_tests; chmod +x build/phase5_batched B0/build/phase5_batched B/gpu_tests
t "new $(md5sum < build/phase5_batched | cut -c1-12) old $(md5sum < B0/build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 120 B/gpu_tests -tc="*gather + GEMM + bias*,*step 8*" > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E 'test cases|assertions' $R/tests.log | tr -s ' ' | tr '\n' ' ')"
D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --precision fp16"
for v in "1000 1 on 0" "1100 32 on 0.2" "2000 32 auto 0" "2000 32 auto 0.2" "3000 7 auto 0"; do set -- $v
  timeout 60 build/phase5_batched --data $D $W --dropout $4 --layers 784,$1,$1,$1,10 --batch $2 --fp16-stream $3 --steps 6 --validate --validate-steps 2 --no-cupti --out $R/v --tag v-h$1-b$2-d$4 > $R/v/h$1-b$2-d$4.log 2>&1
  t "validate h=$1 b=$2 --fp16-stream $3 dropout $4 rc $? ok $(grep -c ' ok$' $R/v/h$1-b$2-d$4.log) fail $(grep -ci fail $R/v/h$1-b$2-d$4.log) $(grep -o 'f16-stream[a-z-]*' $R/v/h$1-b$2-d$4.log | sort | uniq -c | tr '\n' ' ')"
done
for tool in memcheck racecheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 99 build/phase5_batched --data $D $W --dropout 0.2 --layers 784,1100,1100,1100,10 --fp16-stream on --steps 3 --no-cupti --out $R/v --tag san-$tool > $R/v/$tool.log 2>&1
  t "$tool rc $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/v/$tool.log | head -2 | tr '\n' ' ')"
done; pack
for r in 1 2; do for h in 1024 2048 4096 8192; do for m in old new; do
  b=build/phase5_batched; [ $m = old ] && b=B0/build/phase5_batched
  timeout 15 $b --data $D $W --dropout 0 --layers 784,$h,$h,$h,10 --steps 400 --no-cupti --out $R/ab --tag ab-h$h-$m-$r > /dev/null 2>&1
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
ONLY="^(w1-p5-own-fp(32|16)|w1-b(2048|8192)-p5-own-fp(32|16)|w2-h128-p5-own-fp16|w2-h1024-p5-own-fp(16|32))$" ROUNDS=2 REPEATS=3 NO_BUILD=1 \
  timeout ${CMP_LIMIT:-150} scripts/compare_builds.sh B0 $R/compare_builds.log > $R/compare.out 2>&1; t "compare rc $?"; pack
STAGES=w2 W2_HS="${W2_HS:-4096}" NO_BUILD=1 RECORDS_DIR=$R/rec timeout ${LIMIT:-110} scripts/bench_frameworks.sh > $R/w2.log 2>&1; t "w2 rc $?"
mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
kill $WD 2>/dev/null; pack; t done
cat $R/compare_builds.log; grep -v "^\s*$" $R/w2.log | cut -c1-160 | tail -6
