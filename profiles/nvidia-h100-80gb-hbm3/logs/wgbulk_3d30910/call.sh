#!/usr/bin/env bash
# GEMM step 9's copied operand by bulk copies on mbarriers (no proxy fence a stage), its MMAs in
# flight under the next k-tile's conversion; auto's fp16 plan puts the first layer's two products on
# it from batch 1,024. Main's build (.carry/j/p5side.xz, 4592eea) against this one (p5new.xz):
# the GEMM benchmark fp16 at 8,192 and 4,096 and W1's fp16 step at 1,024 ... 8,192, 2 rounds
# alternating; the step 9 GPU test; --validate fp16 at 8,192 and 4,097; the batch sweep's own
# records at 4,096 and 8,192 (bench_frameworks.sh's phase 5 commands: fp32, fp16, fp16-mma); memcheck
# of the step 9 test while time remains. $OUT/j42.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j42; rm -rf $R; mkdir -p $R/g $R/ab $R/val $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j42.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j42.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build/tests; xz -dc .carry/j/p5new.xz > build/phase5_batched; xz -dc .carry/j/p5side.xz > build/p5_old
xz -dc .carry/j/tests_new.xz > build/tests/gpu_tests; chmod +x build/phase5_batched build/p5_old build/tests/gpu_tests
P=build/phase5_batched; O=build/p5_old; D=.carry/data/mnist
t "p5 $(md5sum < $P | cut -c1-12) old $(md5sum < $O | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
for r in 1 2; do
  for v in old new; do bin=$P c=$NB_GIT_COMMIT; [ $v = old ] && bin=$O c=4592eea
    for b in 8192 4096; do
      NB_GIT_COMMIT=$c timeout 60 $bin --data $D --batch $b --precision fp16 --gemm-compare --no-cupti --out $R/g --tag gemm-b$b-fp16-$v$r > $R/g/b$b-$v$r.log 2>&1 || t "gemm $b $v rc $?"
    done
  done
  t "gemm round $r"; pack
done
python3 - $R/g <<'PY' | tee $R/g/summary.txt
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    j = json.load(open(f)); tag = j['config']['tag']
    for x in j['metrics']['gemm_bench']:
        if x['layer'] == 0: print('%-24s %-16s %-14s %8.2f us %s' % (tag, x['product'], x['impl'], x['ms'] * 1e3, 'ok' if x['passed'] else 'NOT OK'))
PY
W="--data $D --workload mlp_batch_sweep --epochs 2 --no-cupti --precision fp16"
for r in 1 2; do
  for b in 8192 4096 2048 1024; do
    timeout 60 $P $W --batch $b --out $R/ab --tag b$b-new-r$r > $R/ab/b$b-new-r$r.log 2>&1 || t "step $b new rc $?"
    NB_GIT_COMMIT=4592eea timeout 60 $O $W --batch $b --out $R/ab --tag b$b-old-r$r > $R/ab/b$b-old-r$r.log 2>&1 || t "step $b old rc $?"
  done
  t "steps round $r"; pack
done
python3 - $R/ab <<'PY' | tee $R/ab/summary.txt
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    j = json.load(open(f)); plan = [(p['product'], p['rung']) for p in j['metrics'].get('gemm_plan', []) if p['product'] in ('forward 0', 'weight-gradient 0')]
    print('%-20s %8.2f us a step  %s  %s' % (j['config']['tag'], 1e3 * j['timing']['per_step_ms']['median'], j['metrics']['param_checksum'], plan))
PY
timeout 100 build/tests/gpu_tests -tc="*step 9*" > $R/test.log 2>&1; t "test step 9 rc $? $(tail -2 $R/test.log | tr '\n' ' ')"
for b in 8192 4097 1024; do
  timeout 50 $P --data $D --batch $b --precision fp16 --steps 6 --validate --no-cupti --out $R/val --tag val-b$b > $R/val/b$b.log 2>&1
  t "validate fp16 b=$b rc $? $(grep -m1 -io 'validat[^|]*' $R/val/b$b.log | head -1 | cut -c1-90)"
done
pack
for b in 4096 8192; do
  timeout 40 $P --out $R/rec --data $D --batch $b --epochs 2 --workload mlp_batch_sweep --tag batch-sweep-b$b > $R/rec/b$b.log 2>&1 || t "rec $b rc $?"
  timeout 40 $P --out $R/rec --data $D --batch $b --epochs 2 --workload mlp_batch_sweep --precision fp16 --tag batch-sweep-b$b-fp16 > $R/rec/b$b-fp16.log 2>&1 || t "rec $b fp16 rc $?"
  timeout 40 $P --out $R/rec --data $D --batch $b --epochs 2 --workload mlp_batch_sweep --precision fp16 --fp16-gemm mma --tag batch-sweep-b$b-fp16-mma > $R/rec/b$b-fp16-mma.log 2>&1 || t "rec $b mma rc $?"
  t "records $b"
done
pack
left=$(( 560 - ($(date +%s) - T0) ))
if [ $left -gt 60 ]; then
  timeout $left compute-sanitizer --tool memcheck build/tests/gpu_tests -tc="*step 9*" > $R/memcheck.log 2>&1; t "memcheck rc $? $(grep -m1 'ERROR SUMMARY' $R/memcheck.log)"
else t "memcheck skipped ($left s left)"; fi
kill $WD; pack; t done
