#!/usr/bin/env bash
# (phase 5 and the GPU tests built here with nvcc 13.0 for sm_90, carried xz'd; "old" = phase 5
# built at a0f96e6, the batch sweep's records' build, the same code as this one's parent's): step 6 multiplying the
# gathered bytes as integers (the forward along k, the weight gradient's bytes by ldmatrix.trans);
# step 5's gathered weight gradient in 16 x 32 warp tiles (the same bits):
# (1) every GPU test case; validate_sweep on phase 5's fp16 paths (plan and --fp16-gemm mma)
#     and the default fp32 path;
# (2) the GEMM benchmark at batch 8,192 (fp32 and fp16) and 2,048 fp16;
# (3) old (where a previous call left build/p5_old on this machine) against new, alternating, 3
#     rounds, --deterministic: W1 fp16 at batch 1,024 ... 8,192, fp32 at 4,096 and 8,192 (the
#     checksums must match), W2 fp16 at h = 1,024; new with
#     --fp16-gemm mma (every product on step 6) at 2,048 ... 8,192;
# (4) W1 fp32 at 1,024, 2,048, 8,192 as logs/lastbwd_ce3637c/call.sh ran it: its parameter
#     checksums must be those (step 5's bits unchanged);
# (5) with the old binary: scripts/compare_builds.sh (NO_BUILD=1) on W1 at batch 32 and W2's paths
#     (W2 fp16 at h = 1,024 takes step 6's gathered forward: its checksum is expected to change).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/f16b; rm -rf $R; mkdir -p $R/rec $R/ab
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/f16b.tmp.tgz $R && mv $OUT/f16b.tmp.tgz $OUT/f16b.tgz; }
( exec >/dev/null 2>&1; while sleep 60; do pack; done ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
mkdir -p build/tests
xz -dc .carry/bins/p5_new.xz > build/phase5_batched
xz -dc .carry/bins/gpu_tests.xz > build/tests/gpu_tests; chmod +x build/phase5_batched build/tests/gpu_tests
OLD=1; [ -x build/p5_old ] || OLD=0; t "old binary here: $OLD"
D=(--data .carry/data/mnist)
timeout 200 build/tests/gpu_tests > $R/gpu_tests.log 2>&1; t "gpu_tests rc $?: $(tail -n 4 $R/gpu_tests.log | tr '\n' ' ')"
for b in 8192; do
  timeout 60 build/phase5_batched --batch $b --precision fp16 --gemm-compare --out $R/rec --tag gemm-b$b-fp16 > $R/gemm-b$b-fp16.log 2>&1; t "gemm b$b fp16 rc $?"
  timeout 60 build/phase5_batched --batch $b --gemm-compare --out $R/rec --tag gemm-b$b > $R/gemm-b$b.log 2>&1; t "gemm b$b rc $?"
done
timeout 60 build/phase5_batched --batch 2048 --precision fp16 --gemm-compare --out $R/rec --tag gemm-b2048-fp16 > $R/gemm-b2048-fp16.log 2>&1; t "gemm b2048 fp16 rc $?"
grep -E "L0 (forward|weight)" $R/gemm-b*.log | tee -a $R/steps.txt
pack
W2="--layers 784,1024,1024,1024,10 --optimizer sgd --lr 0.003 --dropout 0 --steps 500 --precision fp16"
for round in 1 2 3; do
  for cfg in "f16-b1024|--precision fp16 --batch 1024 --epochs 3" "f16-b2048|--precision fp16 --batch 2048 --epochs 5" \
             "f16-b4096|--precision fp16 --batch 4096 --epochs 10" "f16-b8192|--precision fp16 --batch 8192 --epochs 20" \
             "f32-b4096|--batch 4096 --epochs 10" "f32-b8192|--batch 8192 --epochs 20" "w2h1024|$W2"; do
    IFS='|' read -r name args <<<"$cfg"
    V="old new"; [ $((round % 2)) = 0 ] && V="new old"; [ $OLD = 0 ] && V=new
    for v in $V; do
      if [ $v = old ]; then B=(build/p5_old); else B=(build/phase5_batched); fi
      timeout 40 "${B[@]}" "${D[@]}" $args --deterministic --no-cupti --workload mlp_batch_sweep \
        --out $R/ab --tag ab-$name-$v-r$round > $R/ab/$name-$v-r$round.log 2>&1
    done
    case $name in f16-b2048|f16-b4096|f16-b8192)
      timeout 40 build/phase5_batched "${D[@]}" $args --fp16-gemm mma --deterministic --no-cupti --workload mlp_batch_sweep \
        --out $R/ab --tag ab-$name-mma-r$round > $R/ab/$name-mma-r$round.log 2>&1;; esac
  done
