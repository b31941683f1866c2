#!/usr/bin/env bash
# call 2: the grid rung after its first fixes (the batch by cp.async and a byte table, an update tile's
# masters loaded before any is stored): unit tests, memcheck, W2 timings, --breakdown, Nsight Compute
# (source-level warp stalls) at h = 256 and 1,024. No build: build/phase5_batched and build/grid_tests carried.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call2; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call2.tmp.tgz --exclude="*.ncu-rep" $R && mv $OUT/call2.tmp.tgz $OUT/call2.tgz; }
( exec >/dev/null 2>&1; sleep 330; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
timeout 150 build/grid_tests -tc="mlp grid*" > $R/tests_grid.log 2>&1; t "grid tests rc $?"; tail -3 $R/tests_grid.log
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 build/grid_tests -tc="mlp grid: a short run*" > $R/memcheck.log 2>&1; t "memcheck rc $?"; tail -1 $R/memcheck.log
P5=build/phase5_batched; D=(--data .carry/data/mnist)
w2() { echo --layers "784,$1,$1,$1,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16; }
for h in 128 256 512 1024 2048; do
  timeout 60 $P5 "${D[@]}" $(w2 $h) --steps 3000 --repeats 3 --no-cupti --out $R/rec --launch grid --tag "w2-h$h-grid" > $R/w2-$h-grid.log 2>&1
  t "h=$h grid rc $?: $(grep -hi 'epoch 0\|error\|needs' $R/w2-$h-grid.log | tail -1 | cut -c1-200)"
done
for h in 256 1024; do
  timeout 60 $P5 "${D[@]}" $(w2 $h) --steps 3000 --repeats 3 --no-cupti --out $R/rec --tag "w2-h$h-own" > $R/w2-$h-own.log 2>&1
  t "h=$h own rc $?: $(grep -hi 'epoch 0\|error' $R/w2-$h-own.log | tail -1 | cut -c1-200)"
  timeout 60 $P5 "${D[@]}" $(w2 $h) --steps 3000 --repeats 1 --no-cupti --out $R/scratch --launch grid --breakdown --tag "w2-h$h-grid-bd" > $R/w2-$h-grid-breakdown.log 2>&1
  t "breakdown $h rc $?"; grep -A8 "breakdown (block" $R/w2-$h-grid-breakdown.log
done
for h in 256 1024; do
  timeout 100 ncu --set full --import-source yes -k regex:p5_grid_epoch -c 1 -f -o $R/ncu$h $P5 "${D[@]}" $(w2 $h) --steps 300 --epochs 1 --repeats 1 --warmup 0 --no-cupti --out $R/scratch --launch grid --tag ncu > $R/ncu$h.run.log 2>&1
  t "ncu $h rc $?"
  ncu --import $R/ncu$h.ncu-rep --page details > $R/ncu$h.details.txt 2>&1
  ncu --import $R/ncu$h.ncu-rep --page source --csv --print-source cuda > $R/ncu$h.source.csv 2>$R/ncu$h.source.err || \
    ncu --import $R/ncu$h.ncu-rep --page source --csv > $R/ncu$h.source.csv 2>>$R/ncu$h.source.err
  t "ncu $h exported: $(wc -c < $R/ncu$h.source.csv) bytes of source"
done
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 330" 2>/dev/null
