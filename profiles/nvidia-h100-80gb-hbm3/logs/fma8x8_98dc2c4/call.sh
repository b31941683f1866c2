#!/usr/bin/env bash
# GEMM step 7 on four k-groups of 8 x 8 lane tiles. New build .carry/j/{p5,tests}.xz (NB_GIT_COMMIT)
# against 7c3ab41's (.carry/n/p5.xz): GPU tests of step 7 and the gathered products (plain, then
# step 7's under compute-sanitizer memcheck), the GEMM benchmark fp32 at 8,192 (2 rounds
# alternating) and 1,024 / 2,048 / 4,096 (one), W1's step at 8,192 A/B (--fp32-gemm fma and the
# default; 2 rounds), --validate on --fp32-gemm fma, the fma step's kernels with PDL off. $OUT/j7.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j7; rm -rf $R; mkdir -p $R/g $R/ab $R/v $R/k B B0
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j7.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j7.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/j/p5.xz > build/phase5_batched; xz -dc .carry/j/tests.xz > B/gpu_tests; xz -dc .carry/n/p5.xz > B0/phase5_batched
chmod +x build/phase5_batched B/gpu_tests B0/phase5_batched
t "new $(md5sum < build/phase5_batched | cut -c1-12) old $(md5sum < B0/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist
timeout 150 B/gpu_tests -tc="*step 7*,*steps 5*,*gather + GEMM*,*fp16 mma.sync*" > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E 'test cases|assertions' $R/tests.log | tr -s ' ' | tr '\n' ' ')"
grep -B3 -A12 "ERROR\|FAILED" $R/tests.log | head -60; pack
for r in 1 2; do for v in new old; do P=build/phase5_batched; [ $v = old ] && P=B0/phase5_batched
  timeout 90 $P --data $D --batch 8192 --precision fp32 --gemm-compare --out $R/g --tag gemm-b8192-fp32-$v-$r > $R/g/b8192-$v-$r.log 2>&1; t "gemm 8192 $v $r rc $?"
done; done; pack
for b in 1024 2048 4096; do for v in new old; do P=build/phase5_batched; [ $v = old ] && P=B0/phase5_batched
  timeout 90 $P --data $D --batch $b --precision fp32 --gemm-compare --out $R/g --tag gemm-b$b-fp32-$v-1 > $R/g/b$b-$v.log 2>&1; t "gemm $b $v rc $?"
done; done
python3 - $R/g > $R/g/summary.txt <<'PY'
import json,glob,sys,collections
v=collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1]+'/*__gemm-b*.json')):
  b,pr,who=f.split('gemm-b')[1].split('-')[:3]; d=json.load(open(f))
  for x in d['metrics']['gemm_bench']:
    v[(int(b),x['layer'],x['product'],x['impl'],who)].append((x['ms']*1e3, x['rel_err'], x['passed']))
for k in sorted(v): print('%5d L%d %-16s %-14s %-4s %s' % (k+('  '.join('%.2f (%.1e %s)'%a for a in v[k]),)))
PY
grep -E "fma64|cublaslt-fp32" $R/g/summary.txt; pack
for r in 1 2; do for v in new old; do P=build/phase5_batched; [ $v = old ] && P=B0/phase5_batched
  for pr in fma fp32; do
    X="--precision fp32"; [ $pr = fma ] && X="--precision fp32 --fp32-gemm fma"
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
for v in "8192 fma" "4097 fma" "1000 fma" "33 fma"; do set -- $v
  timeout 60 build/phase5_batched --data $D --batch $1 --precision fp32 --fp32-gemm fma --steps 4 --validate --validate-steps 2 --no-cupti --out $R/v --tag v-b$1-$2 > $R/v/b$1-$2.log 2>&1
  t "validate b=$1 $2 rc $? $(grep -ci fail $R/v/b$1-$2.log) fail-lines"
done; pack
timeout 60 build/phase5_batched --data $D --batch 8192 --precision fp32 --fp32-gemm fma --pdl off --steps 100 --out $R/k --tag k-fma > $R/k/fma.log 2>&1; t "kernels fma rc $?"
python3 - $R/k > $R/k/kernels.txt <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], 'step %.2f us' % (d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:9]:
    print('  %8.2f us/call  %4d calls grid %5d  %s' % (k['mean_ns']/1e3, k['calls'], k['grid'][0], k['name'][:100]))
PY
cat $R/k/kernels.txt; pack
timeout 150 compute-sanitizer --tool memcheck B/gpu_tests -tc="*step 7*" > $R/memcheck.log 2>&1; t "memcheck step 7 rc $? $(grep -E 'ERROR SUMMARY|test cases' $R/memcheck.log | tr -s ' ' | tr '\n' ' ')"
mkdir -p $R/rec $R/logs
NO_BUILD=1 STAGES=gemm BATCHES="1024 2048 4096 8192" PRECISIONS="fp32 fp16" RECORDS_DIR=$R/rec timeout 150 scripts/bench_gemm.sh > $R/gemm.log 2>&1; t "bench_gemm rc $?"
cp build/bench_gemm/logs/*.log $R/logs/ 2>/dev/null; pack
SWEEP_TWINS="torch jax" STAGES=sweep SWEEP_BATCHES="8192" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 150 scripts/bench_frameworks.sh > $R/sweep.log 2>&1; t "sweep rc $?"
cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
kill $WD 2>/dev/null; pack; t done
