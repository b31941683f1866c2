#!/usr/bin/env bash
# call 5 (no build: build/phase5_batched = 693098b plus an experiment switch, NB_TC64_MUL_MANY / NB_TC64_MUL_FEW,
# that multiplies the K-slice count of GEMM steps 5-6, past one wave, for products of >= 32 / < 32 tiles,
# at most 16 slices of 4 k-tiles): W1's step at batch 2,048, 4,096 and 8,192 with each factor, twice.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call5; rm -rf $R; mkdir -p $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call5.tmp.tgz $R && mv $OUT/call5.tmp.tgz $OUT/call5.tgz; }
( exec >/dev/null 2>&1; sleep 200; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
P5=build/phase5_batched; D=(--data .carry/data/mnist)
for rep in 1 2; do
  for b in 2048 4096 8192; do
    for v in 1,1 2,1 1,2 2,2 3,1 3,2; do
      m=${v%,*}; f=${v#*,}
      NB_TC64_MUL_MANY=$m NB_TC64_MUL_FEW=$f timeout 40 $P5 "${D[@]}" --batch $b --epochs 2 --workload mlp_batch_sweep --no-cupti --out $R/rec --tag b$b-m$m-f$f-r$rep > $R/b$b-m$m-f$f-r$rep.log 2>&1
      t "b$b many*$m few*$f rep $rep rc $?"
    done
  done
done
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 200" 2>/dev/null
python3 - <<'PY'
import json, glob, collections
d = collections.defaultdict(list)
for f in glob.glob("build/call5/rec/*.json"):
    r = json.load(open(f)); tag = r["config"]["tag"] if "tag" in r.get("config", {}) else f
    key = tag.rsplit("-r", 1)[0]; d[key].append(r["timing"]["per_step_ms"]["median"] * 1000)
for k in sorted(d): print("%-24s %s" % (k, " ".join("%.2f" % v for v in d[k])))
PY
