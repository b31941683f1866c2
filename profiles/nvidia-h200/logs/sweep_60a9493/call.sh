#!/usr/bin/env bash
# (no build: build/phase5_batched built here with nvcc 13.0 for sm_90, carried xz'd) PART=1: first
# an A/B against the previous build (build/p5_old, 5345e1d: the fp16 plan without the gathered
# weight gradient on step 6, step 5's weight gradient in 16 x 32 warp tiles), 3 rounds alternating,
# --deterministic: W1 fp16 at 2,048, 4,096, 8,192 and fp32 at 8,192 (its checksums must match); the
# batch sweep of W1's model at 2,048, 64, 4,096, 512, 128, 256 (every phase-5 path) with the JAX twin,
# and at 8,192 with JAX and PyTorch's compiled graph (also with TF32 allowed); PART=2: the sweep at 32
# and 1,024 with JAX, the GEMM benchmark (scripts/bench_gemm.sh STAGES=gemm) at every batch, and
# validate_sweep.sh on phase 5's fp16 plan.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
PART=${PART:-1}
R=build/sweep$PART; rm -rf $R; mkdir -p $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/sweep$PART.tmp.tgz $R && mv $OUT/sweep$PART.tmp.tgz $OUT/sweep$PART.tgz; }
( exec >/dev/null 2>&1; while sleep 60; do pack; done ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
mkdir -p build; [ -x build/phase5_batched ] || { xz -dc .carry/bins/p5_new.xz > build/phase5_batched; chmod +x build/phase5_batched; }
sweep() {  # sweep NAME BATCHES TWINS TIMEOUT
  STAGES=sweep SWEEP_BATCHES="$2" SWEEP_TWINS="$3" NO_BUILD=1 RECORDS_DIR=$R/rec timeout "$4" scripts/bench_frameworks.sh > $R/sweep-$1.log 2>&1
  t "sweep $1 rc $?"; mkdir -p $R/logs-$1; cp build/bench_frameworks/logs/*.log $R/logs-$1/ 2>/dev/null; rm -rf build/bench_frameworks/logs; pack
}
if [ "$PART" = 1 ]; then
  xz -dc .carry/old/p5_old.xz > build/p5_old; chmod +x build/p5_old; mkdir -p $R/ab
  for round in 1 2 3; do
    for cfg in "f16-b2048|--precision fp16 --batch 2048 --epochs 5" "f16-b4096|--precision fp16 --batch 4096 --epochs 10" \
               "f16-b8192|--precision fp16 --batch 8192 --epochs 20" "f32-b8192|--batch 8192 --epochs 20"; do
      IFS='|' read -r name args <<<"$cfg"
      V="old new"; [ $((round % 2)) = 0 ] && V="new old"
      for v in $V; do
        if [ $v = old ]; then B=build/p5_old; else B=build/phase5_batched; fi
        timeout 40 $B --data .carry/data/mnist $args --deterministic --no-cupti --workload mlp_batch_sweep \
          --out $R/ab --tag ab-$name-$v-r$round > $R/ab/$name-$v-r$round.log 2>&1
      done
    done
  done
  python3 - $R <<'PY' | tee -a $R/steps.txt
import json, glob, collections, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(list)); ck = collections.defaultdict(lambda: collections.defaultdict(set))
for f in sorted(glob.glob(sys.argv[1] + "/ab/*.json")):
    r = json.load(open(f)); name, v, _ = f.split("__ab-")[-1][:-5].rsplit("-", 2)
    d[name][v].append(r["timing"]["per_step_ms"]["median"] * 1000); ck[name][v].add(r["metrics"]["param_checksum"])
for n in d:
    m = {v: statistics.median(x) for v, x in d[n].items()}
    print("%-10s old %8.2f  new %8.2f us a step (median of rounds)  old/new x%.3f  checksums old == new: %s  stable: %s"
          % (n, m["old"], m["new"], m["old"] / m["new"], ck[n]["old"] == ck[n]["new"], all(len(s) == 1 for s in ck[n].values())))
PY
  pack
  sweep a "2048 64 4096 512 128 256" "jax" 290
  sweep c "8192" "torch torch-tf32 jax" 130
else
  sweep b "32 1024" "jax" 110
  STAGES=gemm NO_BUILD=1 RECORDS_DIR=$R/rec timeout 200 scripts/bench_gemm.sh > $R/gemm.log 2>&1; t "gemm rc $?"
  cp -r build/bench_gemm/logs $R/logs-gemm 2>/dev/null; pack
  NO_BUILD=1 ONLY='phase5_batched --precision fp16$' timeout 100 bash scripts/validate_sweep.sh $R/validate_sweep.log > $R/validate_sweep.out 2>&1
  t "validate_sweep rc $?: $(tail -n 3 $R/validate_sweep.out | tr '\n' ' ')"
fi
pack; t packed; kill $WD 2>/dev/null
cat $R/sweep-*.log | grep -v "^\s*$" | cut -c1-150 | tail -40
