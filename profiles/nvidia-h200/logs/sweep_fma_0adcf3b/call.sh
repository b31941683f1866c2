#!/usr/bin/env bash
# The batch sweep's CUDA-cores-only path (--fp32-gemm fma: GEMM step 7 where the plan puts step 5),
# W1's model at every batch, 2 epochs (bench_frameworks.sh's sweep run for that path), 0adcf3b's phase 5.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-0adcf3b}
R=build/sw; rm -rf $R; mkdir -p $R/rec
xz -dc .carry/bins/p5_tl.xz > build/phase5_batched; chmod +x build/phase5_batched
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1; cat $R/gpu.txt
for b in 32 64 128 256 512 1024 2048 4096 8192; do
  timeout 120 build/phase5_batched --out $R/rec --data .carry/data/mnist --batch $b --epochs 2 --workload mlp_batch_sweep --fp32-gemm fma --tag "batch-sweep-b$b-fma" > $R/sweep-$b-fma.log 2>&1
  echo "b=$b rc $?: $(grep -h '^record\|rror' $R/sweep-$b-fma.log | tail -1)"
done
tar czf $OUT/sw.tgz $R
