#!/usr/bin/env bash
# (phase 5 built here, nvcc 13.0, sm_90, carried xz'd; old = 60a9493's build, new = the updates' side
# stream at the highest priority, the step's stream at the default (lowest), graphs instantiated with
# their nodes' priorities): A/B of W1's step, alternating, 3 rounds, --deterministic, fp32 at 2,048,
# 4,096, 8,192 and fp16 at 8,192 (the checksums must match). MODE=tests instead: the GPU tests built
# at the same commit, the event-timer-vs-tracer case 10 times, then every case once.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
MODE=${MODE:-ab}
R=build/prio-$MODE; rm -rf $R; mkdir -p $R/ab
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/prio-$MODE.tmp.tgz $R && mv $OUT/prio-$MODE.tmp.tgz $OUT/prio-$MODE.tgz; }
D=(--data .carry/data/mnist)
mkdir -p build
if [ "$MODE" = ab ]; then
  xz -dc .carry/old/p5_old.xz > build/p5_old; xz -dc .carry/bins/p5_new.xz > build/p5_new; chmod +x build/p5_old build/p5_new
  for round in 1 2 3; do
    for cfg in "f32-b2048|--batch 2048 --epochs 5" "f32-b4096|--batch 4096 --epochs 10" \
               "f32-b8192|--batch 8192 --epochs 20" "f16-b8192|--precision fp16 --batch 8192 --epochs 20"; do
      IFS='|' read -r name args <<<"$cfg"
      V="old new"; [ $((round % 2)) = 0 ] && V="new old"
      for v in $V; do
        timeout 40 build/p5_$v "${D[@]}" $args --deterministic --no-cupti --workload mlp_batch_sweep --out $R/ab --tag ab-$name-$v-r$round > $R/ab/$name-$v-r$round.log 2>&1
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
else
  mkdir -p build/tests; xz -dc .carry/tests/gpu_tests.xz > build/tests/gpu_tests; chmod +x build/tests/gpu_tests
  for i in 1 2 3 4 5 6 7 8 9 10; do
    timeout 30 build/tests/gpu_tests -tc='CUDA-event timer*' -s > $R/tracer-$i.log 2>&1; t "tracer case run $i rc $?: $(grep -h -o 'events .* cycles' $R/tracer-$i.log)"
  done
  timeout 200 build/tests/gpu_tests > $R/gpu_tests.log 2>&1; t "gpu_tests rc $?: $(tail -n 4 $R/gpu_tests.log | tr '\n' ' ')"
fi
pack; t packed
