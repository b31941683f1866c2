#!/usr/bin/env bash
# (phase 5 built here at 60a9493, nvcc 13.0, sm_90, carried xz'd; the code of the batch sweep's records
# and of b2a6a25's step 5): Nsight Compute on step 5's two first-layer kernels inside W1's step at batch
# 8,192, --pdl off, the second step's launches (SKIP=4: the gathered forward; SKIP=7: the weight
# gradient + Adam): first the throughput sections (SpeedOfLight, MemoryWorkloadAnalysis,
# ComputeWorkloadAnalysis), then the stalls (STALLS=1). Before that, the GPU tests (built here at the
# commit that gates the event-timer-vs-tracer case's kernels behind a mapped flag, carried xz'd): that
# case 10 times, then every case once. Then (where .carry/bins/p5_new.xz is carried) an A/B of W1's
# step, old = 60a9493's build against new = the step's stream at the highest priority and the updates'
# side stream at the lowest (graphs instantiated with their nodes' priorities), alternating, 3
# rounds, --deterministic, fp32 at 1,024 ... 8,192 and fp16 at 8,192 (the checksums must match).
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-60a9493}
R=build/ncu; rm -rf $R; mkdir -p $R
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/ncu.tmp.tgz $R && mv $OUT/ncu.tmp.tgz $OUT/ncu.tgz; }
mkdir -p build; xz -dc .carry/old/p5_old.xz > build/phase5_batched; chmod +x build/phase5_batched; touch build/phase5_batched
D=(--data .carry/data/mnist)
if [ -f .carry/tests/gpu_tests.xz ]; then
  mkdir -p build/tests; xz -dc .carry/tests/gpu_tests.xz > build/tests/gpu_tests; chmod +x build/tests/gpu_tests
  for i in 1 2 3 4 5 6 7 8 9 10; do
    timeout 30 build/tests/gpu_tests -tc='CUDA-event timer*' -s > $R/tracer-$i.log 2>&1; t "tracer case run $i rc $?: $(grep -h -o 'events .* cycles' $R/tracer-$i.log)"
  done
  timeout 200 build/tests/gpu_tests > $R/gpu_tests.log 2>&1; t "gpu_tests rc $?: $(tail -n 4 $R/gpu_tests.log | tr '\n' ' ')"
  pack
fi
if [ -f .carry/bins/p5_new.xz ]; then
  xz -dc .carry/bins/p5_new.xz > build/p5_new; chmod +x build/p5_new; mkdir -p $R/ab
  for round in 1 2 3; do
    for cfg in "f32-b1024|--batch 1024 --epochs 3" "f32-b2048|--batch 2048 --epochs 5" "f32-b4096|--batch 4096 --epochs 10" \
               "f32-b8192|--batch 8192 --epochs 20" "f16-b8192|--precision fp16 --batch 8192 --epochs 20"; do
      IFS='|' read -r name args <<<"$cfg"
      V="old new"; [ $((round % 2)) = 0 ] && V="new old"
      for v in $V; do
        B=build/p5_new; [ $v = old ] && B=build/phase5_batched
        timeout 40 $B "${D[@]}" $args --deterministic --no-cupti --workload mlp_batch_sweep --out $R/ab --tag ab-$name-$v-r$round > $R/ab/$name-$v-r$round.log 2>&1
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
    print("%-10s old %8.2f new %8.2f us a step (rounds: old %s new %s) old/new x%.3f checksums equal: %s" % (n, m["old"], m["new"], ["%.2f" % x for x in d[n]["old"]], ["%.2f" % x for x in d[n]["new"]], m["old"] / m["new"], ck[n]["old"] == ck[n]["new"]))
PY
  pack
fi
for sk in 4 7; do
  for st in 0 1; do
    PROFILE_DIR=$R/s$sk-st$st STALLS=$st KERNEL=gemm_tf32x3_kernel SKIP=$sk timeout 150 scripts/profile.sh ncu 5 "${D[@]}" --batch 8192 --steps 3 --warmup 0 --repeats 1 --pdl off > $R/ncu-s$sk-st$st.log 2>&1
    t "ncu skip $sk stalls $st rc $?"
    rm -f $R/s$sk-st$st/*.ncu-rep
    pack
  done
done
pack; t packed
grep -h -E "Duration|Throughput|Pipe|Issue|Eligible|Active Warps|Occupancy|Registers|Bank|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth" $R/s*-st0/*.csv 2>/dev/null | cut -c1-200 | head -80
