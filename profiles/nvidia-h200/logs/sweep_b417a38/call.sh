#!/usr/bin/env bash
# call 7 at b417a3811ef6d2008dcc8ba895bd11e468842f06: no build (build/phase5_batched carried, built here with nvcc 13.0 for sm_90): the yardstick sweep
# (bench_frameworks.sh sweep stage, twins on the same init and order) at 8,192 / 1,024 / 32, and --validate on fp16 auto
set -u
export NB_GIT_COMMIT=b417a3811ef6d2008dcc8ba895bd11e468842f06
R=build/call7; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { cp -r build/bench_frameworks/logs $R/sweep_logs 2>/dev/null; tar czf $OUT/call7.tmp.tgz $R && mv $OUT/call7.tmp.tgz $OUT/call7.tgz; }
( exec >/dev/null 2>&1; sleep 300; pack ) & WD=$!
P5=build/phase5_batched; D=(--data .carry/data/mnist)
for s in "--batch 8192 --layers 784,128,64,10" "--batch 4097 --layers 784,300,100,10" "--batch 1025 --layers 784,1000,1000,10 --optimizer sgd --lr 0.01 --dropout 0"; do
  timeout 30 $P5 "${D[@]}" $s --precision fp16 --steps 4 --warmup 0 --repeats 1 --no-cupti --out $R/scratch --validate >$R/validate_auto.tmp 2>&1; rc=$?
  echo "[$s] fp16 auto (exit $rc): $(grep -E '^  validate|rung|plan' $R/validate_auto.tmp | tr '\n' ' ' | cut -c1-600)" >>$R/validate_fp16_auto.log
done
t "validate fp16 auto done"; cat $R/validate_fp16_auto.log | cut -c1-300
NO_BUILD=1 STAGES=sweep SWEEP_BATCHES="8192 1024 32" RECORDS_DIR=$R/rec timeout 280 scripts/bench_frameworks.sh >$R/sweep.log 2>&1; t "sweep rc $?"
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 300" 2>/dev/null
cat $R/sweep.log | tail -30
