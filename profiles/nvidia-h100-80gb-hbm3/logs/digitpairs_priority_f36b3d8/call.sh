#!/usr/bin/env bash
# GEMM step 10's paired digit words and the updates' branch at the lowest stream priority. New build
# (.carry/j/p5prio.xz: the paired digits + --side-priority, default same) against main's
# (.carry/j/p5.xz); GPU tests of step 10 and the gathered products (.carry/j/tests.xz); W1's step
# old/new at 8,192 (2 rounds), 1,024 and 4,096 (checksums); --side-priority same/low at 32 ... 8,192,
# fp32 and fp16 (2 rounds); the GEMM benchmark at 8,192; --validate; memcheck of step 10's test;
# then (SW_BATCHES) the batch sweep with both twins. $OUT/j17.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j17; rm -rf $R; mkdir -p $R/g $R/ab $R/v $R/t
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j17.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j17.tgz; }
( exec >/dev/null 2>&1; while sleep 10; do pack; done ) & WD=$!
mkdir -p build/tests .carry/before/build
xz -dc .carry/j/p5prio.xz > build/phase5_batched; xz -dc .carry/j/tests.xz > build/tests/gpu_tests
xz -dc .carry/j/p5.xz > .carry/before/build/phase5_batched
chmod +x build/phase5_batched build/tests/gpu_tests .carry/before/build/phase5_batched
NEW=build/phase5_batched; OLD=.carry/before/build/phase5_batched; D=.carry/data/mnist
t "new $(md5sum < $NEW | cut -c1-12) old $(md5sum < $OLD | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 90 build/tests/gpu_tests -tc='*step 10*,*gathered*' > $R/t/tests.log 2>&1; TRC=$?; t "gpu tests rc $TRC $(grep -E '^\[doctest\] (test cases|assertions)' $R/t/tests.log | tr '\n' ' ')"
pack
for r in 1 2; do for v in old new; do P=$NEW; [ $v = old ] && P=$OLD
  timeout 30 $P --data $D --batch 8192 --precision fp32 --steps 300 --no-cupti --out $R/ab --tag ab-b8192-$v-$r > $R/ab/b8192-$v-$r.log 2>&1
done; done; t "ab 8192"
for b in 1024 4096; do for v in old new; do P=$NEW; [ $v = old ] && P=$OLD
  timeout 30 $P --data $D --batch $b --precision fp32 --steps 300 --no-cupti --out $R/ab --tag ab-b$b-$v-1 > $R/ab/b$b-$v-1.log 2>&1
done; done; t "ab 1024 4096"
for r in 1 2; do for b in 8192 4096 1024 256 32; do for pr in fp32 fp16; do for sp in same low; do
  timeout 30 $NEW --data $D --batch $b --precision $pr --side-priority $sp --steps 300 --no-cupti --out $R/ab --tag ab-prio-b$b-$pr-$sp-$r > $R/ab/prio-b$b-$pr-$sp-$r.log 2>&1
done; done; done; t "prio round $r"; done
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
timeout 60 compute-sanitizer --tool memcheck build/tests/gpu_tests -tc='*step 10*' > $R/t/memcheck.log 2>&1; t "memcheck rc $? $(grep -E 'ERROR SUMMARY' $R/t/memcheck.log)"

# SW_BATCHES given: the batch sweep with both twins on $SW_BUILD (old|new), stamped $SW_COMMIT
if [ -n "${SW_BATCHES:-}" ] && [ $TRC = 0 ]; then
  P=$NEW; [ "$SW_BUILD" = old ] && P=$OLD
  [ "$P" != build/phase5_batched ] && cp $P build/phase5_batched; mkdir -p $R/rec $R/logs
  NB_GIT_COMMIT=$SW_COMMIT SWEEP_TWINS="torch jax" STAGES=sweep SWEEP_BATCHES="$SW_BATCHES" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 330 scripts/bench_frameworks.sh > $R/sweep.log 2>&1; t "sweep rc $?"
  cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
  grep -v "^\s*$" $R/sweep.log | cut -c1-170 | tail -24
fi
kill $WD 2>/dev/null; pack; t done
