#!/usr/bin/env bash
# The final build (a88bbab's phase 5: step 7 with rows interleaved): compare_builds
# f620a8f (= 90f4663's phase 5) -> this build on the paths the change leaves alone; W1's step on the
# CUDA cores only (--fp32-gemm fma) against auto and tile at 2,048 / 4,096 / 8,192, 2 rounds.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-a88bbab}
R=build/fi; rm -rf $R; mkdir -p $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/fi.tmp.tgz $R 2>/dev/null; mv $OUT/fi.tmp.tgz $OUT/fi.tgz; }
( exec >/dev/null 2>&1; sleep 540; pack ) & WD=$!
mkdir -p build/before/build
xz -dc .carry/bins/p5_il.xz > build/phase5_batched & P1=$!
xz -dc .carry/bins/p5_A.xz > build/before/build/phase5_batched & P2=$!
wait $P1 $P2; chmod +x build/phase5_batched build/before/build/phase5_batched; touch build/phase5_batched
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1; cat $R/gpu.txt
pack
NO_BUILD=1 ONLY='^(w1-p5-own-fp32|w1-p5-own-fp16|w1-p5-pipelined|w1-p5-cluster32|w1-b(2048|8192)-p5-own-fp(32|16)|w2-h1024-p5-own-fp16|w2-h128-p5-cluster)$' \
  timeout 330 scripts/compare_builds.sh build/before $R/compare_builds.log > $R/compare_builds.out 2>&1
t "compare_builds rc $?"; cat $R/compare_builds.log
pack
D=(--data .carry/data/mnist --no-cupti)
for r in 1 2; do for b in 2048 4096 8192; do
  G="auto fma tile"; [ $r = 2 ] && G="tile fma auto"
  for g in $G; do
    timeout 60 build/phase5_batched "${D[@]}" --batch $b --epochs 3 --workload mlp_batch_sweep --fp32-gemm $g --out $R/scratch --tag "step-b$b-$g-r$r" > $R/step-b$b-$g-r$r.log 2>&1
    echo "b=$b $g r$r rc $?" >> $R/steps-fma.txt
  done
done; done
python3 - <<'PY' | tee $R/steps-summary.txt
import json, glob, statistics, collections
d = collections.defaultdict(list)
for f in glob.glob("build/fi/scratch/phase5_batched__step-*.json"):
    r = json.load(open(f)); _, b, g, rr = r["config"]["tag"].split("-")
    d[(int(b[1:]), g)].append((r["timing"]["per_step_ms"]["median"] * 1000, r["metrics"].get("param_checksum")))
print("W1 at batch B (784-128-64-10, fp32, Adam, dropout 0.2), 3 epochs, 2 rounds: us a step by --fp32-gemm (median of the rounds' medians)")
for b in sorted({k[0] for k in d}):
    print(f"batch {b:5d}: " + "  ".join(f"{g} {statistics.median([x[0] for x in d[(b, g)]]):.2f} ({' '.join('%.2f' % x[0] for x in d[(b, g)])})" for g in ("auto", "fma", "tile")))
PY
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 540" 2>/dev/null
