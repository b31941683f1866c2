#!/usr/bin/env bash
# W2's graph step kernel by kernel (CUPTI, --pdl off, 400 steps) at h = 2,048 / 4,096 / 8,192 on the
# default build (.carry/e/p5.xz, NB_GIT_COMMIT), then Nsight Compute on step 8's staged kernels (the
# gathered first layer and the two hidden forwards) at 4,096 and 8,192. Results: $OUT/e3.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/e3; rm -rf $R; mkdir -p $R/k $R/ncu
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .e3.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/e3.tgz; }
( exec >/dev/null 2>&1; while sleep 20; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/e/p5.xz > build/phase5_batched; chmod +x build/phase5_batched
t "build $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --dropout 0 --precision fp16"
for h in 2048 4096 8192; do
  timeout 60 build/phase5_batched --data $D $W --layers 784,$h,$h,$h,10 --pdl off --steps 400 --out $R/k --tag k-h$h > $R/k/h$h.log 2>&1; t "kernels h=$h rc $?"
done
python3 - $R <<'PY' > $R/kernels.txt
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/k/*__k-h*.json')):
  d=json.load(open(f)); print('#', f.split('__')[-1], 'step %.2f us' % (d['timing']['per_step_ms']['median']*1e3))
  ks=d.get('kernels') or []
  for k in sorted(ks, key=lambda k: -k.get('total_ns',0))[:12]:
    print('  %10.2f us x%-6s grid %-14s %s' % (k.get('mean_ns',0)/1e3, k.get('calls'), k.get('grid'), k.get('name','')[:110]))
PY
cat $R/kernels.txt; pack
for h in 4096 8192; do
  timeout 120 ncu --kernel-name regex:gemm_stream_rows_staged_kernel --launch-skip 30 --launch-count 3 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    build/phase5_batched --data $D $W --layers 784,$h,$h,$h,10 --steps 20 --no-cupti --out $R/ncu --tag ncu-h$h > $R/ncu/staged-h$h.txt 2>&1; t "ncu h=$h rc $?"
done
kill $WD 2>/dev/null; pack; t done
