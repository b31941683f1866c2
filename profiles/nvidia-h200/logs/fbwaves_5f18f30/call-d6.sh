#!/usr/bin/env bash
# The fused backward pass with each thread's addresses worked out once a block (v3, build/v3): its GPU
# tests plain and under compute-sanitizer memcheck / racecheck / synccheck; W2 --validate on the fused
# path at awkward widths and batches (SGD; Adam with --backward fused); Nsight Compute's source counters
# on the pass at h = 8,192. Leaves build/v3 and build/data for the A/B call after it.
set -u
R=build/d6; rm -rf $R; mkdir -p $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/d6.tmp.tgz --exclude=scratch --exclude='*.ncu-rep' $R 2>/dev/null; mv $OUT/d6.tmp.tgz $OUT/d6.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/v3 build/tests build/data; xz -dc .carry/bins/p5_v3.xz > build/v3/phase5_batched; xz -dc .carry/bins/fb_tests.xz > build/tests/fb_tests
chmod +x build/v3/phase5_batched build/tests/fb_tests; cp -r .carry/data/mnist build/data/
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 120 build/tests/fb_tests > $R/tests.log 2>&1; t "tests rc $?: $(tail -2 $R/tests.log | tr '\n' ' ')"
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 99 build/tests/fb_tests > $R/san-$tool.log 2>&1; t "$tool rc $?: $(tail -1 $R/san-$tool.log)"
done
pack
D=build/data/mnist
for L in "784,1000,1000,1000,10" "784,296,104,296,10" "784,2048,2048,2048,10"; do
  for b in 32 7 1; do
    timeout 60 build/v3/phase5_batched --data $D --layers $L --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --batch $b --steps 50 --validate --no-cupti --out $R/scratch --tag v > $R/val-$L-b$b.log 2>&1
    t "validate $L b=$b rc $?: $(grep -c ' ok$' $R/val-$L-b$b.log) ok, $(grep -ci 'fail' $R/val-$L-b$b.log) fail"
  done
done
timeout 60 build/v3/phase5_batched --data $D --layers 784,1000,1000,1000,10 --optimizer adam --lr 0.001 --dropout 0.2 --precision fp16 --backward fused --steps 50 --validate --no-cupti --out $R/scratch --tag v > $R/val-adam.log 2>&1
t "validate adam fused 1000 rc $?: $(grep -c ' ok$' $R/val-adam.log) ok, $(grep -ci 'fail' $R/val-adam.log) fail"
pack
S="--section SourceCounters --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats"
timeout 120 ncu --kernel-name-base demangled --kernel-name regex:'fused_update_bwd' --launch-skip 13 --launch-count 1 $S --import-source yes -o $R/ncu-fb8192 -f \
  build/v3/phase5_batched --data $D --layers "784,8192,8192,8192,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --steps 8 --no-cupti --out $R/scratch > $R/ncu-fb8192.out 2>&1
t "ncu rc $?"
ncu -i $R/ncu-fb8192.ncu-rep > $R/ncu-fb8192.txt 2>&1
ncu -i $R/ncu-fb8192.ncu-rep --page source --csv --print-source sass > $R/ncu-fb8192-sass.csv 2>&1
python3 scripts/ncu_sass_summary.py $R/ncu-fb8192-sass.csv 40 > $R/ncu-fb8192-sass-summary.txt 2>&1; t "summary rc $?"
xz -9 $R/ncu-fb8192-sass.csv
kill $WD 2>/dev/null; pack; t packed
