#!/usr/bin/env bash
# Step 7 (FMA warp tiles in step 5's 64 x 64 tile): its GPU tests (GEMM cases + gathered bytes) and
# memcheck; the GEMM benchmark fp32 at every batch (records); W1's step on the CUDA cores only
# (--fp32-gemm fma) against auto and tile at 2,048 / 4,096 / 8,192, --validate on fma at odd shapes;
# compare_builds (90f4663+probe = before, this build = after) on paths the change leaves alone; the
# grid probe (90f4663 + stamps) on W2 h = 256 / 1,024 / 2,048. No build: binaries carried xz'd.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/fm; rm -rf $R; mkdir -p $R/rec $R/scratch $R/gs
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/fm.tmp.tgz $R build/bench_gemm/logs 2>/dev/null; mv $OUT/fm.tmp.tgz $OUT/fm.tgz; }
( exec >/dev/null 2>&1; sleep 540; pack ) & WD=$!
mkdir -p build/tests build/before/build
xz -dc .carry/bins/p5_new.xz > build/phase5_batched & P1=$!
xz -dc .carry/bins/tests.xz > build/tests/gpu_tests & P2=$!
wait $P1 $P2
chmod +x build/phase5_batched build/tests/gpu_tests; touch build/phase5_batched
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1; cat $R/gpu.txt
timeout 240 build/tests/gpu_tests -tc='*GEMM*,*gathered bytes*' > $R/tests.log 2>&1; t "tests rc $?: $(tail -2 $R/tests.log | tr '\n' ' ')"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 build/tests/gpu_tests -tc='*step 7*' > $R/memcheck.log 2>&1; t "memcheck step 7 rc $?: $(tail -1 $R/memcheck.log)"
pack
PRECISIONS=fp32 NO_BUILD=1 STAGES=gemm RECORDS_DIR=$R/rec timeout 200 scripts/bench_gemm.sh > $R/bench_gemm.out 2>&1; t "bench_gemm rc $?"
grep -h "L0\|L1" build/bench_gemm/logs/gemm-b8192.log | head -40
pack
D=(--data .carry/data/mnist --no-cupti)
for b in 2048 4096 8192; do
  for g in auto fma tile; do
    timeout 60 build/phase5_batched "${D[@]}" --batch $b --epochs 3 --workload mlp_batch_sweep --fp32-gemm $g --out $R/scratch --tag "step-b$b-$g" > $R/step-b$b-$g.log 2>&1
    echo "b=$b $g rc $?: $(grep -h 'per step\|median\|rror' $R/step-b$b-$g.log | tail -2 | tr '\n' ' ' | cut -c1-200)" >> $R/steps-fma.txt
  done
done
t "steps"; cat $R/steps-fma.txt
timeout 60 build/phase5_batched "${D[@]}" --batch 8192 --epochs 1 --fp32-gemm fma --validate --out $R/scratch --tag v1 > $R/val-8192.log 2>&1; t "validate fma 8192 rc $?: $(grep -i 'valid' $R/val-8192.log | tail -1)"
timeout 60 build/phase5_batched "${D[@]}" --batch 4097 --layers 784,300,100,10 --epochs 1 --fp32-gemm fma --validate --out $R/scratch --tag v2 > $R/val-4097.log 2>&1; t "validate fma 4097 300/100 rc $?: $(grep -i 'valid' $R/val-4097.log | tail -1)"
timeout 60 build/phase5_batched "${D[@]}" --batch 2048 --layers 784,1000,1000,10 --epochs 1 --fp32-gemm fma --validate --out $R/scratch --tag v3 > $R/val-2048.log 2>&1; t "validate fma 2048 1000/1000 rc $?: $(grep -i 'valid' $R/val-2048.log | tail -1)"
pack
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 540" 2>/dev/null
