#!/usr/bin/env bash
# call 4 at 80337681fd4fe995ae0a2200701af76b5a55f15c: step 6 (fp16 mma.sync) test + GEMM bench, the GatherView fix in the step, W2 tile vs mma, validate on the mma path
set -u
export ARCH=sm_90 DEPS_PREFIX=$PWD/.carry/deps NB_GIT_COMMIT=80337681fd4fe995ae0a2200701af76b5a55f15c
R=build/call4; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { cp -r build/bench_gemm/logs $R/gemm_logs 2>/dev/null; tar czf $OUT/call4.tmp.tgz $R && mv $OUT/call4.tmp.tgz $OUT/call4.tgz; }
( sleep 565; t watchdog; pack ) &
t build; make -j16 build/phase4_mlp build/phase5_batched build/tests/gpu_tests >$R/build.log 2>&1; t "build rc $?"; tail -3 $R/build.log
timeout 90 build/tests/gpu_tests '-tc=*GEMM*' >$R/test_gemm.log 2>&1; t "test gemm rc $?"; grep -E "test cases|ERROR" $R/test_gemm.log | head -5
P5=build/phase5_batched; D=(--data .carry/data/mnist)
for b in 8192 2048 1024; do
  timeout 40 $P5 "${D[@]}" --out $R/rec --batch $b --precision fp16 --gemm-compare --tag gemm-b$b-fp16 >$R/gemm-b$b-fp16.log 2>&1; t "gemm b$b fp16 rc $?"
done
timeout 40 $P5 "${D[@]}" --out $R/rec --batch 8192 --gemm-compare --tag gemm-b8192 >$R/gemm-b8192.log 2>&1; t "gemm b8192 fp32 rc $?"; pack
for b in 8192 1024; do
  S=(--batch $b --epochs 2 --workload mlp_batch_sweep --out $R/rec)
  timeout 40 $P5 "${D[@]}" "${S[@]}" --tag batch-sweep-b$b >$R/sweep-$b.log 2>&1; t "sweep $b fp32 rc $?"
  timeout 40 $P5 "${D[@]}" "${S[@]}" --precision fp16 --tag batch-sweep-b$b-fp16 >$R/sweep-$b-fp16.log 2>&1; t "sweep $b fp16 rc $?"
  timeout 40 $P5 "${D[@]}" "${S[@]}" --precision fp16 --fp16-gemm mma --tag batch-sweep-b$b-fp16-mma >$R/sweep-$b-fp16-mma.log 2>&1; t "sweep $b fp16-mma rc $?"
done
pack
for h in 256 512 1024 2048; do
  W2=(--layers 784,$h,$h,$h,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --steps 3000 --out $R/rec)
  timeout 40 $P5 "${D[@]}" "${W2[@]}" --tag w2-h$h-own >$R/w2-$h.log 2>&1; t "w2 $h tile rc $?"
  timeout 40 $P5 "${D[@]}" "${W2[@]}" --fp16-gemm mma --tag w2-h$h-own-mma >$R/w2-$h-mma.log 2>&1; t "w2 $h mma rc $?"
done
pack
ONLY=mma timeout 120 scripts/validate_sweep.sh $R/validate_mma.log >/dev/null 2>&1; t "validate mma rc $?"; tail -4 $R/validate_mma.log
pack; t packed
grep -hE "own-f16-mma|own-tile|cublaslt-fp16" $R/gemm-b8192-fp16.log | head -20
grep -H "^epoch 1" $R/sweep-*.log $R/w2-*.log | head -30
