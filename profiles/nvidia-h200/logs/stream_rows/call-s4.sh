#!/usr/bin/env bash
# GEMM step 8 as committed (W words in registers a stage ahead, read past L1; the gathered first layer
# with its bytes as A): its GPU tests plain and under compute-sanitizer; the width sweep's stage at
# h = 2,048 / 4,096 / 8,192 (records: phase 5 own and grid, PyTorch compiled-graph and JAX on the same
# init and order); W2's step with step 8 (--fp16-stream on) against without (off), 2 rounds
# alternating; --validate with every forward on step 8; each kernel's own time (PDL off, auto).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/s4; rm -rf $R; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/s4.tmp.tgz --exclude=scratch --exclude='*.trace.json' $R 2>/dev/null; mv $OUT/s4.tmp.tgz $OUT/s4.tgz; }
( exec >/dev/null 2>&1; while sleep 20; do pack; done ) & WD=$!
mkdir -p build/tests; xz -dc .carry/bins/s8f_p5.xz > build/phase5_batched; xz -dc .carry/bins/s8f_tests.xz > build/tests/s8_tests
chmod +x build/phase5_batched build/tests/s8_tests; touch build/phase5_batched
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist
P=build/phase5_batched
timeout 60 build/tests/s8_tests -tc='*step 8*,*step 6*,*steps 5, 6 and 7*' > $R/tests.log 2>&1; t "tests rc $?: $(tail -3 $R/tests.log | tr '\n' ' ')"
timeout 60 compute-sanitizer --tool memcheck build/tests/s8_tests -tc='*step 8*' > $R/memcheck.log 2>&1; t "memcheck rc $?: $(grep -h 'ERROR SUMMARY' $R/memcheck.log | tail -1)"
timeout 90 compute-sanitizer --tool racecheck build/tests/s8_tests -tc='*step 8*' > $R/racecheck.log 2>&1; t "racecheck rc $?: $(grep -h 'RACECHECK SUMMARY' $R/racecheck.log | tail -1)"
pack
STAGES=w2 W2_HS="2048 4096 8192" NO_BUILD=1 RECORDS_DIR=$R/rec PACK=$OUT/s4-rec.tgz timeout 330 scripts/bench_frameworks.sh > $R/w2.log 2>&1
t "w2 rc $?"; mkdir -p $R/logs-w2; cp build/bench_frameworks/logs/*.log $R/logs-w2/ 2>/dev/null
pack
one() {  # h variant round
  local h=$1 v=$2 r=$3
  timeout 60 $P --data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --fp16-stream $v \
    --steps 600 --repeats 3 --no-cupti --out $R/scratch --tag "h$h-$v-r$r" > $R/h$h-$v-r$r.log 2>&1
  local rc=$?
  python3 - "$R/scratch/phase5_batched__h$h-$v-r$r.json" "$h $v r$r rc=$rc" <<'PY' | tee -a $R/ab.txt
import json,sys
try:
  d=json.load(open(sys.argv[1])); m=d['metrics']
  print(sys.argv[2], 'step_us %.2f'%(d['timing']['per_step_ms']['median']*1000), m.get('param_checksum'))
except Exception as e: print(sys.argv[2], 'no record', e)
PY
}
for r in 1 2; do
  for h in 1024 2048 4096 8192; do
    V="off on"; [ $r = 2 ] && V="on off"
    for v in $V; do one $h $v $r; done
  done
  pack
done
for L in 784,2048,2048,2048,10/32 784,2048,2048,2048,10/7 784,1000,1000,1000,10/1 784,3000,3000,3000,10/7; do
  b=${L#*/}; L=${L%/*}
  timeout 60 $P --data $D --layers $L --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --fp16-stream on --batch $b --steps 30 --validate --no-cupti --out $R/scratch --tag v > $R/val-$L-b$b.log 2>&1
  t "validate $L b=$b rc $?: $(grep -c ' ok$' $R/val-$L-b$b.log) ok, $(grep -ci 'fail' $R/val-$L-b$b.log) fail"
done
pack
for h in 2048 4096 8192; do
  timeout 60 $P --data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --steps 600 --pdl off --out $R/scratch --tag "w2-h$h-pdloff" > $R/run-h$h-pdloff.log 2>&1
  t "kernels h=$h rc $?"
done
python3 - $R/scratch > $R/kernels.txt <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/*pdloff.json')):
  d=json.load(open(f)); print(os.path.basename(f), 'step %.2f us'%(d['timing']['per_step_ms']['median']*1000))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:9]:
    print('  %9.2f us  x%-5d grid %-5d min %7.1f max %7.1f  %s'%(k['mean_ns']/1e3,k['calls'],k['grid'][0],k['min_ns']/1e3,k['max_ns']/1e3,k['name'][:110]))
PY
kill $WD 2>/dev/null; pack; t packed
