#!/usr/bin/env bash
# Where W2's wide steps go on the graph path (e802857's phase 5): each kernel's own time (PDL off, CUPTI)
# at h = 2,048 / 4,096 / 8,192 against PDL on in the same call; Nsight Compute on the fused backward
# pass (update + backward-data through one layer's weights) and the hidden forward at h = 4,096 / 8,192.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-e802857}
R=build/d1; rm -rf $R; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/d1.tmp.tgz --exclude='*.ncu-rep' --exclude=scratch $R 2>/dev/null; mv $OUT/d1.tmp.tgz $OUT/d1.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/bins/p5_s2.xz > build/phase5_batched; chmod +x build/phase5_batched
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist
for h in 2048 4096 8192; do
  W2=(--data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16)
  for pdl in off on; do
    timeout 90 build/phase5_batched "${W2[@]}" --steps 1000 --pdl $pdl --out $R/rec --tag "w2-h$h-pdl$pdl" > $R/run-h$h-pdl$pdl.log 2>&1
    t "h=$h pdl=$pdl rc $?: $(grep -h 'per step\|step' $R/run-h$h-pdl$pdl.log | tail -1 | cut -c1-160)"
  done
done
pack
NCU="ncu --kernel-name-base demangled --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
for h in 8192 4096; do
  W2=(--data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --steps 12 --no-cupti --out $R/scratch)
  timeout 150 $NCU --kernel-name regex:'fused_update_bwd|fwd_hidden' --launch-skip 20 --launch-count 6 -o $R/ncu-h$h -f build/phase5_batched "${W2[@]}" > $R/ncu-h$h.out 2>&1
  t "ncu h=$h rc $?"
  ncu -i $R/ncu-h$h.ncu-rep --page details > $R/ncu-h$h.txt 2>&1
  ncu -i $R/ncu-h$h.ncu-rep --page raw --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,dram__throughput.avg.pct_of_peak_sustained_elapsed > $R/ncu-h$h.csv 2>&1
  pack
done
kill $WD 2>/dev/null; pack; t packed
