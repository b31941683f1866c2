#!/usr/bin/env bash
# W2's first-layer fused pass at four blocks an SM (bd52c81, branch w2-first-pass) against main's
# (221cbbf's phase 5: the same code but this pass): the same arithmetic in the same order, so the
# same checksums; W2's step at h = 2,048 / 4,096 / 8,192, 2 rounds alternating (ab/summary.txt);
# the pass's own time with PDL off (kernels.txt); --validate at widths off the tiles; memcheck.
# Carry .carry/data, .carry/bins/w2f_p5.xz (bd52c81), ra_p5.xz (221cbbf). Results: $OUT/w2f.tgz
set -u
: "${NB_GIT_COMMIT:?name the commit of the carried build}"; export NB_GIT_COMMIT
R=build/w2f; rm -rf $R; mkdir -p $R/ab $R/val $R/scratch $R/k
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .w2f.XXXXXX); tar czf $f --exclude=scratch $R 2>/dev/null; mv $f $OUT/w2f.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/w2b
xz -dc .carry/bins/w2f_p5.xz > build/w2b/new & P1=$!
xz -dc .carry/bins/ra_p5.xz > build/w2b/old & P2=$!
wait $P1 $P2; chmod +x build/w2b/*
D=.carry/data/mnist
W2() { echo --layers 784,$1,$1,$1,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16; }
t "$(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)"
for h in 1000 3000 2048; do for b in 1 7 32; do
  timeout 100 build/w2b/new --data $D $(W2 $h) --batch $b --steps 4 --validate --validate-steps 2 --no-cupti \
    --out $R/scratch --tag val > $R/val/h$h-b$b.log 2>&1
  echo "validate h=$h b=$b rc $?: $(grep -c ' ok$' $R/val/h$h-b$b.log) ok, $(grep -ci 'fail' $R/val/h$h-b$b.log) fail" | tee -a $R/val/summary.txt
done; done
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 build/w2b/new --data $D $(W2 1000) --steps 20 --no-cupti \
  --out $R/scratch --tag memcheck > $R/val/memcheck.log 2>&1; t "memcheck rc $?: $(grep -c 'ERROR SUMMARY: 0 errors' $R/val/memcheck.log) clean"
pack
for r in 1 2; do for h in 2048 4096 8192; do
  M="old new"; [ $r = 2 ] && M="new old"
  for v in $M; do
    timeout 90 build/w2b/$v --data $D $(W2 $h) --steps 2000 --deterministic --no-cupti --out $R/ab --tag ab-h$h-$v-r$r > $R/ab/h$h-$v-r$r.log 2>&1
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
    print("W2 h=%5d  old (221cbbf) %8.2f us %s  new (bd52c81) %8.2f us %s  old/new x%.3f  checksums equal: %s" % (h, o, ["%.2f" % x for x in d[(h, "old")]], n, ["%.2f" % x for x in d[(h, "new")]], o / n, ck[(h, "old")] == ck[(h, "new")]))
PY
t ab; pack
for h in 2048 4096 8192; do for v in old new; do
  timeout 90 build/w2b/$v --data $D $(W2 $h) --steps 300 --pdl off --out $R/k --tag k-h$h-$v > $R/k/h$h-$v.log 2>&1
done; done
python3 - $R/k <<'PY' | tee $R/kernels.txt
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + "/*__k-*.json")):
    r = json.load(open(f))
    for k in r["kernels"]:
        if "p5_fused_update_first" in k["name"]:
            print("%-40s grid %4d  mean %7.2f us (%d calls)" % (f.split("__")[-1][:-5], k["grid"][0], k["mean_ns"] / 1000, k["calls"]))
PY
kill $WD 2>/dev/null; wait $WD 2>/dev/null; pack
cat $R/steps.txt $R/val/summary.txt $R/ab/summary.txt $R/kernels.txt
