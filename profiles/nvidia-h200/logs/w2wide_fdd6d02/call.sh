#!/usr/bin/env bash
# Records at fdd6d02 (the fused pass's wave split): the width sweep's stage at h = 2,048 / 4,096 / 8,192
# (phase 5 own and grid, PyTorch compiled-graph and JAX on the same init and order), after the pass's
# GPU tests and --validate at h = 2,048 (batch 32 and 7: the new splits) on this build.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-fdd6d02}
R=build/d10; rm -rf $R; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/d10.tmp.tgz --exclude=scratch --exclude='*.trace.json' $R 2>/dev/null; mv $OUT/d10.tmp.tgz $OUT/d10.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/tests; xz -dc .carry/bins/p5_final.xz > build/phase5_batched; xz -dc .carry/bins/fb_tests.xz > build/tests/fb_tests
chmod +x build/phase5_batched build/tests/fb_tests; touch build/phase5_batched
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 60 build/tests/fb_tests > $R/tests.log 2>&1; t "tests rc $?: $(tail -2 $R/tests.log | tr '\n' ' ')"
for b in 32 7; do
  timeout 60 build/phase5_batched --data .carry/data/mnist --layers 784,2048,2048,2048,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --batch $b --steps 20 --validate --no-cupti --out $R/scratch --tag v > $R/val-b$b.log 2>&1
  t "validate h=2048 b=$b rc $?: $(grep -c ' ok$' $R/val-b$b.log) ok, $(grep -ci 'fail' $R/val-b$b.log) fail"
done
pack
STAGES=w2 W2_HS="2048 4096 8192" NO_BUILD=1 RECORDS_DIR=$R/rec PACK=$OUT/d10-rec.tgz timeout 450 scripts/bench_frameworks.sh > $R/w2.log 2>&1
t "w2 rc $?"; mkdir -p $R/logs-w2; cp build/bench_frameworks/logs/*.log $R/logs-w2/ 2>/dev/null
kill $WD 2>/dev/null; pack; t packed
