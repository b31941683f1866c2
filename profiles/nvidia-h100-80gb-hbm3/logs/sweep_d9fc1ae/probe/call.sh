#!/usr/bin/env bash
# A probe build (d9fc1ae + .carry/p/probe.patch: %globaltimer stamps in step 8's staged and narrow
# kernels, printed by the block that runs the epilogue) at h = 2,048 / 4,096 / 8,192, 400 steps,
# PDL off and on; the same runs' step times against the unprobed build are in sweep_d9fc1ae/k/.
set -u
R=build/e4; rm -rf $R; mkdir -p $R/s
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
xz -dc .carry/p/p5probe.xz > $R/p5probe; chmod +x $R/p5probe
t "build $(md5sum < $R/p5probe | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --dropout 0 --precision fp16"
for pdl in off on; do for h in 2048 4096 8192; do
  timeout 60 $R/p5probe --data $D $W --layers 784,$h,$h,$h,10 --pdl $pdl --steps 400 --no-cupti --out $R/s --tag probe-h$h-pdl$pdl > $R/h$h-pdl$pdl.log 2>&1; t "h=$h pdl $pdl rc $?"
done; done
cp .carry/p/probe.patch $R/
rm -f $R/p5probe; t done; tar czf $OUT/e4.tgz $R
grep -h PROBE $R/*.log | cut -c1-230 | head -80