done
python3 - <<'PY' | tee -a $R/steps.txt
import json, glob, collections, statistics
d = collections.defaultdict(lambda: collections.defaultdict(list)); ck = collections.defaultdict(lambda: collections.defaultdict(set))
for f in sorted(glob.glob("build/f16b/ab/*.json")):
    r = json.load(open(f)); name, v, _ = f.split("__ab-")[-1][:-5].rsplit("-", 2)
    d[name][v].append(r["timing"]["per_step_ms"]["median"] * 1000); ck[name][v].add(r["metrics"]["param_checksum"])
for n in d:
    m = {v: statistics.median(x) for v, x in d[n].items()}
    print("%-10s " % n + "  ".join("%s %8.2f" % (v, m[v]) for v in sorted(m)) + " us a step (median of rounds)"
          + ("  old/new x%.3f  checksums old == new: %s" % (m["old"] / m["new"], ck[n]["old"] == ck[n]["new"]) if "old" in m else "")
          + "  runs' checksums stable: %s" % all(len(s) == 1 for s in ck[n].values()))
PY
for cfg in "b1024|--batch 1024 --epochs 2|fnv1a64:22f4affcfec8fdca" "b2048|--batch 2048 --epochs 2|fnv1a64:4a9bd339782f521d" \
           "b8192|--batch 8192 --epochs 2|fnv1a64:7bb118c7dfc6c198"; do
  IFS='|' read -r name args want <<<"$cfg"
  timeout 30 build/phase5_batched "${D[@]}" $args --deterministic --no-cupti --workload mlp_batch_sweep --out $R/ab --tag f32-$name > $R/ab/f32-$name.log 2>&1
  got=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['metrics']['param_checksum'])" $R/ab/phase5_batched__f32-$name.json 2>/dev/null)
  t "fp32 $name checksum $got (ce3637c: $want) $([ "$got" = "$want" ] && echo same || echo DIFFERENT)"
done
pack
NO_BUILD=1 ONLY='phase5_batched --precision (fp16|fp16 --fp16-gemm mma|fp32)$' timeout 150 bash scripts/validate_sweep.sh $R/validate_sweep.log > $R/validate_sweep.out 2>&1
t "validate_sweep rc $?: $(tail -n 4 $R/validate_sweep.out | tr '\n' ' ')"
if [ $OLD = 1 ]; then
  mkdir -p build/before/build && cp build/p5_old build/before/build/phase5_batched
  NO_BUILD=1 ONLY='^(w1-p5-own-fp32|w1-p5-own-fp16|w1-p5-pipelined|w1-p5-cluster32|w2-h128-p5-cluster|w2-h128-p5-own-fp16|w2-h1024-p5-own-fp16|w2-h128-p5-own-fp32|w2-h1024-p5-own-fp32)$' \
    timeout 200 scripts/compare_builds.sh build/before $R/compare_builds.log > $R/compare_builds.out 2>&1
  t "compare_builds rc $?"; cat $R/compare_builds.log >> $R/steps.txt
fi
pack; kill $WD 2>/dev/null
