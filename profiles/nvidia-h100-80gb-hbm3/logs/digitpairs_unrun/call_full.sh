#!/usr/bin/env bash
# GEMM step 10 with each digit's two words side by side (no register moves before the MMAs): the
# new build (.carry/j/p5new.xz, tests.xz) against main's before it (.carry/j/p5.xz). GPU tests of the
# gathered products (step 10 under memcheck too), the GEMM benchmark at 8,192 (2 rounds alternating)
# and 1,024-4,096, W1's step (300 steps) old/new with checksums, --validate, the step's kernels with
# PDL off, compare_builds.sh on W1's big-batch fp32 paths. $OUT/j14.tgz.
# PART=t carries the new build and the tests (tests, memcheck, --validate, kernels); PART=ab both
# builds (the GEMM benchmark, W1's step and compare_builds.sh, old against new).
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT; : "${PART:?}"
R=build/j14-$PART; rm -rf $R; mkdir -p $R/g $R/ab $R/v $R/k $R/t
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j14.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j14-$PART.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build/tests .carry/before/build
xz -dc .carry/j/p5new.xz > build/phase5_batched; chmod +x build/phase5_batched
NEW=build/phase5_batched; OLD=.carry/before/build/phase5_batched; D=.carry/data/mnist
if [ $PART = t ]; then
xz -dc .carry/j/tests.xz > build/tests/gpu_tests; chmod +x build/tests/gpu_tests
t "new $(md5sum < $NEW | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 120 build/tests/gpu_tests -tc='*step 10*,*gathered*' > $R/t/tests.log 2>&1; t "gpu tests rc $? $(grep -E '^\[doctest\] (test cases|assertions)' $R/t/tests.log | tr '\n' ' ')"
timeout 150 compute-sanitizer --tool memcheck build/tests/gpu_tests -tc='*step 10*' > $R/t/memcheck.log 2>&1; t "memcheck rc $? $(grep -E 'ERROR SUMMARY' $R/t/memcheck.log)"
pack
for b in 8192 4097 1000 33; do
  timeout 60 $NEW --data $D --batch $b --precision fp32 --steps 4 --validate --validate-steps 2 --no-cupti --out $R/v --tag v-b$b > $R/v/b$b.log 2>&1
  t "validate b=$b rc $? $(grep -ci fail $R/v/b$b.log) fail-lines"
done
timeout 60 $NEW --data $D --batch 8192 --precision fp32 --pdl off --steps 100 --out $R/k --tag k-new > $R/k/new.log 2>&1; t "kernels new rc $?"
python3 - $R/k > $R/k/kernels.txt <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], 'step %.2f us' % (d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:8]:
    print('  %8.2f us/call  %4d calls grid %5d  %s' % (k['mean_ns']/1e3, k['calls'], k['grid'][0], k['name'][:100]))
PY
cat $R/k/kernels.txt; pack
else
xz -dc .carry/j/p5.xz > .carry/before/build/phase5_batched; chmod +x .carry/before/build/phase5_batched
t "new $(md5sum < $NEW | cut -c1-12) old $(md5sum < $OLD | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
for r in 1 2; do for v in old new; do P=$NEW; [ $v = old ] && P=$OLD
  timeout 90 $P --data $D --batch 8192 --precision fp32 --gemm-compare --out $R/g --tag gemm-b8192-$v-$r > $R/g/b8192-$v-$r.log 2>&1; t "gemm 8192 $v $r rc $?"
done; done
for b in 1024 2048 4096; do for v in old new; do P=$NEW; [ $v = old ] && P=$OLD
  timeout 90 $P --data $D --batch $b --precision fp32 --gemm-compare --out $R/g --tag gemm-b$b-$v-1 > $R/g/b$b-$v.log 2>&1; t "gemm $b $v rc $?"
done; done
for f in $R/g/*.log; do echo "$(basename $f .log) $(grep 'L0 forward' $f | grep -E 'i8-digits|cublaslt-fp32' | awk '{print $8, $9}' | tr '\n' ' ')"; done | tee $R/gemm-summary.txt; pack
for r in 1 2; do for v in old new; do P=$NEW; [ $v = old ] && P=$OLD
  timeout 30 $P --data $D --batch 8192 --precision fp32 --steps 300 --no-cupti --out $R/ab --tag ab-b8192-$v-$r > $R/ab/b8192-$v-$r.log 2>&1
done; done; t "ab 8192"
for b in 1024 2048 4096; do for v in old new; do P=$NEW; [ $v = old ] && P=$OLD
  timeout 30 $P --data $D --batch $b --precision fp32 --steps 300 --no-cupti --out $R/ab --tag ab-b$b-$v-1 > $R/ab/b$b-$v-1.log 2>&1
done; done; t "ab 1024-4096"
python3 - $R/ab > $R/ab-summary.txt <<'PY'
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=d['metrics'].get('param_checksum')
for k in sorted(v): print('%-14s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
cat $R/ab-summary.txt; pack
NO_BUILD=1 ONLY='^w1-b8192-p5-own-fp32$' DATA=$D timeout 240 scripts/compare_builds.sh .carry/before $R/compare_builds.log > $R/compare.out 2>&1; t "compare_builds rc $?"
tail -6 $R/compare_builds.log
fi
kill $WD 2>/dev/null; pack; t done
