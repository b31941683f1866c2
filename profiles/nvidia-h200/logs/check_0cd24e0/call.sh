#!/usr/bin/env bash
# call 6 (no build: build/phase5_batched built here with nvcc 13.0 for sm_90 from this commit, carried): --validate of the
# fp32 plan by product at awkward batches around its new condition (W1 at 700: every product on the SIMT tile;
# 1,023: the forward on step 5, the weight gradient on the tile; 2,047: both on step 5) and
# validate_sweep.sh on phase 5's default fp32 and fp16 paths; then the GEMM benchmark at every batch.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call6; rm -rf $R; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call6.tmp.tgz $R && mv $OUT/call6.tmp.tgz $OUT/call6.tgz; }
( exec >/dev/null 2>&1; sleep 280; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
P5=build/phase5_batched; D=(--data .carry/data/mnist)
for b in 700 1023 2047; do
  timeout 60 $P5 "${D[@]}" --batch $b --steps 4 --warmup 0 --repeats 1 --no-cupti --out $R/scratch --validate > $R/validate-b$b.log 2>&1
  t "validate W1 batch $b rc $?"; grep -h -A7 "GEMM plan" $R/validate-b$b.log; grep -h "validate " $R/validate-b$b.log
done
NO_BUILD=1 ONLY='phase5_batched --precision fp(32|16)$' timeout 120 scripts/validate_sweep.sh $R/validate_sweep.log > /dev/null 2>&1; t "validate_sweep rc $?"; tail -4 $R/validate_sweep.log
pack
NO_BUILD=1 STAGES=gemm RECORDS_DIR=$R/rec timeout 120 scripts/bench_gemm.sh > $R/bench_gemm.log 2>&1; t "bench_gemm rc $?"; cp -r build/bench_gemm/logs $R/gemm_logs 2>/dev/null
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 280" 2>/dev/null
cut -c1-160 $R/bench_gemm.log
