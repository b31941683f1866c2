#!/usr/bin/env bash
# --l2-persist's window varied (a probe build: NB_L2_RATIO, NB_L2_MISS, NB_L2_BYTES override the
# window), W2's graph path at h = 2,048 (2 rounds) and 4,096 (1 round), 5,000 / 3,000 steps.
# $OUT/j32.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j32; rm -rf $R; mkdir -p $R/ab
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j32.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j32.tgz; }
mkdir -p build; xz -dc .carry/j/p5l2probe.xz > build/phase5_batched; chmod +x build/phase5_batched
t "p5 $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
W2="--optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --data .carry/data/mnist --no-cupti"
one() {  # one H ROUND NAME MODE [ENV...]
  local h=$1 r=$2 n=$3 m=$4; shift 4
  local steps=5000; [ $h = 4096 ] && steps=3000
  env "$@" timeout 60 build/phase5_batched --layers 784,$h,$h,$h,10 $W2 --steps $steps --l2-persist $m --out $R/ab --tag ab-h$h-$n-r$r > $R/ab/h$h-$n-r$r.log 2>&1
  t "h=$h $n r$r rc $? $(grep -m1 '^L2:' $R/ab/h$h-$n-r$r.log)"
}
for h in 2048 4096; do
  rounds="1 2"; [ $h = 4096 ] && rounds=1
  for r in $rounds; do
    one $h $r off off
    one $h $r r50s on NB_L2_RATIO=0.5
    one $h $r r50n on NB_L2_RATIO=0.5 NB_L2_MISS=normal
    one $h $r r82n on NB_L2_MISS=normal
    one $h $r w16 on NB_L2_BYTES=16000000 NB_L2_RATIO=1 NB_L2_MISS=normal
    one $h $r w8 on NB_L2_BYTES=8000000 NB_L2_RATIO=1 NB_L2_MISS=normal
  done
  pack
done
python3 - $R/ab > $R/ab/summary.txt <<'PY'
import json, glob, sys, statistics as S
rows = {}
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    j = json.load(open(f)); tag = j['config']['tag']; _, h, n, r = tag.split('-')
    rows.setdefault((int(h[1:]), n), []).append((1e3 * j['timing']['per_step_ms']['median'], j['metrics']['param_checksum']))
for (h, n), v in sorted(rows.items()):
    print(f"h={h:5d} {n:5s} us/step {' / '.join('%.2f' % x[0] for x in v)}  checksums {set(x[1] for x in v)}")
PY
cat $R/ab/summary.txt; pack; t done
