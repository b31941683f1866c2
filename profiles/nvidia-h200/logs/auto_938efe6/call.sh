#!/usr/bin/env bash
# call 5: --launch auto (the plan by model) and the fp16 rule's row-tile condition: the grid tests (the
# plan's units a block), auto at W1 and W2 h = 128 / 1,024 / 4,096 (the plan it prints), W2 h = 4,096 and
# 8,192 on the graph path with --fp16-gemm auto (now the WMMA tile there), mma and tile, one process
# after another. No build: build/phase5_batched and build/grid_tests carried.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call5; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call5.tmp.tgz $R && mv $OUT/call5.tmp.tgz $OUT/call5.tgz; }
( exec >/dev/null 2>&1; sleep 200; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
timeout 90 build/grid_tests -tc="mlp grid*" > $R/tests_grid.log 2>&1; t "grid tests rc $?"; tail -3 $R/tests_grid.log
P5=build/phase5_batched; D=(--data .carry/data/mnist)
w2() { echo --layers "784,$1,$1,$1,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16; }
timeout 30 $P5 "${D[@]}" --steps 300 --repeats 1 --no-cupti --out $R/scratch --launch auto --tag auto-w1 > $R/auto-w1.log 2>&1; t "auto W1 rc $?: $(grep -h 'launch plan' $R/auto-w1.log)"
for h in 128 1024 4096; do
  timeout 30 $P5 "${D[@]}" $(w2 $h) --steps 300 --repeats 1 --no-cupti --out $R/scratch --launch auto --tag auto-h$h > $R/auto-$h.log 2>&1
  t "auto h=$h rc $?: $(grep -h 'launch plan' $R/auto-$h.log)"
done
for h in 4096 8192; do
  for g in auto mma tile; do
    timeout 60 $P5 "${D[@]}" $(w2 $h) --steps 1000 --repeats 3 --no-cupti --out $R/rec --fp16-gemm $g --tag "w2-h$h-own-f16$g" > $R/w2-$h-$g.log 2>&1
    t "h=$h fp16-gemm $g rc $?: $(grep -hi 'epoch 0\|error' $R/w2-$h-$g.log | tail -1 | cut -c1-160)"
  done
done
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 200" 2>/dev/null
