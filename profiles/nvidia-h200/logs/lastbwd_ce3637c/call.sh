#!/usr/bin/env bash
# (phase 5 and the GPU tests built here with nvcc 13.0 for sm_90, carried gzipped): the last
# layer's backward-data product in the softmax's epilogue (--last-bwd softmax, the default) against
# its own kernel (--last-bwd kernel), one binary:
# (1) the GPU test cases 'mlp fused*' (the new bit-for-bit case among them); validate_sweep on phase
#     5's default fp32 path (its graph replay included);
# (2) W1's model at batch 32, 128, 1,024, 2,048, 8,192 and W1 without dropout, W2 fp32 at h = 128
#     (batch 32): softmax against kernel, alternating, 3 rounds of 2 epochs (W2: 1,000 steps),
#     --deterministic; the parameter checksums must match;
# (3) the GEMM benchmark at batch 8,192, fp32 and fp16 (the baseline for the step-6 work after it).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/lastbwd; rm -rf $R; mkdir -p $R/rec $R/ab
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/lastbwd.tmp.tgz $R && mv $OUT/lastbwd.tmp.tgz $OUT/lastbwd.tgz; }
( exec >/dev/null 2>&1; sleep 200; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
mkdir -p build/tests
gunzip -c .carry/bins/p5_new.gz > build/phase5_batched; chmod +x build/phase5_batched
gunzip -c .carry/bins/gpu_tests.gz > build/tests/gpu_tests; chmod +x build/tests/gpu_tests
D=(--data .carry/data/mnist)
timeout 60 build/tests/gpu_tests -tc='mlp fused*' > $R/gpu_tests.log 2>&1; t "gpu_tests rc $?: $(tail -n 4 $R/gpu_tests.log | tr '\n' ' ')"
NO_BUILD=1 ONLY='phase5_batched --precision fp32$' timeout 80 bash scripts/validate_sweep.sh $R/validate_sweep.log > $R/validate_sweep.out 2>&1
t "validate_sweep rc $?: $(tail -n 3 $R/validate_sweep.out | tr '\n' ' ')"
pack
W2="--layers 784,128,128,128,10 --optimizer sgd --lr 0.003 --dropout 0 --steps 1000"
for round in 1 2 3; do
  for cfg in "b32|--batch 32 --epochs 2" "b128|--batch 128 --epochs 2" "b1024|--batch 1024 --epochs 2" "b2048|--batch 2048 --epochs 2" \
             "b8192|--batch 8192 --epochs 2" "b32-nodrop|--batch 32 --epochs 2 --dropout 0" "w2h128|$W2"; do
    IFS='|' read -r name args <<<"$cfg"
    V="softmax kernel"; [ $((round % 2)) = 0 ] && V="kernel softmax"
    for v in $V; do
      timeout 30 build/phase5_batched "${D[@]}" $args --deterministic --no-cupti --workload mlp_batch_sweep --last-bwd $v \
        --out $R/ab --tag ab-$name-$v-r$round > $R/ab/$name-$v-r$round.log 2>&1
    done
  done
done
python3 - <<'PY' | tee -a $R/steps.txt
import json, glob, collections, statistics
d = collections.defaultdict(lambda: collections.defaultdict(list)); ck = collections.defaultdict(set)
for f in sorted(glob.glob("build/lastbwd/ab/*.json")):
    r = json.load(open(f)); name, v, _ = f.split("__ab-")[-1][:-5].rsplit("-", 2)
    d[name][v].append(r["timing"]["per_step_ms"]["median"] * 1000); ck[name].add(r["metrics"]["param_checksum"])
    if v == "softmax": d[name]["flag"] = [r["metrics"].get("last_bwd_in_softmax")]
for n in d:
    s, k = statistics.median(d[n]["softmax"]), statistics.median(d[n]["kernel"])
    print("%-11s softmax %8.2f  kernel %8.2f us a step (median of rounds)  x%.3f  in softmax: %s  checksums: %s" % (n, s, k, k / s, d[n]["flag"][0], "same" if len(ck[n]) == 1 else "DIFFER %s" % ck[n]))
PY
for b in 8192; do
  timeout 60 build/phase5_batched "${D[@]}" --batch $b --gemm-compare --out $R/rec --tag gemm-b$b > $R/gemm-b$b.log 2>&1; t "gemm b$b rc $?"
  timeout 60 build/phase5_batched "${D[@]}" --batch $b --precision fp16 --gemm-compare --out $R/rec --tag gemm-b$b-fp16 > $R/gemm-b$b-fp16.log 2>&1; t "gemm b$b fp16 rc $?"
done
pack; kill $WD 2>/dev/null; pkill -f "sleep 200" 2>/dev/null
