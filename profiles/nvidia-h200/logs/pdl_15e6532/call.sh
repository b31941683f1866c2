#!/usr/bin/env bash
# call 5 at 15e6532be27ada2caf3c0736555d78c58a6591ea: no build (build/phase5_batched carried, built here with nvcc 13.0 for sm_90): PDL on/off at batch 8,192 and 1,024, ncu of the in-step step-6 kernels
set -u
export NB_GIT_COMMIT=15e6532be27ada2caf3c0736555d78c58a6591ea
R=build/call5; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call5.tmp.tgz $R && mv $OUT/call5.tmp.tgz $OUT/call5.tgz; }
( sleep 560; t watchdog; pack ) & WD=$!
P5=build/phase5_batched; D=(--data .carry/data/mnist)
ldd $P5 | grep -i "not found"; $P5 --help >/dev/null 2>&1; t "help rc $?"
for b in 8192 1024; do
  S=(--batch $b --epochs 3 --workload mlp_batch_sweep --out $R/rec)
  for pdl in on off; do
    timeout 40 $P5 "${D[@]}" "${S[@]}" --pdl $pdl --tag b$b-fp32-pdl$pdl >$R/b$b-fp32-pdl$pdl.log 2>&1; t "b$b fp32 pdl $pdl rc $?"
    timeout 40 $P5 "${D[@]}" "${S[@]}" --pdl $pdl --precision fp16 --fp16-gemm mma --tag b$b-mma-pdl$pdl >$R/b$b-mma-pdl$pdl.log 2>&1; t "b$b mma pdl $pdl rc $?"
    timeout 40 $P5 "${D[@]}" "${S[@]}" --pdl $pdl --precision fp16 --tag b$b-fp16-pdl$pdl >$R/b$b-fp16-pdl$pdl.log 2>&1; t "b$b fp16 pdl $pdl rc $?"
  done
done
pack
NCU=(ncu --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --print-details all)
timeout 120 "${NCU[@]}" -k regex:gemm_f16mma_kernel --launch-skip 16 --launch-count 8 $P5 "${D[@]}" --batch 8192 --steps 6 --precision fp16 --fp16-gemm mma --pdl off --no-cupti --out $R/scratch >$R/ncu_f16mma_step.txt 2>&1; t "ncu mma rc $?"
pack
timeout 120 "${NCU[@]}" -k regex:gemm_tf32x3_kernel --launch-skip 8 --launch-count 4 $P5 "${D[@]}" --batch 8192 --steps 6 --pdl off --no-cupti --out $R/scratch >$R/ncu_tf32x3_step.txt 2>&1; t "ncu tf32x3 rc $?"
pack; t packed; kill $WD 2>/dev/null
grep -H "^epoch 2" $R/b*.log
