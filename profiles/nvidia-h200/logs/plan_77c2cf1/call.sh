#!/usr/bin/env bash
# call 2 (no build: the objects and build/grid_tests built here with nvcc 13.0 for sm_90, linked there; build/phase5_base
# links 77c2cf1's grid kernel, 5g_grid_base.o): the grid kernel's update with its masters' loads issued with the B
# fragments and the transposed copy staged per warp and stored 16 bytes a lane -- unit tests, memcheck and
# racecheck, W2 at h = 128 ... 2,048 before (base) and after, --breakdown; then which fp32 products of W1's
# step pay on 3xTF32 at batch 512 ... 4,096 (NB_X3_EXP: an experiment switch of this build only) and the
# GEMM benchmark at 512 and 2,048.
set -u
O=build/obj/phase5_batched
link() { /usr/local/cuda/bin/nvcc -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 -o "$1" $O/5c_persistent.o $O/5d_cluster.o $O/5e_pipelined.o $O/5f_cluster32.o "$2" $O/main.o build/libnb_cuda.a build/libnb_host.a -L/usr/local/cuda/lib64 -Xlinker -rpath=/usr/local/cuda/lib64 -lcurand -lcupti -lcublasLt -lcublas -lz; }
link build/phase5_batched $O/5g_grid.o && link build/phase5_base $O/5g_grid_base.o || { echo "link failed"; exit 1; }
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call2; rm -rf $R; mkdir -p $R/rec $R/scratch $R/x3
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call2.tmp.tgz $R && mv $OUT/call2.tmp.tgz $OUT/call2.tgz; }
( exec >/dev/null 2>&1; sleep 500; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
timeout 120 build/grid_tests -tc="mlp grid*" > $R/tests_grid.log 2>&1; t "grid tests rc $?"; tail -3 $R/tests_grid.log
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 build/grid_tests -tc="mlp grid: a short run*" > $R/memcheck.log 2>&1; t "memcheck rc $?"; tail -1 $R/memcheck.log
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 99 build/grid_tests -tc="mlp grid: a short run*" > $R/racecheck.log 2>&1; t "racecheck rc $?"; tail -1 $R/racecheck.log
P5=build/phase5_batched; PB=build/phase5_base; D=(--data .carry/data/mnist)
w2() { echo --layers "784,$1,$1,$1,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16; }
for h in 1024 256 512 2048 128; do
  for v in base new; do
    B=$P5; [ $v = base ] && B=$PB
    timeout 60 $B "${D[@]}" $(w2 $h) --steps 3000 --repeats 3 --no-cupti --out $R/rec --launch grid --tag "w2-h$h-grid-$v" > $R/w2-$h-grid-$v.log 2>&1
    t "h=$h grid $v rc $?: $(grep -hi 'epoch 0\|error\|needs' $R/w2-$h-grid-$v.log | tail -1 | cut -c1-200)"
  done
done
for h in 1024 256; do
  timeout 60 $P5 "${D[@]}" $(w2 $h) --steps 3000 --repeats 1 --no-cupti --out $R/scratch --launch grid --breakdown --tag "w2-h$h-grid-bd" > $R/w2-$h-grid-breakdown.log 2>&1
  t "breakdown $h rc $?"; grep -A8 "breakdown (block" $R/w2-$h-grid-breakdown.log
done
pack
for b in 1024 512 2048 4096; do
  S=(--batch $b --epochs 2 --workload mlp_batch_sweep --no-cupti --out $R/x3)
  NB_X3_SHOW=1 NB_X3_EXP=wgrad timeout 40 $P5 "${D[@]}" "${S[@]}" --tag b$b-x3wgrad > $R/x3/b$b-wgrad.log 2>&1; t "b$b wgrad rc $?"
  NB_X3_SHOW=1 NB_X3_EXP=fwd timeout 40 $P5 "${D[@]}" "${S[@]}" --tag b$b-x3fwd > $R/x3/b$b-fwd.log 2>&1; t "b$b fwd rc $?"
  NB_X3_SHOW=1 timeout 40 $P5 "${D[@]}" "${S[@]}" --tag b$b-x3rule > $R/x3/b$b-rule.log 2>&1; t "b$b rule rc $?"
  timeout 40 $P5 "${D[@]}" "${S[@]}" --fp32-gemm tile --tag b$b-tile > $R/x3/b$b-tile.log 2>&1; t "b$b tile rc $?"
  NB_X3_EXP=wgrad timeout 40 $P5 "${D[@]}" "${S[@]}" --tag b$b-x3wgrad-2 > $R/x3/b$b-wgrad-2.log 2>&1; t "b$b wgrad again rc $?"
  timeout 40 $P5 "${D[@]}" "${S[@]}" --tag b$b-x3rule-2 > $R/x3/b$b-rule-2.log 2>&1; t "b$b rule again rc $?"
done
for b in 512 2048; do
  timeout 60 $P5 "${D[@]}" --batch $b --gemm-compare --out $R/rec --tag gemm-b$b > $R/gemm-$b.log 2>&1; t "gemm $b rc $?"
done
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 500" 2>/dev/null
grep -h "x3exp" $R/x3/b1024-rule.log | sort | uniq | head
for f in $R/x3/*.log; do echo "$(basename $f): $(grep -h '^epoch 1' $f | cut -c1-60)"; done
