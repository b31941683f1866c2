#!/usr/bin/env bash
# GEMM step 8 with W by bulk copies (cp.async.bulk, four stages, one block an SM) and the gathered
# first layer: its GPU tests plain and under compute-sanitizer (memcheck, racecheck, synccheck); W2
# --validate with every forward on step 8 (--fp16-stream on) at h = 2,048, 1,000 and 3,000, batch 32 /
# 7 / 1; W2's step with step 8 (on) against without (off) at h = 1,024 ... 8,192, 2 rounds
# alternating; each kernel's own time (PDL off) at 2,048 ... 8,192 (auto); Nsight Compute on the
# step-8 kernels at h = 8,192.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/s3; rm -rf $R; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/s3.tmp.tgz --exclude='*.ncu-rep' --exclude=scratch $R 2>/dev/null; mv $OUT/s3.tmp.tgz $OUT/s3.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/s8; xz -dc .carry/bins/s8t_p5.xz > build/s8/phase5_batched; xz -dc .carry/bins/s8t_tests.xz > build/s8/gpu_tests
chmod +x build/s8/*
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist
P=build/s8/phase5_batched
timeout 120 build/s8/gpu_tests -tc='*step 8*,*step 6*,*steps 5, 6 and 7*' > $R/tests.log 2>&1; t "tests rc $?: $(tail -3 $R/tests.log | tr '\n' ' ')"
timeout 150 compute-sanitizer --tool memcheck build/s8/gpu_tests -tc='*step 8*' > $R/memcheck.log 2>&1; t "memcheck rc $?: $(grep -h 'ERROR SUMMARY' $R/memcheck.log | tail -1)"
timeout 150 compute-sanitizer --tool racecheck build/s8/gpu_tests -tc='*step 8*' > $R/racecheck.log 2>&1; t "racecheck rc $?: $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' $R/racecheck.log | tail -1)"
timeout 150 compute-sanitizer --tool synccheck build/s8/gpu_tests -tc='*step 8*' > $R/synccheck.log 2>&1; t "synccheck rc $?: $(grep -h 'ERROR SUMMARY' $R/synccheck.log | tail -1)"
pack
for L in 784,2048,2048,2048,10 784,1000,1000,1000,10 784,3000,3000,3000,10; do
  for b in 32 7 1; do
    timeout 60 $P --data $D --layers $L --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --fp16-stream on --batch $b --steps 30 --validate --no-cupti --out $R/scratch --tag v > $R/val-$L-b$b.log 2>&1
    t "validate $L b=$b rc $?: $(grep -c ' ok$' $R/val-$L-b$b.log) ok, $(grep -ci 'fail' $R/val-$L-b$b.log) fail"
  done
done
timeout 60 $P --data $D --layers 784,2048,2048,2048,10 --optimizer sgd --lr 0.003 --dropout 0.2 --precision fp16 --fp16-stream on --steps 30 --validate --no-cupti --out $R/scratch --tag v > $R/val-dropout.log 2>&1
t "validate 2048 dropout 0.2 rc $?: $(grep -c ' ok$' $R/val-dropout.log) ok, $(grep -ci 'fail' $R/val-dropout.log) fail"
pack
one() {  # h variant round
  local h=$1 v=$2 r=$3
  timeout 60 $P --data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --fp16-stream $v \
    --steps 600 --repeats 3 --no-cupti --out $R/scratch --tag "h$h-$v-r$r" > $R/h$h-$v-r$r.log 2>&1
  local rc=$?
  python3 - "$R/scratch/phase5_batched__h$h-$v-r$r.json" "$h $v r$r rc=$rc" <<'PY' | tee -a $R/ab.txt
import json,sys
try:
  d=json.load(open(sys.argv[1])); m=d['metrics']
  print(sys.argv[2], 'step_us %.2f'%(d['timing']['per_step_ms']['median']*1000), m.get('param_checksum'))
except Exception as e: print(sys.argv[2], 'no record', e)
PY
}
for r in 1 2; do
  for h in 1024 2048 4096 8192; do
    V="off on"; [ $r = 2 ] && V="on off"
    for v in $V; do one $h $v $r; done
  done
  pack
done
for h in 2048 4096 8192; do
  timeout 90 $P --data $D --layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --steps 1000 --pdl off --out $R/rec --tag "w2-h$h-pdloff" > $R/run-h$h-pdloff.log 2>&1
  t "kernels h=$h rc $?"
done
python3 - $R/rec > $R/kernels.txt <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/*.json')):
  d=json.load(open(f)); print(os.path.basename(f), 'step %.2f us'%(d['timing']['per_step_ms']['median']*1000))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:9]:
    print('  %9.2f us  x%-5d grid %-5d min %7.1f max %7.1f  %s'%(k['mean_ns']/1e3,k['calls'],k['grid'][0],k['min_ns']/1e3,k['max_ns']/1e3,k['name'][:110]))
PY
pack
NCU="ncu --kernel-name-base demangled --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
W2=(--data $D --layers "784,8192,8192,8192,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --steps 6 --no-cupti --out $R/scratch)
timeout 120 $NCU --kernel-name regex:'stream_rows' --launch-skip 8 --launch-count 4 -o $R/ncu-stream -f $P "${W2[@]}" --fp16-stream on > $R/ncu-stream.out 2>&1
t "ncu stream rc $?"
ncu -i $R/ncu-stream.ncu-rep --page details > $R/ncu-stream-h8192.txt 2>&1
kill $WD 2>/dev/null; pack; t packed
