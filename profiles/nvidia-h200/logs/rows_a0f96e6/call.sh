#!/usr/bin/env bash
# call 3 (phase 5 built here with nvcc 13.0 for sm_90, carried gzipped: new = the step-5 row ids a
# stage ahead and the split's rounding in two integer instructions, on top of the gathered bytes as
# integers and --backward auto branched; base = 465b2a2, the last batch-sweep records' build):
# (1) every GPU doctest (built here); validate_sweep on phase 5's default fp32 and fp16 paths;
# (2) the GEMM benchmark at 2,048 and 8,192 (new);
# (3) A/B timing base vs new, W1 at every batch 32 ... 8,192, 2 epochs, --no-cupti;
# (4) scripts/compare_builds.sh (NO_BUILD=1, base's binary) on W1 at batch 32 and W2's paths.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call3; rm -rf $R; mkdir -p $R/rec $R/ab
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call3.tmp.tgz $R && mv $OUT/call3.tmp.tgz $OUT/call3.tgz; }
( exec >/dev/null 2>&1; sleep 560; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
mkdir -p build build/before/build
for b in base new; do gunzip -c .carry/bins/p5_$b.gz > build/p5_$b; chmod +x build/p5_$b; done
cp build/p5_new build/phase5_batched && touch build/phase5_batched
cp build/p5_base build/before/build/phase5_batched
( nice -n 10 make -j14 DEPS_PREFIX=.carry/deps build/tests/gpu_tests > $R/make_gpu_tests.log 2>&1; echo "rc $?" >> $R/make_gpu_tests.log ) & MK=$!
D=(--data .carry/data/mnist)
for b in 2048 8192; do
  timeout 60 build/p5_new "${D[@]}" --batch $b --gemm-compare --no-cupti --out $R/rec --tag gemm-b$b > $R/gemm-b$b.log 2>&1
  t "gemm b$b rc $?"
done
NO_BUILD=1 ONLY='phase5_batched --precision (fp32|fp16)$' timeout 200 bash scripts/validate_sweep.sh $R/validate_sweep.log > $R/validate_sweep.out 2>&1
t "validate_sweep rc $?: $(tail -n 5 $R/validate_sweep.out | tr '\n' ' ')"
wait $MK; t "make gpu_tests: $(tail -n 1 $R/make_gpu_tests.log)"
pack
for b in 32 64 128 256 512 1024 2048 4096 8192; do for s in base new; do
  timeout 60 build/p5_$s "${D[@]}" --batch $b --epochs 2 --no-cupti --workload mlp_batch_sweep --out $R/ab --tag ab-b$b-$s-r1 > $R/ab/b$b-$s-r1.log 2>&1
done; done
t "ab done"
python3 - <<'PY' | tee -a $R/steps.txt
import json, glob, collections
d = collections.defaultdict(dict)
for f in sorted(glob.glob("build/call3/ab/*.json")):
    r = json.load(open(f)); name = f.split("__ab-")[-1].rsplit("-r", 1)[0]; b, s = name.rsplit("-", 1)
    d[b][s] = (r["timing"]["per_step_ms"]["median"] * 1000, r["metrics"].get("backward"))
for b in sorted(d, key=lambda s: int(s.lstrip("b"))):
    print("%-6s base %8.2f (%s)  new %8.2f (%s)" % (b, *d[b]["base"], *d[b]["new"]))
PY
pack
NO_BUILD=1 ONLY='^(w1-p5-own-fp32|w1-p5-own-fp16|w1-p5-pipelined|w1-p5-cluster32|w2-h128-p5-cluster|w2-h128-p5-own-fp16|w2-h1024-p5-own-fp16|w2-h128-p5-own-fp32|w2-h1024-p5-own-fp32)$' \
  timeout 200 scripts/compare_builds.sh build/before $R/compare_builds.log > $R/compare_builds.out 2>&1
t "compare_builds rc $?"
pack
[ -x build/tests/gpu_tests ] && { timeout 150 build/tests/gpu_tests > $R/gpu_tests.log 2>&1; t "gpu_tests rc $?: $(tail -n 4 $R/gpu_tests.log | tr '\n' ' ')"; }
pack; kill $WD 2>/dev/null; pkill -f "sleep 560" 2>/dev/null
cat $R/compare_builds.log; grep -h "own-tf32x3\|own-f16" $R/gemm-b8192.log | head -8 | cut -c1-150
