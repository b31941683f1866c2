#!/usr/bin/env bash
# call 6 at 7bb5a0a37b1dda57a3433f61a89afa4fa3224680: no build (build/phase5_batched and build/fused_tests carried, built here with nvcc 13.0 for sm_90):
# the bias gradient from dz's tile column sums — unit tests, --validate on every phase-5 path at awkward shapes, in-step kernel times (PDL off)
set -u
export NB_GIT_COMMIT=7bb5a0a37b1dda57a3433f61a89afa4fa3224680
R=build/call6; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call6.tmp.tgz $R && mv $OUT/call6.tmp.tgz $OUT/call6.tgz; }
( exec >/dev/null 2>&1; sleep 330; pack ) & WD=$!
P5=build/phase5_batched; D=(--data .carry/data/mnist)
timeout 60 build/fused_tests >$R/fused_tests.log 2>&1; t "fused tests rc $?"; grep -E "test cases|ERROR|FAIL" $R/fused_tests.log | head
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 build/fused_tests '-tc=*backward data*,*softmax*' >$R/fused_tests_memcheck.log 2>&1; t "memcheck rc $?"
for b in 8192 4096 2048 1024; do
  S=(--batch $b --epochs 3 --workload mlp_batch_sweep --out $R/rec --pdl off)
  timeout 40 $P5 "${D[@]}" "${S[@]}" --tag b$b-fp32-pdloff >$R/b$b-fp32.log 2>&1; t "b$b fp32 rc $?"
  timeout 40 $P5 "${D[@]}" "${S[@]}" --precision fp16 --tag b$b-fp16-pdloff >$R/b$b-fp16.log 2>&1; t "b$b fp16 rc $?"
  timeout 40 $P5 "${D[@]}" "${S[@]}" --precision fp16 --fp16-gemm mma --tag b$b-mma-pdloff >$R/b$b-mma.log 2>&1; t "b$b mma rc $?"
done
for b in 8192 1024 32; do
  timeout 40 $P5 "${D[@]}" --batch $b --epochs 2 --workload mlp_batch_sweep --out $R/rec --tag batch-sweep-b$b >$R/sweep-$b.log 2>&1; t "sweep $b rc $?"
done
pack
NO_BUILD=1 ONLY='phase5_batched --precision fp(32|16)( --fp(32|16)-gemm [a-z0-9]+)?$' timeout 200 scripts/validate_sweep.sh $R/validate_p5.log >/dev/null 2>&1; t "validate p5 rc $?"; tail -8 $R/validate_p5.log
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 330" 2>/dev/null
grep -H "^epoch 2\|^epoch 1" $R/*.log | grep -v traced | head -40
