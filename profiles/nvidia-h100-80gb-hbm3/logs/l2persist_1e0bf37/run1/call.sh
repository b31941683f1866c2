#!/usr/bin/env bash
# --l2-persist, A/B on W2's graph path (784-h-h-h-10, fp16, SGD 0.003, batch 32): h = 2,048 / 1,024 /
# 4,096 / 8,192, off and on alternating, 2 rounds, 5,000 steps (2,000 at 8,192); then
# bench_frameworks.sh stage w2 at h = 2,048 (phase 5 own with auto's choice, grid, PyTorch
# compiled-graph, JAX jit-epoch and jit-run on the same init and order). $OUT/j31.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j31; rm -rf $R; mkdir -p $R/ab $R/rec $R/logs
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j31.XXXXXX); cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null; tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/j31.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/j/p5l2.xz > build/phase5_batched; chmod +x build/phase5_batched
t "p5 $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
W2="--optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --data .carry/data/mnist --no-cupti"
for h in 2048 1024 4096 8192; do
  steps=5000; [ $h = 8192 ] && steps=2000
  for r in 1 2; do for m in off on; do
    timeout 90 build/phase5_batched --layers 784,$h,$h,$h,10 $W2 --steps $steps --l2-persist $m --out $R/ab --tag ab-h$h-$m-r$r > $R/ab/h$h-$m-r$r.log 2>&1
    t "h=$h $m r$r rc $? $(grep -m1 '^L2:' $R/ab/h$h-$m-r$r.log)"
  done; done
  pack
done
python3 - $R/ab > $R/ab/summary.txt <<'PY'
import json, glob, sys, statistics as S
rows = {}
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    j = json.load(open(f)); tag = j['config']['tag']; _, h, m, r = tag.split('-')
    us = 1e3 * j['timing']['per_step_ms']['median']
    rows.setdefault((int(h[1:]), m), []).append((us, j['metrics']['param_checksum'], j['metrics'].get('l2_persist')))
for (h, m), v in sorted(rows.items()):
    print(f"h={h:5d} {m:3s} us/step {' / '.join('%.2f' % x[0] for x in v)}  median {S.median(x[0] for x in v):.2f}  checksums {set(x[1] for x in v)}  l2 {v[0][2]}")
PY
cat $R/ab/summary.txt; pack
STAGES=w2 W2_HS=2048 NO_BUILD=1 RECORDS_DIR=$R/rec timeout 240 scripts/bench_frameworks.sh > $R/w2.log 2>&1; t "w2 h=2048 rc $?"
kill $WD 2>/dev/null; pack; grep -v "^\s*$" $R/w2.log | cut -c1-170 | tail -12; t done
