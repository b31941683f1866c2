#!/usr/bin/env bash
# Nsight Compute on one W2 step at h = 2,048 (.carry/n/p5.xz, NB_GIT_COMMIT): each of its seven
# kernels, full clocks, caches as the step leaves them. Results: $OUT/g3.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/g3; rm -rf $R; mkdir -p $R
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
mkdir -p build; xz -dc .carry/n/p5.xz > build/phase5_batched; chmod +x build/phase5_batched
t "p5 $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --precision fp16"
timeout 200 ncu --clock-control none --cache-control none --launch-skip 70 --launch-count 7 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
  build/phase5_batched --data $D $W --dropout 0 --layers 784,2048,2048,2048,10 --steps 20 --no-cupti --out $R --tag ncu-h2048 > $R/ncu-h2048.txt 2>&1; t "ncu rc $?"
tar czf $OUT/g3.tgz $R
grep -E "^  [a-z_:<>, 0-9A-Za-z]+\(|Duration|DRAM Throughput|Achieved Occupancy|Issued Warp Per Scheduler|No Eligible|Grid Size|Cluster Size|Registers Per" $R/ncu-h2048.txt | cut -c1-150
