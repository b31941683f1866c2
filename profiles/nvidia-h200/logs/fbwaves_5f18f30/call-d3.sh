#!/usr/bin/env bash
# The fused backward pass on mma.sync with dW in registers (v2): its GPU tests (test_mlp_fused_backward)
# plain and under compute-sanitizer memcheck / racecheck / synccheck; W2 --validate at awkward widths on
# the fused path; then v2 at h = 2,048 / 4,096 / 8,192 with the row-split variants (NB_FB_WAVES).
# The binary stays in build/v2/ for the next call (the A/B against the old pass).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-probe}
R=build/d3; rm -rf $R; mkdir -p $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/d3.tmp.tgz --exclude=scratch $R 2>/dev/null; mv $OUT/d3.tmp.tgz $OUT/d3.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/v2 build/tests; xz -dc .carry/bins/p5_v2.xz > build/v2/phase5_batched; xz -dc .carry/bins/fb_tests.xz > build/tests/fb_tests
chmod +x build/v2/phase5_batched build/tests/fb_tests
mkdir -p build/data; cp -r .carry/data/mnist build/data/
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 120 build/tests/fb_tests > $R/tests.log 2>&1; t "tests rc $?: $(tail -2 $R/tests.log | tr '\n' ' ')"
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 99 build/tests/fb_tests > $R/san-$tool.log 2>&1; t "$tool rc $?: $(tail -1 $R/san-$tool.log)"
done
pack
D=build/data/mnist
for L in "784,1000,1000,1000,10" "784,296,104,296,10" "784,2048,2048,2048,10"; do
  for b in 32 7 1; do
    timeout 60 build/v2/phase5_batched --data $D --layers $L --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --batch $b --steps 50 --validate --no-cupti --out $R/scratch --tag v > $R/val-$L-b$b.log 2>&1
    t "validate $L b=$b rc $?: $(grep -i 'valid' $R/val-$L-b$b.log | tail -1 | cut -c1-150)"
  done
done
timeout 60 build/v2/phase5_batched --data $D --layers 784,1000,1000,1000,10 --optimizer adam --lr 0.001 --dropout 0.2 --precision fp16 --backward fused --steps 50 --validate --no-cupti --out $R/scratch --tag v > $R/val-adam.log 2>&1
t "validate adam fused 1000 rc $?: $(grep -i 'valid' $R/val-adam.log | tail -1 | cut -c1-150)"
pack
one() {  # h variant
  local h=$1 v=$2 envs=()
  case $v in v2) ;; w*) envs=(NB_FB_WAVES=${v#w}) ;; esac
  env "${envs[@]}" timeout 60 build/v2/phase5_batched --data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 \
    --steps 600 --repeats 3 --no-cupti --out $R/scratch --tag "h$h-$v" > $R/h$h-$v.log 2>&1
  local rc=$?
  python3 - "$R/scratch/phase5_batched__h$h-$v.json" "$h $v rc=$rc" <<'PY' | tee -a $R/ab.txt
import json,sys
try:
  d=json.load(open(sys.argv[1])); m=d['metrics']
  print(sys.argv[2], 'step_us %.2f'%(d['timing']['per_step_ms']['median']*1000), m.get('param_checksum'))
except Exception as e: print(sys.argv[2], 'no record', e)
PY
}
for h in 2048 4096 8192; do for v in v2 w1 w2 w3; do one $h $v; done; done
pack
# Nsight Compute on v2's pass at h = 8,192 and 4,096 (the same sections as before)
NCU="ncu --kernel-name-base demangled --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,smsp__inst_executed.sum"
for h in 8192 4096; do
  timeout 100 $NCU --kernel-name regex:'fused_update_bwd' --launch-skip 12 --launch-count 3 -o $R/ncu-h$h -f build/v2/phase5_batched --data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --steps 8 --no-cupti --out $R/scratch > $R/ncu-h$h.out 2>&1
  t "ncu h=$h rc $?"; ncu -i $R/ncu-h$h.ncu-rep --page details > $R/ncu-h$h.txt 2>&1; rm -f $R/ncu-h$h.ncu-rep
done
kill $WD 2>/dev/null; pack; t packed
