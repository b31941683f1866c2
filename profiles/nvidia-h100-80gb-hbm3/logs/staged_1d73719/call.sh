#!/usr/bin/env bash
# GEMM step 8 staged (--fp16-stream staged) against auto (the registers' stream), one build (1d73719):
# step 8's GPU tests, --validate (h = 2,000 batch 32; 3,000 batch 7), memcheck, W2 at h = 1,024 ...
# 8,192 (2 rounds alternating, 400 steps), each kernel's own time with PDL off. $OUT/st.tgz.
set -u
R=build/st; rm -rf $R; mkdir -p $R/s B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .st.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/st.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
xz -dc .carry/st/p5.xz > B/p5; xz -dc .carry/st/tests.xz > B/tests; chmod +x B/*
t "build $(md5sum < B/p5 | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 60 B/tests -tc='*step 8*' > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E '^\[doctest\] (test cases|assertions)' $R/tests.log | tr -s ' ' | tr '\n' ' ')"; pack
export NB_GIT_COMMIT=1d73719; D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --dropout 0 --precision fp16"
for a in "--layers 784,2000,2000,2000,10 --batch 32" "--layers 784,3000,3000,3000,10 --batch 7"; do
  timeout 40 B/p5 --data $D $W $a --fp16-stream staged --steps 6 --validate --validate-steps 2 --no-cupti --out $R/s --tag v > $R/v.log 2>&1; t "validate $a rc $? ok $(grep -c ' ok$' $R/v.log) fail $(grep -ci fail $R/v.log) $(grep -o 'f16-stream[a-z-]*' $R/v.log | sort | uniq -c | tr '\n' ' ')"; cp $R/v.log "$R/v-$(echo $a | tr -c 'a-z0-9' _).log"
done
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 99 B/p5 --data $D $W --layers 784,2000,2000,2000,10 --fp16-stream staged --steps 3 --no-cupti --out $R/s --tag mc > $R/memcheck.log 2>&1; t "memcheck rc $? $(tail -1 $R/memcheck.log)"; pack
for r in 1 2; do for h in 1024 2048 4096 8192; do for m in auto staged; do
  timeout 15 B/p5 --data $D $W --layers 784,$h,$h,$h,10 --fp16-stream $m --steps 400 --no-cupti --out $R/s --tag ab-h$h-$m-$r > /dev/null 2>&1
done; done; t "ab round $r"; pack; done
for h in 2048 4096 8192; do for m in auto staged; do
  timeout 15 B/p5 --data $D $W --layers 784,$h,$h,$h,10 --fp16-stream $m --steps 100 --pdl off --out $R/s --tag k-h$h-$m > /dev/null 2>&1; done; done; t "kernels"
kill $WD 2>/dev/null
python3 - $R <<'PY' > $R/summary.txt
import json,glob,sys
R=sys.argv[1]
for f in sorted(glob.glob(R+'/s/*__ab-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1][:-5], '%.2f'%(d['timing']['per_step_ms']['median']*1e3), d['metrics'].get('param_checksum'))
for f in sorted(glob.glob(R+'/s/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1][:-5], 'step %.2f'%(d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d['kernels'], key=lambda k:-k['total_ns'])[:7]: print('   %7.2f us x%d  %s'%(k['mean_ns']/1e3, k['calls'], k['name'][:90]))
PY
pack; cut -c1-130 $R/summary.txt
