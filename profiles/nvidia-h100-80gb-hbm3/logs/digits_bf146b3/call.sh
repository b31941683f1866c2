#!/usr/bin/env bash
# GEMM step 10 (the gathered forward's bytes times W0's 8-bit digits, integer MMAs) in auto's plan.
# One build .carry/j/{p5,tests}.xz (NB_GIT_COMMIT): GPU tests of step 10 and the gathered products,
# the GEMM benchmark fp32 at 8,192 (2 rounds) and 1,024 / 2,048 / 4,096 (one), W1's step A/B auto
# (step 10) against --fp32-gemm no-digits (step 5) at 8,192 (2 rounds of 300 steps) and 1,024 /
# 2,048 / 4,096 (one), --validate on auto, auto's kernels with PDL off, memcheck of step 10's test,
# the batch sweep at 8,192 and 1,024 with the twins (PyTorch compiled-graph, JAX jit-run). $OUT/j9.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j9; rm -rf $R; mkdir -p $R/g $R/ab $R/v $R/k B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j9.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j9.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/j/p5.xz > build/phase5_batched; xz -dc .carry/j/tests.xz > B/gpu_tests
chmod +x build/phase5_batched B/gpu_tests
t "new $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist
timeout 150 B/gpu_tests -tc="*step 10*,*steps 5*,*gather + GEMM*" > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E 'test cases|assertions' $R/tests.log | tr -s ' ' | tr '\n' ' ')"
grep -B3 -A14 "ERROR\|FAILED" $R/tests.log | head -60; pack
for r in 1 2; do
  timeout 90 build/phase5_batched --data $D --batch 8192 --precision fp32 --gemm-compare --out $R/g --tag gemm-b8192-fp32-new-$r > $R/g/b8192-$r.log 2>&1; t "gemm 8192 $r rc $?"
done
for b in 1024 2048 4096; do
  timeout 90 build/phase5_batched --data $D --batch $b --precision fp32 --gemm-compare --out $R/g --tag gemm-b$b-fp32-new-1 > $R/g/b$b.log 2>&1; t "gemm $b rc $?"
done
python3 - $R/g > $R/g/summary.txt <<'PY'
import json,glob,sys,collections
v=collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1]+'/*__gemm-b*.json')):
  b,pr,who=f.split('gemm-b')[1].split('-')[:3]; d=json.load(open(f))
  for x in d['metrics']['gemm_bench']:
    v[(int(b),x['layer'],x['product'],x['impl'])].append((x['ms']*1e3, x['rel_err'], x['passed']))
for k in sorted(v): print('%5d L%d %-16s %-14s %s' % (k+('  '.join('%.2f (%.1e %s)'%a for a in v[k]),)))
PY
grep -E "L0 forward" $R/g/summary.txt; pack
for r in 1 2; do for v in auto no-digits; do
  timeout 30 build/phase5_batched --data $D --batch 8192 --precision fp32 --fp32-gemm $v --steps 300 --no-cupti --out $R/ab --tag ab-b8192-$v-$r > $R/ab/b8192-$v-$r.log 2>&1
done; t "ab 8192 round $r"; done
for b in 1024 2048 4096; do for v in auto no-digits; do
  timeout 30 build/phase5_batched --data $D --batch $b --precision fp32 --fp32-gemm $v --steps 300 --no-cupti --out $R/ab --tag ab-b$b-$v-1 > $R/ab/b$b-$v-1.log 2>&1
done; t "ab $b"; done
python3 - $R/ab > $R/ab-summary.txt <<'PY'
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=d['metrics'].get('param_checksum')
for k in sorted(v): print('%-14s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
cat $R/ab-summary.txt; pack
for b in 8192 4097 1000 33; do
  timeout 60 build/phase5_batched --data $D --batch $b --precision fp32 --steps 4 --validate --validate-steps 2 --no-cupti --out $R/v --tag v-b$b-auto > $R/v/b$b.log 2>&1
  t "validate b=$b auto rc $? $(grep -ci fail $R/v/b$b.log) fail-lines"
done; pack
timeout 60 build/phase5_batched --data $D --batch 8192 --precision fp32 --pdl off --steps 100 --out $R/k --tag k-auto > $R/k/auto.log 2>&1; t "kernels auto rc $?"
python3 - $R/k > $R/k/kernels.txt <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], 'step %.2f us' % (d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:10]:
    print('  %8.2f us/call  %4d calls grid %5d  %s' % (k['mean_ns']/1e3, k['calls'], k['grid'][0], k['name'][:100]))
PY
cat $R/k/kernels.txt; pack
timeout 120 compute-sanitizer --tool memcheck B/gpu_tests -tc="*step 10*" > $R/memcheck.log 2>&1; t "memcheck step 10 rc $? $(grep -E 'ERROR SUMMARY|test cases' $R/memcheck.log | tr -s ' ' | tr '\n' ' ')"
mkdir -p $R/rec $R/logs
SWEEP_TWINS="torch jax" STAGES=sweep SWEEP_BATCHES="8192 1024" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 200 scripts/bench_frameworks.sh > $R/sweep.log 2>&1; t "sweep rc $?"
cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
grep -v "^\s*$" $R/sweep.log | cut -c1-170 | tail -24
kill $WD 2>/dev/null; pack; t done
