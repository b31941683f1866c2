#!/usr/bin/env bash
# Rung 5g with two teams of warps (the chain; the inner layers' updates beside it) against the build
# before (feeee3e's kernel): the grid GPU tests, memcheck / racecheck / synccheck on the short run, W2
# at h = 128 ... 8,192 with both builds alternating (2 rounds), --breakdown at 256 / 1,024 / 2,048.
# No build: both phase 5 binaries and the GPU tests carried xz'd from .carry/bins.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/tm; rm -rf $R; mkdir -p $R/rec $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/tm.tmp.tgz $R && mv $OUT/tm.tmp.tgz $OUT/tm.tgz; }
( exec >/dev/null 2>&1; sleep 500; pack ) & WD=$!
mkdir -p build
P=""; for b in old new tests; do xz -dc .carry/bins/$b.xz > build/$b & P="$P $!"; done; wait $P; chmod +x build/old build/new build/tests
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
timeout 120 build/tests -tc="mlp grid*" > $R/tests.log 2>&1; t "grid tests rc $?: $(tail -2 $R/tests.log | tr '\n' ' ')"
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 99 build/tests -tc="mlp grid: a short run*" > $R/$tool.log 2>&1
  t "$tool rc $?: $(tail -1 $R/$tool.log)"
done
D=(--data .carry/data/mnist)
w2() { echo --layers "784,$1,$1,$1,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16; }
for r in 1 2; do
  for h in 128 256 512 1024 2048 4096; do
    V="old new"; [ $r = 2 ] && V="new old"
    for v in $V; do
      timeout 60 build/$v "${D[@]}" $(w2 $h) --steps 3000 --repeats 3 --no-cupti --out $R/rec --launch grid --tag "w2-h$h-$v-r$r" > $R/w2-$h-$v-r$r.log 2>&1
      echo "h=$h $v r$r rc $?: $(grep -h 'epoch 0\|rror' $R/w2-$h-$v-r$r.log | tail -1 | cut -c1-120)" >> $R/runs.txt
    done
  done
  t "round $r"
done
for h in 256 1024 2048; do
  timeout 60 build/new "${D[@]}" $(w2 $h) --steps 3000 --repeats 1 --no-cupti --out $R/scratch --launch grid --breakdown --tag "w2-h$h-bd" > $R/w2-$h-bd.log 2>&1
  t "breakdown $h rc $?"; grep -A8 "breakdown (block" $R/w2-$h-bd.log
done
python3 - <<'PY' | tee $R/summary.txt
import json, glob, statistics, collections
d = collections.defaultdict(list)
for f in glob.glob("build/tm/rec/*.json"):
    r = json.load(open(f)); tag = r["config"]["tag"]
    h, v, rr = tag.split("-")[1], tag.split("-")[2], tag.split("-")[3]
    d[(int(h[1:]), v)].append((r["timing"]["per_step_ms"]["median"] * 1000, r["metrics"]["param_checksum"]))
for h in sorted({k[0] for k in d}):
    o = [x[0] for x in d[(h, "old")]]; n = [x[0] for x in d[(h, "new")]]
    print("h=%5d  old %s  new %s  us a step; median new/old %.3f; checksums old %s new %s" % (h, " ".join("%.2f" % x for x in o), " ".join("%.2f" % x for x in n), statistics.median(n) / statistics.median(o), sorted({x[1] for x in d[(h, "old")]}), sorted({x[1] for x in d[(h, "new")]})))
PY
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 500" 2>/dev/null
