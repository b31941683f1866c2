#!/usr/bin/env bash
# W2's graph path at h = 2,048 (784-h-h-h-10, fp16, SGD 0.003, batch 32; 5,000 steps): the default plan
# against each of its plan options turned the other way, 2 rounds alternating, on the build of cecac83.
# $OUT/j35.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j35; rm -rf $R; mkdir -p $R/ab
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j35.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j35.tgz; }
mkdir -p build; xz -dc .carry/j/p5bg.xz > build/phase5_batched; chmod +x build/phase5_batched
t "p5 $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
H=${H:-2048}
W2="--layers 784,$H,$H,$H,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --data .carry/data/mnist --no-cupti --steps 5000"
declare -A V=(
  [auto]=""
  [regs]="--fp16-stream regs"
  [staged]="--fp16-stream staged"
  [streamoff]="--fp16-stream off"
  [global]="--handover global"
  [warps8]="--fused-warps 8"
  [lastkernel]="--last-pass kernel"
  [nextpass]="--next-forward pass"
  [pdloff]="--pdl off"
)
for r in 1 2; do for v in auto regs staged streamoff global warps8 lastkernel nextpass pdloff; do
  timeout 60 build/phase5_batched $W2 ${V[$v]} --out $R/ab --tag ab-h$H-$v-r$r > $R/ab/h$H-$v-r$r.log 2>&1; t "$v r$r rc $?"
done; done
python3 - $R/ab <<'PY' | tee $R/ab/summary.txt
import json, glob, sys, statistics as S
rows = {}
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    j = json.load(open(f)); _, h, v, r = j['config']['tag'].split('-')
    rows.setdefault(v, []).append((1e3 * j['timing']['per_step_ms']['median'], j['metrics']['param_checksum']))
for v, x in sorted(rows.items(), key=lambda kv: S.median(a for a, _ in kv[1])):
    print(f"{v:10s} {' / '.join('%.2f' % a for a, _ in x)} us a step  {sorted(set(c for _, c in x))}")
PY
pack; t done
