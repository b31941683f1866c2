#!/usr/bin/env bash
# call 3: the grid rung with a vectorized update epilogue and deeper unrolled products, on top of the merged
# GEMM-fragment change: unit tests (cluster and grid), memcheck, W2 timings 128 ... 2,048 (grid and graph),
# --breakdown at 256 and 1,024. No build: build/phase5_batched and build/grid_tests carried.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call3; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call3.tmp.tgz $R && mv $OUT/call3.tmp.tgz $OUT/call3.tgz; }
( exec >/dev/null 2>&1; sleep 280; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
timeout 150 build/grid_tests > $R/tests.log 2>&1; t "tests rc $?"; tail -3 $R/tests.log
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 build/grid_tests -tc="mlp grid: a short run*" > $R/memcheck.log 2>&1; t "memcheck rc $?"; tail -1 $R/memcheck.log
P5=build/phase5_batched; D=(--data .carry/data/mnist)
w2() { echo --layers "784,$1,$1,$1,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16; }
for h in 128 256 512 1024 2048; do
  timeout 60 $P5 "${D[@]}" $(w2 $h) --steps 3000 --repeats 3 --no-cupti --out $R/rec --launch grid --tag "w2-h$h-grid" > $R/w2-$h-grid.log 2>&1
  t "h=$h grid rc $?: $(grep -hi 'epoch 0\|error\|needs' $R/w2-$h-grid.log | tail -1 | cut -c1-200)"
  timeout 60 $P5 "${D[@]}" $(w2 $h) --steps 3000 --repeats 3 --no-cupti --out $R/rec --tag "w2-h$h-own" > $R/w2-$h-own.log 2>&1
  t "h=$h own rc $?: $(grep -hi 'epoch 0\|error' $R/w2-$h-own.log | tail -1 | cut -c1-200)"
done
for h in 256 1024 2048; do
  timeout 60 $P5 "${D[@]}" $(w2 $h) --steps 3000 --repeats 1 --no-cupti --out $R/scratch --launch grid --breakdown --tag "w2-h$h-grid-bd" > $R/w2-$h-grid-breakdown.log 2>&1
  t "breakdown $h rc $?"; grep -A8 "breakdown (block" $R/w2-$h-grid-breakdown.log
done
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 280" 2>/dev/null
