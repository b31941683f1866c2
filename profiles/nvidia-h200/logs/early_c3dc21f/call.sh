#!/usr/bin/env bash
# (phase 5 built here, nvcc 13.0, sm_90, carried xz'd.) MODE=ab: 8b5cf70's build (the one hand-over
# of a split tile) against c3dc21f's (the same, and the forward's dropout bits drawn before the PDL
# wait), alternating, 3 rounds, --deterministic, W1 fp32 at 2,048 / 4,096 / 8,192 and fp16 at 8,192
# (the checksums must match). MODE=probe: c3dc21f with the stamps of ../tail2_8b5cf70/probe.py (its
# anchors fit both trees), W1 at 8,192, 2 runs. Summary: python3 ../tail2_8b5cf70/analyze.py . > summary.txt
set -u
MODE=${MODE:-ab}
R=build/early-$MODE; rm -rf $R; mkdir -p $R/ab
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
D=(--data .carry/data/mnist)
t "$(nvidia-smi -L | head -1)"
if [ "$MODE" = ab ]; then
  xz -dc .carry/bins/p5_aonly.xz > build/p5_old; xz -dc .carry/bins/p5_new.xz > build/p5_new; chmod +x build/p5_old build/p5_new
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
for n in sorted(d):
    m = {v: statistics.median(x) for v, x in d[n].items()}
    print("%-10s 8b5cf70 %8.2f c3dc21f %8.2f us a step (rounds: %s / %s) x%.3f checksums equal: %s" % (n, m["old"], m["new"], ["%.2f" % x for x in d[n]["old"]], ["%.2f" % x for x in d[n]["new"]], m["old"] / m["new"], ck[n]["old"] == ck[n]["new"]))
PY
else
  xz -dc .carry/bins/p5_probe.xz > build/p5_probe; chmod +x build/p5_probe
  for i in 1 2; do
    timeout 60 build/p5_probe "${D[@]}" --batch 8192 --epochs 1 --no-cupti --deterministic --out $R > $R/probe-8192-$i.log 2>&1; t "probe 8192 run $i rc $?"
    gzip -f $R/probe-8192-$i.log
  done
fi
tar czf $OUT/early-$MODE.tgz $R; t packed
