#!/usr/bin/env bash
# GEMM step 10 with each digit's two words side by side, the short form of j14.sh (little device time
# left): the new build (.carry/j/p5new.xz, tests.xz) against main's before it (.carry/j/p5.xz); the
# GPU tests of the gathered products, W1's step old/new (checksums), the GEMM benchmark at 8,192,
# --validate, step 10's test under memcheck last. $OUT/j15.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j15; rm -rf $R; mkdir -p $R/g $R/ab $R/v $R/t
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j15.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j15.tgz; }
( exec >/dev/null 2>&1; while sleep 10; do pack; done ) & WD=$!
mkdir -p build/tests .carry/before/build
xz -dc .carry/j/p5new.xz > build/phase5_batched; xz -dc .carry/j/tests.xz > build/tests/gpu_tests
xz -dc .carry/j/p5.xz > .carry/before/build/phase5_batched
chmod +x build/phase5_batched build/tests/gpu_tests .carry/before/build/phase5_batched
NEW=build/phase5_batched; OLD=.carry/before/build/phase5_batched; D=.carry/data/mnist
t "new $(md5sum < $NEW | cut -c1-12) old $(md5sum < $OLD | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 90 build/tests/gpu_tests -tc='*step 10*,*gathered*' > $R/t/tests.log 2>&1; t "gpu tests rc $? $(grep -E '^\[doctest\] (test cases|assertions)' $R/t/tests.log | tr '\n' ' ')"
pack
for r in 1 2; do for v in old new; do P=$NEW; [ $v = old ] && P=$OLD
  timeout 30 $P --data $D --batch 8192 --precision fp32 --steps 300 --no-cupti --out $R/ab --tag ab-b8192-$v-$r > $R/ab/b8192-$v-$r.log 2>&1
done; done; t "ab 8192"
for b in 1024 4096; do for v in old new; do P=$NEW; [ $v = old ] && P=$OLD
  timeout 30 $P --data $D --batch $b --precision fp32 --steps 300 --no-cupti --out $R/ab --tag ab-b$b-$v-1 > $R/ab/b$b-$v-1.log 2>&1
done; done; t "ab 1024 4096"
python3 - $R/ab > $R/ab-summary.txt <<'PY'
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=d['metrics'].get('param_checksum')
for k in sorted(v): print('%-14s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
cat $R/ab-summary.txt; pack
for v in old new; do P=$NEW; [ $v = old ] && P=$OLD
  timeout 60 $P --data $D --batch 8192 --precision fp32 --gemm-compare --out $R/g --tag gemm-b8192-$v > $R/g/b8192-$v.log 2>&1; t "gemm 8192 $v rc $?"
done
for f in $R/g/*.log; do echo "$(basename $f .log) $(grep 'L0 forward' $f | grep -E 'i8-digits|cublaslt-fp32' | awk '{print $8, $9, $14}' | tr '\n' ' ')"; done | tee $R/gemm-summary.txt; pack
for b in 8192 4097 33; do
  timeout 40 $NEW --data $D --batch $b --precision fp32 --steps 4 --validate --validate-steps 2 --no-cupti --out $R/v --tag v-b$b > $R/v/b$b.log 2>&1
  t "validate b=$b rc $? $(grep -ci fail $R/v/b$b.log) fail-lines"
done; pack
timeout 120 compute-sanitizer --tool memcheck build/tests/gpu_tests -tc='*step 10*' > $R/t/memcheck.log 2>&1; t "memcheck rc $? $(grep -E 'ERROR SUMMARY' $R/t/memcheck.log)"
kill $WD 2>/dev/null; pack; t done
