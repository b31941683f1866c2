#!/usr/bin/env bash
# The gathered forwards' first level of accumulation over 64 values of k (steps 5 and 6,
# TcAccum::level1). New build .carry/j/{p5,tests}.xz (NB_GIT_COMMIT) against 9ddf895's
# (.carry/n/p5.xz): GPU tests (steps 5, 6 and the gathered products), the GEMM benchmark at 8,192
# fp32 and fp16 (2 rounds alternating), W1's step at 8,192 A/B (fp32, fp16; 2 rounds), --validate,
# the batch sweep at 8,192 with the twins (PyTorch compiled-graph, JAX jit-run), the fp16 kernels
# with PDL off. $OUT/j6.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j6; rm -rf $R; mkdir -p $R/g $R/ab $R/v $R/k B B0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j6.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/j6.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/j/p5.xz > build/phase5_batched; xz -dc .carry/j/tests.xz > B/gpu_tests; xz -dc .carry/n/p5.xz > B0/phase5_batched
chmod +x build/phase5_batched B/gpu_tests B0/phase5_batched
t "new $(md5sum < build/phase5_batched | cut -c1-12) old $(md5sum < B0/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist
for r in 1 2; do for v in new old; do P=build/phase5_batched; [ $v = old ] && P=B0/phase5_batched
  for pr in fp32 fp16; do
    timeout 90 $P --data $D --batch 8192 --precision $pr --gemm-compare --out $R/g --tag gemm-b8192-$pr-$v-$r > $R/g/b8192-$pr-$v-$r.log 2>&1; t "gemm 8192 $pr $v $r rc $?"
  done
done; done; pack
for b in 1024 2048 4096; do for v in new old; do P=build/phase5_batched; [ $v = old ] && P=B0/phase5_batched
  timeout 90 $P --data $D --batch $b --precision fp32 --gemm-compare --out $R/g --tag gemm-b$b-fp32-$v-1 > $R/g/b$b-fp32-$v.log 2>&1; t "gemm $b fp32 $v rc $?"
done; done; pack
python3 - $R/g > $R/g/summary.txt <<'PY'
import json,glob,sys,collections
v=collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1]+'/*__gemm-b*.json')):
  b,pr,who=f.split('gemm-b')[1].split('-')[:3]; d=json.load(open(f))
  for x in d['metrics']['gemm_bench']:
    v[(int(b),pr,x['layer'],x['product'],x['impl'],who)].append((x['ms']*1e3, x['rel_err'], x['passed']))
for k in sorted(v): print('%5d %-4s L%d %-16s %-14s %-4s %s' % (k+('  '.join('%.2f (%.1e %s)'%a for a in v[k]),)))
PY
cat $R/g/summary.txt
timeout 150 B/gpu_tests -tc="*3xTF32*,*fp16 mma.sync*,*steps 5*,*gather + GEMM*,*evaluation epilogue*,*first-layer update*,*step 7*" > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E 'test cases|assertions' $R/tests.log | tr -s ' ' | tr '\n' ' ')"
grep -B3 -A12 "ERROR\|FAILED" $R/tests.log | head -60; pack
for r in 1 2; do for v in new old; do P=build/phase5_batched; [ $v = old ] && P=B0/phase5_batched
  for pr in fp32 fp16 fma f16mma; do
    X="--precision $pr"; [ $pr = fma ] && X="--precision fp32 --fp32-gemm fma"; [ $pr = f16mma ] && X="--precision fp16 --fp16-gemm mma"
    timeout 30 $P --data $D --batch 8192 $X --steps 300 --no-cupti --out $R/ab --tag ab-$pr-$v-$r > $R/ab/$pr-$v-$r.log 2>&1
  done
done; t "ab round $r"; done
python3 - $R/ab > $R/ab-summary.txt <<'PY'
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=d['metrics'].get('param_checksum')
for k in sorted(v): print('%-12s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
cat $R/ab-summary.txt; pack
for v in "8192 fp32" "8192 fp16" "4097 fp16" "8192 fma" "4097 fma" "1000 fma" "8192 f16mma" "4097 f16mma"; do set -- $v
  X="--precision $2"; [ $2 = fma ] && X="--precision fp32 --fp32-gemm fma"; [ $2 = f16mma ] && X="--precision fp16 --fp16-gemm mma"
  timeout 60 build/phase5_batched --data $D --batch $1 $X --steps 4 --validate --validate-steps 2 --no-cupti --out $R/v --tag v-b$1-$2 > $R/v/b$1-$2.log 2>&1
  t "validate b=$1 $2 rc $? $(grep -ci fail $R/v/b$1-$2.log) fail-lines"
done; pack
mkdir -p $R/rec; SWEEP_TWINS="${SWEEP_TWINS:-torch jax}" STAGES=sweep SWEEP_BATCHES=8192 NO_BUILD=1 RECORDS_DIR=$R/rec timeout ${LIMIT:-240} scripts/bench_frameworks.sh > $R/sweep.log 2>&1; t "sweep rc $?"
mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
pack
for pr in fp16 f16mma fma; do
  X="--precision $pr"; [ $pr = fma ] && X="--precision fp32 --fp32-gemm fma"; [ $pr = f16mma ] && X="--precision fp16 --fp16-gemm mma"
  timeout 60 build/phase5_batched --data $D --batch 8192 $X --pdl off --steps 100 --out $R/k --tag k-$pr > $R/k/$pr.log 2>&1; t "kernels $pr rc $?"
done
python3 - $R/k > $R/k/kernels.txt <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], 'step %.2f us' % (d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:9]:
    print('  %8.2f us/call  %4d calls grid %5d  %s' % (k['mean_ns']/1e3, k['calls'], k['grid'][0], k['name'][:100]))
PY
kill $WD 2>/dev/null; pack; t done
cat $R/k/kernels.txt | head -40
grep -v "^\s*$" $R/sweep.log | cut -c1-170 | tail -14
