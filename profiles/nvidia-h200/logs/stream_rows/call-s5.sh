#!/usr/bin/env bash
# The final build (7d4fc94: --fp16-stream auto from 1,024 weight rows, the GEMM plan listing the
# forwards under the fused backward): every GPU test case; W2 at h = 1,024 on the graph path with the
# new auto (--validate at batch 32 and 7; the step against --fp16-stream off); (W1 fp16 --validate dropped for device time.)
set -u
R=build/s5; rm -rf $R; mkdir -p $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/s5.tmp.tgz --exclude=scratch $R 2>/dev/null; mv $OUT/s5.tmp.tgz $OUT/s5.tgz; }
( exec >/dev/null 2>&1; while sleep 20; do pack; done ) & WD=$!
mkdir -p build/s5b; xz -dc .carry/bins/s8g_p5.xz > build/s5b/phase5_batched; xz -dc .carry/bins/s8g_tests.xz > build/s5b/gpu_tests; chmod +x build/s5b/*
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist; P=build/s5b/phase5_batched
timeout 150 build/s5b/gpu_tests > $R/tests.log 2>&1; t "all GPU tests rc $?: $(tail -3 $R/tests.log | tr '\n' ' ')"
pack
W=(--data $D --layers 784,1024,1024,1024,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16)
for b in 32 7; do
  timeout 60 $P "${W[@]}" --batch $b --steps 30 --validate --no-cupti --out $R/scratch --tag v > $R/val-1024-b$b.log 2>&1
  t "validate h=1024 b=$b rc $?: $(grep -c ' ok$' $R/val-1024-b$b.log) ok, $(grep -ci 'fail' $R/val-1024-b$b.log) fail"
done
grep -A6 "GEMM plan" $R/val-1024-b32.log | tee -a $R/steps.txt
for v in auto off; do
  timeout 60 $P "${W[@]}" --fp16-stream $v --steps 600 --repeats 3 --no-cupti --out $R/scratch --tag "h1024-$v" > $R/h1024-$v.log 2>&1
  python3 -c "import json;d=json.load(open('$R/scratch/phase5_batched__h1024-$v.json'));print('1024 $v step_us %.2f'%(d['timing']['per_step_ms']['median']*1000), d['metrics']['param_checksum'])" | tee -a $R/ab.txt
done
kill $WD 2>/dev/null; pack; t packed
