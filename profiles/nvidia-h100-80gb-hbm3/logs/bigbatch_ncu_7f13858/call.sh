#!/usr/bin/env bash
# Main's build (.carry/j/p5.xz, NB_GIT_COMMIT). Nsight Compute (full set) on the first layer's two
# big products at batch 8,192 inside W1's step: the gathered forward on step 6 (fp16), step 5
# (--fp32-gemm no-digits) and step 10 (auto), the weight gradient on step 6; the fp16 step's kernels
# with PDL off (CUPTI); then the batch sweep at 2,048 and 4,096 with the twins. $OUT/j13.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j13; rm -rf $R; mkdir -p $R/ncu $R/k $R/rec $R/logs
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j13.XXXXXX); tar czf $f --exclude='*.ncu-rep' $R 2>/dev/null; mv $f $OUT/j13.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/j/p5.xz > build/phase5_batched; chmod +x build/phase5_batched; P=build/phase5_batched
D=.carry/data/mnist
t "p5 $(md5sum < $P | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
prof() {  # name, kernel regex, phase 5 arguments...
  local n=$1 k=$2; shift 2
  timeout 150 ncu --set full --import-source yes --clock-control none --kernel-name-base demangled -k "regex:$k" \
    --launch-skip 2 --launch-count 1 -f -o $R/ncu/$n $P --data $D --batch 8192 --steps 6 --no-cupti --out $R/ncu --tag ncu-$n "$@" > $R/ncu/$n.log 2>&1
  t "ncu $n rc $?"
  ncu -i $R/ncu/$n.ncu-rep --page details > $R/ncu/$n-details.txt 2>&1
  ncu -i $R/ncu/$n.ncu-rep --page raw --csv > $R/ncu/$n-raw.csv 2>&1
  ncu -i $R/ncu/$n.ncu-rep --page source --csv --print-source sass > $R/ncu/$n-sass.csv 2>&1; gzip -f $R/ncu/$n-sass.csv
  pack
}
prof f16-fwd 'f16mma_kernel<.*p5_fwd_gather' --precision fp16
prof f16-wgrad 'f16mma_kernel<.*p5_update.*GatherView' --precision fp16
prof x3-fwd 'tf32x3_kernel<.*p5_fwd_gather' --precision fp32 --fp32-gemm no-digits
prof i8-fwd 'i8digits_kernel<.*p5_fwd_gather' --precision fp32
timeout 60 $P --data $D --batch 8192 --precision fp16 --pdl off --steps 100 --out $R/k --tag k-fp16 > $R/k/fp16.log 2>&1; t "kernels fp16 rc $?"
python3 - $R/k > $R/k/kernels.txt <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], 'step %.2f us' % (d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:14]:
    print('  %8.2f us/call  %4d calls grid %5d  %s' % (k['mean_ns']/1e3, k['calls'], k['grid'][0], k['name'][:110]))
PY
cat $R/k/kernels.txt; pack
SWEEP_TWINS="torch jax" STAGES=sweep SWEEP_BATCHES="2048 4096" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 330 scripts/bench_frameworks.sh > $R/sweep.log 2>&1; t "sweep rc $?"
cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
grep -v "^\s*$" $R/sweep.log | cut -c1-170 | tail -24
kill $WD 2>/dev/null; pack; t done
