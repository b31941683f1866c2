#!/usr/bin/env bash
# call 1: the grid rung (5g) on the GPU: its unit tests (and the cluster kernel's, same file), memcheck and
# racecheck on the short run, then W2 at h = 128 ... 8,192 on the graph path and the grid kernel
# (--validate at three widths, --breakdown at two). No build: build/phase5_batched and build/grid_tests carried.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call1; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call1.tmp.tgz $R && mv $OUT/call1.tmp.tgz $OUT/call1.tgz; }
( exec >/dev/null 2>&1; sleep 400; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
timeout 240 build/grid_tests -tc="mlp grid*" > $R/tests_grid.log 2>&1; t "grid tests rc $?"; tail -4 $R/tests_grid.log
timeout 120 build/grid_tests -tc="mlp cluster*" > $R/tests_cluster.log 2>&1; t "cluster tests rc $?"; tail -3 $R/tests_cluster.log
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 build/grid_tests -tc="mlp grid: a short run*" > $R/memcheck.log 2>&1; t "memcheck rc $?"; tail -3 $R/memcheck.log
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 99 build/grid_tests -tc="mlp grid: a short run*" > $R/racecheck.log 2>&1; t "racecheck rc $?"; tail -3 $R/racecheck.log
P5=build/phase5_batched; D=(--data .carry/data/mnist)
for h in 128 256 512 1024 2048 4096 8192; do
  W2=(--layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16)
  V=(); case $h in 256|1024|4096) V=(--validate);; esac
  timeout 60 $P5 "${D[@]}" "${W2[@]}" --steps 3000 --repeats 3 --no-cupti --out $R/rec --tag "w2-h$h-own" > $R/w2-$h-own.log 2>&1; a=$?
  timeout 60 $P5 "${D[@]}" "${W2[@]}" --steps 3000 --repeats 3 --no-cupti --out $R/rec --launch grid "${V[@]}" --tag "w2-h$h-grid" > $R/w2-$h-grid.log 2>&1; b=$?
  t "h=$h own rc $a: $(grep -hi 'epoch 0\|error\|needs' $R/w2-$h-own.log | tail -1 | cut -c1-160)"
  t "h=$h grid rc $b: $(grep -hi 'epoch 0\|valid\|error\|needs\|plan' $R/w2-$h-grid.log | tail -4 | tr '\n' ' ' | cut -c1-400)"
done
for h in 256 1024; do
  W2=(--layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16)
  timeout 60 $P5 "${D[@]}" "${W2[@]}" --steps 3000 --repeats 1 --no-cupti --out $R/scratch --launch grid --breakdown --tag "w2-h$h-grid-breakdown" > $R/w2-$h-grid-breakdown.log 2>&1; t "breakdown $h rc $?"
done
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 400" 2>/dev/null
