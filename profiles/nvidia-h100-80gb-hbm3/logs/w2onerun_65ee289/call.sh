#!/usr/bin/env bash
# (k1) One machine, one build of main (NB_GIT_COMMIT, .carry/j/p5base.xz): W2's width sweep at
# h = 128 ... 8,192 in one run (scripts/bench_frameworks.sh stage w2: phase 5's graph path, grid kernel,
# cluster at 128, PyTorch compiled-graph, JAX on the same init and order), the grid kernel's
# --breakdown at 256 / 512 / 1,024; first the L2 policies made once a thread (.carry/j/p5hoist.xz)
# against main's build at h = 2,048 / 4,096 (2 rounds alternating) with its GPU
# tests. $OUT/k1.tgz.
set -u
: "${NB_GIT_COMMIT:?}" "${HOIST_COMMIT:?}"; export NB_GIT_COMMIT
R=build/k1; rm -rf $R; mkdir -p $R/ab $R/rec $R/bd B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .k1.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/k1.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/j/p5base.xz > build/phase5_batched; xz -dc .carry/j/p5hoist.xz > build/p5_hoist
xz -dc .carry/j/tests_hoist.xz > B/gpu_tests; chmod +x build/phase5_batched build/p5_hoist B/gpu_tests
P=build/phase5_batched; D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --precision fp16"
t "base $(md5sum < $P | cut -c1-12) hoist $(md5sum < build/p5_hoist | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
NB_GIT_COMMIT=$HOIST_COMMIT timeout 100 B/gpu_tests -tc="*fused backward*,*stream*" > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E 'test cases|assertions' $R/tests.log | tr -s ' ' | tr '\n' ' ')"
for r in 1 2; do for h in 2048 4096; do for b in hoist base; do
  B_=$P; C_=$NB_GIT_COMMIT; [ $b = hoist ] && B_=build/p5_hoist C_=$HOIST_COMMIT
  NB_GIT_COMMIT=$C_ timeout 25 $B_ --data $D $W --dropout 0 --layers 784,$h,$h,$h,10 --steps 400 --no-cupti --out $R/ab --tag ab-h$h-$b-$r > $R/ab/h$h-$b-$r.log 2>&1
done; done; t "ab round $r"; done
python3 - $R <<'PY' > $R/ab-summary.txt
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/ab/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=(d['metrics'].get('param_checksum'), d['metrics'].get('l2_evict'))
for k in sorted(v, key=lambda s:(int(s.split('-')[0][1:]), s)): print('%-12s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
pack
STAGES=w2 W2_HS="${W2_HS:-128 256 512 1024 2048 4096 8192}" NO_BUILD=1 RECORDS_DIR=$R/rec timeout ${LIMIT:-420} scripts/bench_frameworks.sh > $R/w2.log 2>&1
t "w2 rc $?"; mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null; pack
for h in ${BD_HS:-256 1024}; do
  timeout 20 $P --data $D $W --dropout 0 --layers 784,$h,$h,$h,10 --launch grid --steps 2000 --breakdown --no-cupti --out $R/bd --tag bd-h$h > $R/bd/h$h.log 2>&1; t "breakdown h=$h rc $?"
done
kill $WD 2>/dev/null; pack; t done
cat $R/ab-summary.txt; grep -E "ok |FAIL|fail" $R/w2.log | cut -c1-170 | tail -30
