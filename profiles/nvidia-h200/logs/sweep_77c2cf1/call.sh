#!/usr/bin/env bash
# call 1 at 77c2cf1 (no build: build/phase5_batched built here with nvcc 13.0 for sm_90, carried):
# the fp16 rule's row-tile condition timed (W2 h = 4,096 / 8,192, --fp16-gemm auto against tile), the
# GEMM fragments timed (--gemm-compare at 1,024 and 8,192), the grid kernel's --breakdown at 1,024 and
# Nsight Compute's per-line stalls there, then the batch sweep at 64 ... 4,096 with the JAX twin.
set -u
export NB_GIT_COMMIT=77c2cf1f23c053636a842ff372c8f9c7590b4a30
R=build/call1; mkdir -p $R/rec $R/scratch $R/ncu
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call1.tmp.tgz $R && mv $OUT/call1.tmp.tgz $OUT/call1.tgz; }
( exec >/dev/null 2>&1; sleep 575; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
P5=build/phase5_batched; D=(--data .carry/data/mnist)
w2() { echo --layers "784,$1,$1,$1,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16; }
for h in 4096 8192; do
  for g in auto tile; do
    timeout 60 $P5 "${D[@]}" $(w2 $h) --steps 1000 --repeats 3 --no-cupti --out $R/rec --fp16-gemm $g --tag "w2-h$h-own-f16$g" > $R/w2-$h-$g.log 2>&1
    t "h=$h fp16-gemm $g rc $?: $(grep -hi 'epoch 0\|error' $R/w2-$h-$g.log | tail -1 | cut -c1-160)"
  done
done
for b in 1024 8192; do
  timeout 60 $P5 "${D[@]}" --batch $b --gemm-compare --out $R/rec --tag gemm-b$b > $R/gemm-$b.log 2>&1; t "gemm $b rc $?"
  timeout 60 $P5 "${D[@]}" --batch $b --precision fp16 --gemm-compare --out $R/rec --tag gemm-b$b-fp16 > $R/gemm-$b-fp16.log 2>&1; t "gemm $b fp16 rc $?"
done
pack
timeout 60 $P5 "${D[@]}" $(w2 1024) --steps 3000 --repeats 1 --no-cupti --out $R/scratch --launch grid --breakdown --tag w2-h1024-grid-bd > $R/w2-1024-grid-breakdown.log 2>&1
t "breakdown 1024 rc $?"; grep -A8 "breakdown (block" $R/w2-1024-grid-breakdown.log
PROFILE_DIR=$R/ncu STALLS=1 KERNEL=p5_grid_epoch SKIP=1 PER=$((16*200)) timeout 150 scripts/profile.sh ncu 5 "${D[@]}" $(w2 1024) --launch grid --steps 200 --warmup 0 --repeats 1 > $R/ncu.log 2>&1
t "ncu grid rc $?"; tail -3 $R/ncu.log; rm -f $R/ncu/*.ncu-rep
pack
STAGES=sweep SWEEP_BATCHES="2048 4096 256 64 512 128" SWEEP_TWINS=jax NO_BUILD=1 RECORDS_DIR=$R/rec timeout 380 scripts/bench_frameworks.sh > $R/sweep.log 2>&1
t "sweep rc $?"; cp -r build/bench_frameworks/logs $R/sweep_logs 2>/dev/null
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 575" 2>/dev/null
cat $R/sweep.log | cut -c1-200
