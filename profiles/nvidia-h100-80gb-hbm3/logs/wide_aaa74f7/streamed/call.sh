#!/usr/bin/env bash
# GEMM step 11 with W streamed a stage at a time (a proxy fence a stage) and each block's stages in a
# rotated order, build .carry/j/p5wide2.xz (--fp16-gemm wide now keeps auto's plan for the other
# products): the GPU tests of steps 11 and 9; the GEMM benchmark at batch 8,192 and 2,048; --validate
# with wide at 8,192 and 1,023; memcheck at 1,023; W1's fp16 step, auto and wide in turn (2 rounds of
# 300 steps, order reversed in round 2) at 8,192 and 4,096; wide's kernel table, PDL off, at 8,192.
# $OUT/j28.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j28; rm -rf $R; mkdir -p $R/g $R/v $R/ab $R/k
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j28.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j28.tgz; }
( exec >/dev/null 2>&1; while sleep 10; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/j/p5wide2.xz > build/phase5_batched; chmod +x build/phase5_batched
P=build/phase5_batched; D=.carry/data/mnist
t "p5 $(md5sum < $P | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
xz -dc .carry/j/tests.xz > build/gpu_tests; chmod +x build/gpu_tests
timeout 120 build/gpu_tests -tc="*step 11*,*step 9 (wgmma) on the gathered*" > $R/v/test.log 2>&1; t "gpu test rc $?: $(tail -3 $R/v/test.log | tr '\n' ' ')"
for b in 8192 2048; do
  timeout 60 $P --data $D --gemm-compare --batch $b --precision fp16 --out $R/g --tag gemm-b$b-fp16 > $R/g/b$b.log 2>&1
  t "gemm b$b rc $?: $(grep -E 'L0 forward .*(own-f16-mma|own-f16-wide|cublaslt)' $R/g/b$b.log | awk '{print $8, $9}' | tr '\n' ';')"
done
pack
for b in 8192 1023; do
  timeout 60 $P --data $D --batch $b --precision fp16 --fp16-gemm wide --validate --steps 20 --no-cupti --out $R/v --tag v-b$b > $R/v/b$b.log 2>&1
  t "validate b$b rc $?: $(grep -iE 'validat|plan|f16-wide' $R/v/b$b.log | head -3 | tr '\n' ' ' | cut -c1-200)"
done
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $P --data $D --batch 1023 --precision fp16 --fp16-gemm wide --steps 3 --no-cupti --out $R/v --tag memcheck > $R/v/memcheck.log 2>&1
t "memcheck rc $?: $(tail -2 $R/v/memcheck.log | tr '\n' ' ')"
pack
for r in 1 2; do for b in 8192 4096; do
  vs="auto wide"; [ $r = 2 ] && vs="wide auto"
  for v in $vs; do
    timeout 30 $P --data $D --batch $b --precision fp16 --fp16-gemm $v --steps 300 --no-cupti --out $R/ab --tag ab-b$b-$v-$r > $R/ab/b$b-$v-$r.log 2>&1
  done
done; t "ab round $r"; pack; done
python3 - $R/ab > $R/ab-summary.txt <<'PY'
import json,glob,sys,collections
v=collections.defaultdict(list); c=collections.defaultdict(set)
for f in sorted(glob.glob(sys.argv[1]+'/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k].add(d['metrics'].get('param_checksum'))
for k in sorted(v): print('%-16s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), ' '.join(sorted(c[k]))))
PY
cat $R/ab-summary.txt; pack
for v in wide; do
  timeout 60 $P --data $D --batch 8192 --precision fp16 --fp16-gemm $v --pdl off --steps 100 --out $R/k --tag k-$v > $R/k/$v.log 2>&1; t "kernels $v rc $?"
done
python3 - $R/k > $R/k/kernels.txt <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], 'step %.2f us' % (d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:10]:
    print('  %8.2f us/call  %4d calls grid %5d  %s' % (k['mean_ns']/1e3, k['calls'], k['grid'][0], k['name'][:110]))
PY
cat $R/k/kernels.txt
kill $WD 2>/dev/null; pack; t done
