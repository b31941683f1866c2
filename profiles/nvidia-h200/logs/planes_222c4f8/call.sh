#!/usr/bin/env bash
# (phase 5 and the GPU tests built here with nvcc 13.0 for sm_90, carried xz'd; "old" = phase 5 built
# at 60a9493, the batch sweep's records' build, the same step-5 code as this one's parent's): step 5
# reading the first layer's W (forward) and dZ (weight gradient) as TF32 planes that their producers
# write. PART=1: every GPU test case; W1 fp32 checksums at 1,024 / 2,048 / 8,192 against the ones
# logs/f16bytes_5345e1d/call.sh checked (the products' bits must not change); the GEMM benchmark
# (scripts/bench_gemm.sh STAGES=gemm) at every batch; validate_sweep.sh on the fp32 paths that use
# step 5 (default, --fp32-gemm tf32x3, --backward paired).
# PART=2 (the same machine, warm: build/phase5_batched left by PART=1): old against new, alternating,
# 3 rounds, --deterministic, W1 fp32 at 1,024 ... 8,192; scripts/compare_builds.sh (NO_BUILD=1)
# against the old binary on W1 at batch 32 and W2's paths; the batch sweep at 2,048, 1,024, 4,096
# with the JAX twin, at 8,192 with JAX and PyTorch's compiled graph (also with TF32 allowed).
# (Two calls: the carried binaries and data together exceed what one call carries.)
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
PART=${PART:-1}
R=build/planes$PART; rm -rf $R; mkdir -p $R/rec $R/ab
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/planes$PART.tmp.tgz $R && mv $OUT/planes$PART.tmp.tgz $OUT/planes$PART.tgz; }
( exec >/dev/null 2>&1; while sleep 60; do pack; done ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
mkdir -p build/tests
[ -x build/phase5_batched ] && [ -f build/.planes_unpacked ] || {
  xz -dc .carry/bins/p5_new.xz > build/phase5_batched; chmod +x build/phase5_batched; touch build/.planes_unpacked; }
D=(--data .carry/data/mnist)
sweep() {  # sweep NAME BATCHES TWINS TIMEOUT
  STAGES=sweep SWEEP_BATCHES="$2" SWEEP_TWINS="$3" NO_BUILD=1 RECORDS_DIR=$R/rec timeout "$4" scripts/bench_frameworks.sh > $R/sweep-$1.log 2>&1
  t "sweep $1 rc $?"; mkdir -p $R/logs-$1; cp build/bench_frameworks/logs/*.log $R/logs-$1/ 2>/dev/null; rm -rf build/bench_frameworks/logs; pack
}
if [ "$PART" = 1 ]; then
  xz -dc .carry/bins/gpu_tests.xz > build/tests/gpu_tests; chmod +x build/tests/gpu_tests
  timeout 200 build/tests/gpu_tests > $R/gpu_tests.log 2>&1; t "gpu_tests rc $?: $(tail -n 4 $R/gpu_tests.log | tr '\n' ' ')"
  for cfg in "b1024|--batch 1024 --epochs 2|fnv1a64:22f4affcfec8fdca" "b2048|--batch 2048 --epochs 2|fnv1a64:4a9bd339782f521d" \
             "b8192|--batch 8192 --epochs 2|fnv1a64:7bb118c7dfc6c198"; do
    IFS='|' read -r name args want <<<"$cfg"
    timeout 30 build/phase5_batched "${D[@]}" $args --deterministic --no-cupti --workload mlp_batch_sweep --out $R/ab --tag f32-$name > $R/ab/f32-$name.log 2>&1
    got=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['metrics']['param_checksum'])" $R/ab/phase5_batched__f32-$name.json 2>/dev/null)
    t "fp32 $name checksum $got (before: $want) $([ "$got" = "$want" ] && echo same || echo DIFFERENT)"
  done
  grep -h "GEMM plan\|forward 0\|weight-gradient 0" $R/ab/f32-b8192.log | head -5 >> $R/steps.txt
  STAGES=gemm NO_BUILD=1 RECORDS_DIR=$R/rec timeout 200 scripts/bench_gemm.sh > $R/gemm.log 2>&1; t "gemm rc $?"
  cp -r build/bench_gemm/logs $R/logs-gemm 2>/dev/null
  grep -h "L0 " $R/logs-gemm/*b8192.log 2>/dev/null | tee -a $R/steps.txt
  pack
  NO_BUILD=1 ONLY='phase5_batched --precision fp32( --fp32-gemm tf32x3| --backward paired)?$' timeout 120 bash scripts/validate_sweep.sh $R/validate_sweep.log > $R/validate_sweep.out 2>&1
  t "validate_sweep rc $?: $(tail -n 4 $R/validate_sweep.out | tr '\n' ' ')"
  pack
else
  xz -dc .carry/old/p5_old.xz > build/p5_old; chmod +x build/p5_old
  for round in 1 2 3; do
    for cfg in "f32-b1024|--batch 1024 --epochs 3" "f32-b2048|--batch 2048 --epochs 5" \
               "f32-b4096|--batch 4096 --epochs 10" "f32-b8192|--batch 8192 --epochs 20"; do
      IFS='|' read -r name args <<<"$cfg"
      V="old new"; [ $((round % 2)) = 0 ] && V="new old"
      for v in $V; do
        if [ $v = old ]; then B=build/p5_old; else B=build/phase5_batched; fi
        timeout 40 $B "${D[@]}" $args --deterministic --no-cupti --workload mlp_batch_sweep \
          --out $R/ab --tag ab-$name-$v-r$round > $R/ab/$name-$v-r$round.log 2>&1
      done
    done
  done
  python3 - $R <<'PY' | tee -a $R/steps.txt
import json, glob, collections, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(list)); ck = collections.defaultdict(lambda: collections.defaultdict(set))
for f in sorted(glob.glob(sys.argv[1] + "/ab/*__ab-*.json")):
    r = json.load(open(f)); name, v, _ = f.split("__ab-")[-1][:-5].rsplit("-", 2)
    d[name][v].append(r["timing"]["per_step_ms"]["median"] * 1000); ck[name][v].add(r["metrics"]["param_checksum"])
for n in d:
    m = {v: statistics.median(x) for v, x in d[n].items()}
    print("%-10s old %8.2f  new %8.2f us a step (median of rounds)  old/new x%.3f  checksums old == new: %s  stable: %s"
          % (n, m["old"], m["new"], m["old"] / m["new"], ck[n]["old"] == ck[n]["new"], all(len(s) == 1 for s in ck[n].values())))
PY
  pack
  mkdir -p build/before/build && cp build/p5_old build/before/build/phase5_batched
  NO_BUILD=1 ONLY='^(w1-p5-own-fp32|w1-p5-own-fp16|w1-p5-pipelined|w1-p5-cluster32|w2-h128-p5-cluster|w2-h128-p5-own-fp16|w2-h1024-p5-own-fp16|w2-h128-p5-own-fp32|w2-h1024-p5-own-fp32)$' \
    timeout 200 scripts/compare_builds.sh build/before $R/compare_builds.log > $R/compare_builds.out 2>&1
  t "compare_builds rc $?"; cat $R/compare_builds.log >> $R/steps.txt
  pack
  sweep a "2048 1024 4096" "jax" 200
  sweep c "8192" "torch torch-tf32 jax" 140
fi
pack; t packed; kill $WD 2>/dev/null
cat $R/steps.txt | tail -40
# The A/B that was run instead of PART=2 (the change was dropped after PART=1's GEMM benchmark), on
# the same warm machine (ab/summary.txt):
#   for round in 1 2 3; for cfg in "b8192|--batch 8192 --epochs 20" "b2048|--batch 2048 --epochs 5";
#   old and new alternating (old first in odd rounds): build/p5_old or build/phase5_batched
#   --data .carry/data/mnist $args --deterministic --no-cupti --workload mlp_batch_sweep
# validate_sweep.sh hit its 120 s timeout after 8 of the 12 shapes (validate_sweep_partial.log: all ok).
