#!/usr/bin/env bash
# call 1 (phase 5 built here with nvcc 13.0 for sm_90 and carried gzipped: new = 16be240, step 5 on
# the gathered bytes as integers and the gathered forward read along k; base = 465b2a2):
# (1) GPU doctests built here (the MLP cases, with the new step-5-on-bytes case and the PDL
#     late-writer cases); validate_sweep on phase 5's default fp32 path; --validate at batch 700,
#     1,023, 4,097 (fp32);
# (2) the GEMM benchmark at 2,048 and 8,192, base and new;
# (3) A/B timing base vs new, W1 at 1,024 ... 8,192, 2 epochs; --backward branched vs auto at
#     32 ... 512 (new); a CUPTI kernel table at 8,192 (new, PDL on and off).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-16be240}
R=build/call1; rm -rf $R; mkdir -p $R/rec $R/ab
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call1.tmp.tgz $R && mv $OUT/call1.tmp.tgz $OUT/call1.tgz; }
( exec >/dev/null 2>&1; sleep 540; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
mkdir -p build
for b in base new; do gunzip -c .carry/bins/p5_$b.gz > build/p5_$b; chmod +x build/p5_$b; done
cp build/p5_new build/phase5_batched && touch build/phase5_batched
( nice -n 10 make -j14 DEPS_PREFIX=.carry/deps build/tests/gpu_tests > $R/make_gpu_tests.log 2>&1; echo "rc $?" >> $R/make_gpu_tests.log ) & MK=$!
D=(--data .carry/data/mnist)
for b in 2048 8192; do for s in base new; do
  timeout 60 build/p5_$s "${D[@]}" --batch $b --gemm-compare --no-cupti --out $R/rec --tag gemm-b$b-$s > $R/gemm-b$b-$s.log 2>&1
  t "gemm b$b $s rc $?"
done; done
NO_BUILD=1 ONLY='phase5_batched --precision fp32$' timeout 120 bash scripts/validate_sweep.sh $R/validate_sweep.log > $R/validate_sweep.out 2>&1
t "validate_sweep rc $?: $(tail -n 3 $R/validate_sweep.out | tr '\n' ' ')"
for b in 700 1023 4097; do
  timeout 60 build/p5_new "${D[@]}" --batch $b --steps 8 --validate --no-cupti --repeats 1 --out $R/rec --tag val-b$b > $R/val-b$b.log 2>&1
  t "validate b$b rc $?: $(grep -h 'graph_replay\|FAIL\|worst' $R/val-b$b.log | tr '\n' ' ' | cut -c1-220)"
done
pack
for b in 1024 2048 4096 8192; do for s in base new; do
  timeout 60 build/p5_$s "${D[@]}" --batch $b --epochs 2 --no-cupti --workload mlp_batch_sweep --out $R/ab --tag ab-b$b-$s-r1 > $R/ab/b$b-$s-r1.log 2>&1
done; done
for b in 32 128 256 512; do for bk in auto branched; do
  timeout 60 build/p5_new "${D[@]}" --batch $b --epochs 2 --no-cupti --workload mlp_batch_sweep --backward $bk --out $R/ab --tag ab-b$b-$bk-r1 > $R/ab/b$b-$bk-r1.log 2>&1
done; done
t "ab done"
for p in on off; do
  timeout 60 build/p5_new "${D[@]}" --batch 8192 --epochs 2 --pdl $p --workload mlp_batch_sweep --out $R/rec --tag kernels-b8192-pdl$p > $R/kernels-b8192-pdl$p.log 2>&1
  t "kernel table pdl $p rc $?"
done
pack
wait $MK; t "make gpu_tests: $(tail -n 1 $R/make_gpu_tests.log)"
[ -x build/tests/gpu_tests ] && { timeout 120 build/tests/gpu_tests -tc='mlp fused*,mlp cuBLASLt*,mlp: *' > $R/gpu_tests.log 2>&1; t "gpu_tests rc $?: $(tail -n 4 $R/gpu_tests.log | tr '\n' ' ')"; }
python3 - <<'PY' | tee -a $R/steps.txt
import json, glob, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob("build/call1/ab/*.json")):
    r = json.load(open(f)); name = f.split("__ab-")[-1].rsplit("-r", 1)[0]
    d[name].append(r["timing"]["per_step_ms"]["median"] * 1000)
for k in sorted(d, key=lambda s: (int(s.split("-")[0].lstrip("b")), s)):
    print("%-18s %s" % (k, "  ".join("%.2f" % x for x in d[k])))
PY
pack; kill $WD 2>/dev/null; pkill -f "sleep 540" 2>/dev/null
grep -h "TFLOP\|us\b" $R/gemm-b8192-*.log | head -40 | cut -c1-160
