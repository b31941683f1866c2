#!/usr/bin/env bash
# (j46) The masters' L2 hint as a kernel instance of its own (NB_GIT_COMMIT, .carry/j/p5fix.xz,
# tests_fix.xz) where 5abc708 (.carry/j/p5new.xz) tested it at run time: the fused-backward GPU
# tests, --validate at h = 2,048 with it on; scripts/compare_builds.sh on the paths it leaves alone
# (the configurations on the fused pass, and W1 as a control) against main's build before it (.carry/j/p5graph.xz, b7a1ef2: the phase 5 code of 3ce0cb0); W2's
# step, this build against 5abc708's at h = 2,048 ... 8,192 (2 rounds alternating), which wrote the
# width sweep's records. $OUT/j46.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j46; rm -rf $R; mkdir -p $R/ab $R/v B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j46.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/j46.tgz; }
mkdir -p build; xz -dc .carry/j/p5fix.xz > build/phase5_batched; xz -dc .carry/j/tests_fix.xz > B/gpu_tests
xz -dc .carry/j/p5new.xz > build/p5_5abc708; chmod +x build/phase5_batched B/gpu_tests build/p5_5abc708
P=build/phase5_batched; D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --precision fp16"
t "p5 $(md5sum < $P | cut -c1-12) 5abc708 $(md5sum < build/p5_5abc708 | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 120 B/gpu_tests -tc="*fused backward*" > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E 'test cases|assertions' $R/tests.log | tr -s ' ' | tr '\n' ' ')"
timeout 90 $P --data $D $W --dropout 0.2 --layers 784,2048,2048,2048,10 --batch 32 --steps 4 --validate --validate-steps 1 --no-cupti --out $R/v --tag v-h2048 > $R/v/h2048.log 2>&1
t "validate h=2048 rc $? ok $(grep -c ' ok$' $R/v/h2048.log) fail $(grep -ci fail $R/v/h2048.log) $(grep -o '"l2_evict": "[a-z]*"' $R/v/*__v-h2048.json | head -1)"; pack
mkdir -p build/before/build; xz -dc .carry/j/p5graph.xz > build/before/build/phase5_batched; chmod +x build/before/build/phase5_batched
NO_BUILD=1 ONLY='^(w2-h128-p5-own-fp16|w2-h1024-p5-own-fp16|w1-p5-own-fp16)$' \
  timeout 120 scripts/compare_builds.sh build/before $R/compare_builds.log > /dev/null 2>&1; t "compare_builds rc $?"; pack
for r in 1 2; do for h in 2048 4096 8192; do for b in new old; do
  B_=$P; [ $b = old ] && B_=build/p5_5abc708
  timeout 25 $B_ --data $D $W --dropout 0 --layers 784,$h,$h,$h,10 --steps 400 --no-cupti --out $R/ab --tag ab-h$h-$b-$r > $R/ab/h$h-$b-$r.log 2>&1
done; done; t "ab round $r"; done
python3 - $R <<'PY' > $R/ab-summary.txt
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/ab/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=(d['metrics'].get('param_checksum'), d['metrics'].get('l2_evict'))
for k in sorted(v, key=lambda s:(int(s.split('-')[0][1:]), s)): print('%-10s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
pack; t done
tail -7 $R/compare_builds.log; cat $R/ab-summary.txt
