#!/usr/bin/env bash
# (j45) --l2-evict at NB_GIT_COMMIT (.carry/j/p5new.xz, tests_new.xz): the fused-backward GPU tests,
# --validate at h = 2,048 and 3,000 with it on, memcheck; W2's step A/B (--l2-evict off against auto,
# h = 1,024 ... 8,192, 2 rounds alternating); then W2's width sweep at 2,048 ... 8,192 with both twins
# (bench_frameworks.sh stage w2: the records); scripts/compare_builds.sh on the paths it leaves alone. $OUT/j45.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j45; rm -rf $R; mkdir -p $R/ab $R/v $R/rec B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j45.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/j45.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/j/p5new.xz > build/phase5_batched; xz -dc .carry/j/tests_new.xz > B/gpu_tests
chmod +x build/phase5_batched B/gpu_tests
P=build/phase5_batched; D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --precision fp16"
t "p5 $(md5sum < $P | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 120 B/gpu_tests -tc="*fused backward*" > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E 'test cases|assertions' $R/tests.log | tr -s ' ' | tr '\n' ' ')"
for v in "2048 32 0.2" "3000 7 0" "3000 1 0.1"; do set -- $v
  timeout 90 $P --data $D $W --dropout $3 --layers 784,$1,$1,$1,10 --batch $2 --l2-evict on --steps 4 --validate --validate-steps 1 --no-cupti --out $R/v --tag v-h$1-b$2 > $R/v/h$1-b$2.log 2>&1
  t "validate h=$1 b=$2 dropout $3 rc $? ok $(grep -c ' ok$' $R/v/h$1-b$2.log) fail $(grep -ci fail $R/v/h$1-b$2.log) l2_evict $(grep -o '"l2_evict": "[a-z]*"' $R/v/*__v-h$1-b$2.json | head -1)"
done
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 $P --data $D $W --dropout 0.2 --layers 784,1100,1100,1100,10 --l2-evict on --steps 3 --no-cupti --out $R/v --tag san > $R/v/memcheck.log 2>&1
t "memcheck rc $? $(grep -E 'ERROR SUMMARY' $R/v/memcheck.log | head -1)"; pack
for r in 1 2; do for h in 1024 2048 4096 8192; do for m in off auto; do
  timeout 20 $P --data $D $W --dropout 0 --layers 784,$h,$h,$h,10 --l2-evict $m --steps 400 --no-cupti --out $R/ab --tag ab-h$h-$m-$r > $R/ab/h$h-$m-$r.log 2>&1
done; done; t "ab round $r"; done
python3 - $R <<'PY' > $R/ab-summary.txt
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/ab/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=(d['metrics'].get('param_checksum'), d['metrics'].get('l2_evict'))
for k in sorted(v, key=lambda s:(int(s.split('-')[0][1:]), s)): print('%-10s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
cat $R/ab-summary.txt; pack
STAGES=w2 W2_HS="${W2_HS:-2048 4096 8192}" NO_BUILD=1 RECORDS_DIR=$R/rec timeout ${LIMIT:-300} scripts/bench_frameworks.sh > $R/w2.log 2>&1; t "w2 rc $?"
mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
grep -v "^\s*$" $R/w2.log | cut -c1-170 | tail -16; pack
# the paths --l2-evict leaves alone (auto off there; the fused pass's kernel carries the new branch):
# scripts/compare_builds.sh against main's build before it (.carry/j/p5graph.xz, b7a1ef2: the phase 5
# code of 3ce0cb0)
mkdir -p build/before/build; xz -dc .carry/j/p5graph.xz > build/before/build/phase5_batched; chmod +x build/before/build/phase5_batched
NO_BUILD=1 ONLY='^(w1-p5-own-fp16|w2-h128-p5-own-fp16|w2-h1024-p5-own-fp16|w2-h1024-p5-grid|w1-b8192-p5-own-fp16)$' \
  timeout 200 scripts/compare_builds.sh build/before $R/compare_builds.log > /dev/null 2>&1; t "compare_builds rc $?"
kill $WD 2>/dev/null; pack; t done
tail -8 $R/compare_builds.log
