#!/usr/bin/env bash
# Nsight Compute (full set, SASS) on GEMM step 11's kernel alone: the GEMM benchmark's first-layer forward
# at batch 8,192 (fp16), build .carry/j/p5wide2.xz (a6f31da: W streamed, stages rotated). $OUT/j29.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j29; rm -rf $R; mkdir -p $R
mkdir -p build; xz -dc .carry/j/p5wide2.xz > build/phase5_batched; chmod +x build/phase5_batched
P=build/phase5_batched; D=.carry/data/mnist
timeout 200 ncu --set full --import-source yes --clock-control none -k regex:gemm_wide_kernel --launch-skip 1 --launch-count 1 -f -o $R/wide \
  $P --data $D --gemm-compare --batch 8192 --precision fp16 --out $R --tag ncu-wide > $R/ncu.log 2>&1; echo "ncu rc $?"
ncu -i $R/wide.ncu-rep --page details > $R/wide-details.txt 2>&1
ncu -i $R/wide.ncu-rep --page source --csv --print-source sass > $R/wide-sass.csv 2>&1; gzip -f $R/wide-sass.csv
ncu -i $R/wide.ncu-rep --page raw --csv > $R/wide-raw.csv 2>&1; gzip -f $R/wide-raw.csv
rm -f $R/wide.ncu-rep; tar czf $OUT/j29.tgz $R; grep -E "Duration|Registers|Issued Ipc|Warp Cycles Per Issued|Achieved Occupancy|Memory Throughput|L2 Hit|Compute \(SM\)" $R/wide-details.txt | head -20
