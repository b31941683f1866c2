#!/usr/bin/env bash
# The fp32 side branch's weight gradients in at most 64 slices (kSideMaxSlices): --validate where the
# cap binds (batch 8,192, 4,097); W1's step old (cecac83, .carry/j/p5bg.xz) against new, 3 rounds
# alternating, fp32 at 8,192 and 4,096; the paths it leaves alone (fp16 8,192, fp32 2,048 and 32, fp16
# 32): the same checksums; then bench_frameworks.sh's sweep stage at 4,096 and 8,192. $OUT/j40.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j40; rm -rf $R; mkdir -p $R/ab $R/val $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j40.XXXXXX); cp build/bench_frameworks/logs/*.log $R/rec/ 2>/dev/null; tar czf $f $R 2>/dev/null; mv $f $OUT/j40.tgz; }
mkdir -p build; xz -dc .carry/j/p5side.xz > build/phase5_batched; xz -dc .carry/j/p5bg.xz > build/p5_old; chmod +x build/phase5_batched build/p5_old
t "p5 $(md5sum < build/phase5_batched | cut -c1-12) old $(md5sum < build/p5_old | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
for b in 8192 4097; do
  timeout 120 build/phase5_batched --data .carry/data/mnist --batch $b --steps 6 --validate --no-cupti --out $R/val --tag val-b$b > $R/val/b$b.log 2>&1
  t "validate b=$b rc $? $(grep -m1 -io 'validat[^|]*' $R/val/b$b.log | head -1 | cut -c1-90)"
done
D="--data .carry/data/mnist --workload mlp_batch_sweep --epochs 2 --no-cupti"
ab() {  # tag batch precision
  for v in old new; do bin=build/phase5_batched; c=$NB_GIT_COMMIT; [ $v = old ] && bin=build/p5_old c=cecac83
    NB_GIT_COMMIT=$c timeout 60 $bin $D --batch $2 --precision $3 --out $R/ab --tag $1-$v > $R/ab/$1-$v.log 2>&1 || t "$1 $v rc $?"
  done
}
for r in 1 2 3; do ab b8192-fp32-r$r 8192 fp32; ab b4096-fp32-r$r 4096 fp32; done
ab same-b8192-fp16 8192 fp16; ab same-b2048-fp32 2048 fp32; ab same-b32-fp32 32 fp32; ab same-b32-fp16 32 fp16
python3 - $R/ab <<'PY' | tee $R/ab/summary.txt
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    j = json.load(open(f)); plan = [(p['product'], p.get('splits')) for p in j['metrics'].get('gemm_plan', []) if 'weight-gradient' in p['product']]
    print('%-24s %8.2f us a step  %s  %s' % (j['config']['tag'], 1e3 * j['timing']['per_step_ms']['median'], j['metrics']['param_checksum'], plan))
PY
pack
STAGES=sweep SWEEP_BATCHES="4096 8192" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 330 scripts/bench_frameworks.sh > $R/sweep.log 2>&1; t "sweep rc $?"
pack; grep -v "^\s*$" $R/sweep.log | cut -c1-170 | tail -24; t done
