#!/usr/bin/env bash
# The grid kernel (5g) with 16-byte fragment reads in its product phases, against main's phase 5 at
# 221cbbf (8-byte reads; 5g otherwise the same): --validate with --launch grid at widths off the tiles
# and batch 1 / 7 / 32, memcheck, W2's step at h = 256 / 512 / 1,024 / 2,048 (2,000 steps, 2 rounds
# alternating; the checksums differ: the products' k-slots are grouped otherwise), --breakdown at 1,024.
# Carry .carry/data, .carry/bins/g16_p5.xz (the new build), ra_p5.xz (221cbbf). Results: $OUT/g16.tgz
set -u
: "${NB_GIT_COMMIT:?name the commit of the carried build}"; export NB_GIT_COMMIT
R=build/g16; rm -rf $R; mkdir -p $R/ab $R/val $R/scratch $R/bd
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .g16.XXXXXX); tar czf $f --exclude=scratch $R 2>/dev/null; mv $f $OUT/g16.tgz; }
mkdir -p build/g16b
xz -dc .carry/bins/g16_p5.xz > build/g16b/new & P1=$!
xz -dc .carry/bins/ra_p5.xz > build/g16b/old & P2=$!
wait $P1 $P2; chmod +x build/g16b/*
D=.carry/data/mnist
W2() { echo --layers 784,$1,$1,$1,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --launch grid; }
t "$(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)"
for h in 100 300 1000 2048; do for b in 1 7 32; do
  timeout 100 build/g16b/new --data $D $(W2 $h) --batch $b --steps 4 --validate --validate-steps 2 --no-cupti \
    --out $R/scratch --tag val > $R/val/h$h-b$b.log 2>&1
  echo "validate h=$h b=$b rc $?: $(grep -c ' ok$' $R/val/h$h-b$b.log) ok, $(grep -ci 'fail' $R/val/h$h-b$b.log) fail" | tee -a $R/val/summary.txt
done; done
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 build/g16b/new --data $D $(W2 1000) --steps 20 --no-cupti \
  --out $R/scratch --tag memcheck > $R/val/memcheck.log 2>&1; t "memcheck rc $?: $(grep -c 'ERROR SUMMARY: 0 errors' $R/val/memcheck.log) clean"
pack
for r in 1 2; do for h in 256 512 1024 2048; do
  M="old new"; [ $r = 2 ] && M="new old"
  for v in $M; do
    timeout 90 build/g16b/$v --data $D $(W2 $h) --steps 2000 --no-cupti --out $R/ab --tag ab-h$h-$v-r$r > $R/ab/h$h-$v-r$r.log 2>&1
    echo "r=$r h=$h $v rc $?" >> $R/ab/rc.txt
  done
done; done
python3 - $R/ab <<'PY' | tee $R/ab/summary.txt
import json, glob, collections, statistics, sys
d = collections.defaultdict(list); ck = collections.defaultdict(set)
for f in glob.glob(sys.argv[1] + "/*__ab-*.json"):
    r = json.load(open(f)); _, h, v, _ = f.split("__")[-1][:-5].split("-")
    d[(int(h[1:]), v)].append(r["timing"]["per_step_ms"]["median"] * 1000); ck[(int(h[1:]), v)].add(r["metrics"]["param_checksum"])
for h in sorted({k[0] for k in d}):
    o, n = statistics.median(d[(h, "old")]), statistics.median(d[(h, "new")])
    print("W2 grid h=%5d  old (221cbbf) %8.2f us %s  new %8.2f us %s  old/new x%.3f" % (h, o, ["%.2f" % x for x in d[(h, "old")]], n, ["%.2f" % x for x in d[(h, "new")]], o / n))
PY
t ab; pack
for v in old new; do
  timeout 90 build/g16b/$v --data $D $(W2 1024) --steps 2000 --breakdown --no-cupti --out $R/bd --tag bd-$v > $R/bd/h1024-$v.log 2>&1
  echo "breakdown $v rc $?" >> $R/bd/rc.txt
done
t breakdown; pack
cat $R/steps.txt $R/val/summary.txt $R/ab/summary.txt; grep -h -A12 "breakdown\|part of the step" $R/bd/h1024-*.log | head -40
