#!/usr/bin/env bash
# The short form of c3 (little device time left): step 8's narrow kernel (NEW) against main (OLD):
# its GPU tests and the fused-backward ones, --validate (h = 2,000 batch 32; 1,000 batch 1 with step
# 8 forced), memcheck, W2 at h = 2,048 / 8,192 (2 rounds alternating, 400 steps), softmax-CE's own
# time with PDL off at 8,192. $OUT/c5.tgz.
set -u
: "${OLD_COMMIT:?}"; : "${NEW_COMMIT:?}"
R=build/c5; rm -rf $R; mkdir -p $R/s B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .c5.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/c5.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
xz -dc .carry/c2/p5.xz > B/old; xz -dc .carry/c3/p5n.xz > B/new; xz -dc .carry/c3/tests.xz > B/tests; chmod +x B/*
t "builds: old $(md5sum < B/old | cut -c1-12) new $(md5sum < B/new | cut -c1-12)"
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 60 B/tests -tc='*step 8*,*fused backward*' > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E '^\[doctest\] (test cases|assertions)' $R/tests.log | tr -s ' ' | tr '\n' ' ')"; pack
export NB_GIT_COMMIT=$NEW_COMMIT; D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --dropout 0 --precision fp16"
for a in "--layers 784,2000,2000,2000,10 --batch 32" "--layers 784,1000,1000,1000,10 --batch 1 --fp16-stream on"; do
  timeout 30 B/new --data $D $W $a --steps 6 --validate --validate-steps 2 --no-cupti --out $R/s --tag v > $R/v.log 2>&1; t "validate $a rc $? ok $(grep -c ' ok$' $R/v.log) fail $(grep -ci fail $R/v.log)"; cp $R/v.log "$R/v-$(echo $a | tr -c 'a-z0-9' _).log"
done
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 99 B/new --data $D $W --layers 784,2000,2000,2000,10 --steps 3 --no-cupti --out $R/s --tag mc > $R/memcheck.log 2>&1; t "memcheck rc $? $(tail -1 $R/memcheck.log)"; pack
for r in 1 2; do for h in 2048 8192; do for b in old new; do
  [ $b = old ] && export NB_GIT_COMMIT=$OLD_COMMIT || export NB_GIT_COMMIT=$NEW_COMMIT
  timeout 15 B/$b --data $D $W --layers 784,$h,$h,$h,10 --steps 400 --no-cupti --out $R/s --tag ab-h$h-$b-$r > /dev/null 2>&1
done; done; t "ab round $r"; pack; done
for b in old new; do [ $b = old ] && export NB_GIT_COMMIT=$OLD_COMMIT || export NB_GIT_COMMIT=$NEW_COMMIT
  timeout 15 B/$b --data $D $W --layers 784,8192,8192,8192,10 --steps 100 --pdl off --out $R/s --tag k-h8192-$b > /dev/null 2>&1; done; t "kernels"
pack; kill $WD 2>/dev/null
python3 - $R <<'PY' | tee $R/summary.txt | cut -c1-140
import json,glob,sys
R=sys.argv[1]
for f in sorted(glob.glob(R+'/s/*__ab-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1][:-5], '%.2f'%(d['timing']['per_step_ms']['median']*1e3), d['metrics'].get('param_checksum'))
for f in sorted(glob.glob(R+'/s/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1][:-5], 'step %.2f'%(d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d['kernels'], key=lambda k:-k['total_ns'])[:8]: print('   %7.2f us x%d  %s'%(k['mean_ns']/1e3, k['calls'], k['name'][:100]))
PY
