#!/usr/bin/env bash
# Step 7 variants (NB_FMA_VAR: 0 as committed; 1 each warp converts the bytes it reads, no second
# barrier a k-tile; 2 A's 8 rows loaded before the FMAs; 3 both) in the GEMM benchmark at 8,192 and
# 4,096, 2 rounds; the 32 x 64 tile's long-K plan at other wave counts (NB_P5_WAVES 2, 8; default 4);
# ncu on step 7's forward at 8,192 (variants 0 and 1); the grid probe (90f4663 + stamps) on W2
# h = 1,024 / 256 / 2,048; --validate on --fp32-gemm fma at 1,023 x 1000/1000. No build.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/ex; rm -rf $R; mkdir -p $R/rec $R/scratch $R/gs $R/ncu
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/ex.tmp.tgz $R 2>/dev/null; mv $OUT/ex.tmp.tgz $OUT/ex.tgz; }
( exec >/dev/null 2>&1; sleep 540; pack ) & WD=$!
mkdir -p build/before/build
xz -dc .carry/bins/p5_exp.xz > build/phase5_batched & P1=$!
xz -dc .carry/bins/p5_gprobe.xz > build/before/build/phase5_batched & P3=$!
wait $P1 $P3
chmod +x build/phase5_batched build/before/build/phase5_batched
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1; cat $R/gpu.txt
for r in 1 2; do
  for b in 8192 4096; do
    for v in 0 1 2 3; do
      NB_FMA_VAR=$v timeout 60 build/phase5_batched --batch $b --gemm-compare --out $R/scratch --tag "g-b$b-v$v-r$r" > $R/g-b$b-v$v-r$r.log 2>&1
      echo "b=$b v=$v r=$r rc $?: $(grep -h 'L0.*own-fma64' $R/g-b$b-v$v-r$r.log | awk '{print $2, $9}' | tr '\n' ' ')" | tee -a $R/var.txt
    done
  done
done
t variants
for w in 2 8 4; do
  NB_P5_WAVES=$w timeout 60 build/phase5_batched --batch 8192 --gemm-compare --out $R/scratch --tag "g-w$w" > $R/g-w$w.log 2>&1
  echo "waves=$w rc $?: $(grep -h 'L1 weight-gradient.*own-tile\|L1 weight-gradient.*cublaslt-fp32' $R/g-w$w.log | awk '{print $8, $9}' | tr '\n' ' ')" | tee -a $R/waves.txt
done
t waves
pack
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables --section InstructionStats --section Occupancy --section LaunchStats"
for v in 0 1; do
  NB_FMA_VAR=$v timeout 120 ncu --kernel-name regex:gemm_fma64 --launch-count 1 $S build/phase5_batched --batch 8192 --gemm-compare --out $R/scratch --tag ncu$v > $R/ncu/fwd-v$v.txt 2>&1
  t "ncu v$v rc $?"
done
pack
w2() { echo --layers "784,$1,$1,$1,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16; }
for h in 1024 256 2048; do
  timeout 60 build/before/build/phase5_batched --data .carry/data/mnist $(w2 $h) --launch grid --steps 3000 --repeats 1 --no-cupti --out $R/scratch --tag gs$h > $R/gs/out-$h.log 2> $R/gs/gs-$h.log
  t "gprobe h=$h rc $?"
done
python3 .carry/probes/analyze_grid.py $R/gs/gs-1024.log $R/gs/gs-256.log $R/gs/gs-2048.log > $R/gs/analysis.txt 2>&1; head -80 $R/gs/analysis.txt
pack
timeout 150 build/phase5_batched --data .carry/data/mnist --no-cupti --batch 1023 --layers 784,1000,1000,10 --epochs 1 --fp32-gemm fma --validate --validate-steps 1 --out $R/scratch --tag v3 > $R/val-1023.log 2>&1; t "validate fma 1023 1000/1000 rc $?: $(grep -i 'valid' $R/val-1023.log | tail -2 | tr '\n' ' ')"
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 540" 2>/dev/null
