#!/usr/bin/env bash
# (phase 5 built here, nvcc 13.0, sm_90, carried xz'd: old = 60a9493's build; new = this commit's.
# The GPU tests built on the machine.) 1. the GPU tests; 2. validate_sweep.sh on phase 5's fp32 plan
# (the paired updates from batch 2,048) and --update-pair off; 3. W1's step with the paired updates
# and without (--update-pair off), one binary, alternating, 3 rounds, at 2,048 / 4,096 / 8,192
# (--deterministic; the checksums must differ only between the two plans); 4. compare_builds.sh's
# big-batch configurations, old against new.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/pair; rm -rf $R; mkdir -p $R/ab
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/pair.tmp.tgz $R && mv $OUT/pair.tmp.tgz $OUT/pair.tgz; }
D=(--data .carry/data/mnist)
mkdir -p build/before/build
xz -dc .carry/old/p5_old.xz > build/before/build/phase5_batched; chmod +x build/before/build/phase5_batched
xz -dc .carry/bins/p5_new.xz > build/phase5_batched; chmod +x build/phase5_batched; touch build/phase5_batched
t "$(nvidia-smi -L | head -1)"
make -j16 DEPS_PREFIX=.carry/deps build/tests/gpu_tests > $R/make_tests.log 2>&1; t "make gpu_tests rc $?"
timeout 240 build/tests/gpu_tests > $R/gpu_tests.log 2>&1; t "gpu_tests rc $?: $(tail -n 3 $R/gpu_tests.log | tr '\n' ' ')"
pack
for round in 1 2 3; do
  for b in 2048 4096 8192; do
    V="pair apart"; [ $((round % 2)) = 0 ] && V="apart pair"
    for v in $V; do
      X=(); [ $v = apart ] && X=(--update-pair off)
      e=$((b * 20 / 8192)); [ $e -lt 5 ] && e=5
      timeout 60 build/phase5_batched "${D[@]}" --batch $b --epochs $e "${X[@]}" --deterministic --no-cupti --workload mlp_batch_sweep --out $R/ab --tag ab-b$b-$v-r$round > $R/ab/b$b-$v-r$round.log 2>&1
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
    print("%-6s apart %8.2f pair %8.2f us a step (rounds: apart %s pair %s) apart/pair x%.3f; one checksum a plan: %s" % (n, m["apart"], m["pair"], ["%.2f" % x for x in d[n]["apart"]], ["%.2f" % x for x in d[n]["pair"]], m["apart"] / m["pair"], all(len(ck[n][v]) == 1 for v in ck[n])))
PY
pack
NO_BUILD=1 ONLY='^w1-b' timeout 200 scripts/compare_builds.sh build/before $R/compare_builds.log > $R/compare_builds.out 2>&1; t "compare_builds rc $?"
cat $R/compare_builds.log
pack
NO_BUILD=1 ONLY='phase5_batched --precision fp32$|update-pair off' timeout 200 scripts/validate_sweep.sh $R/validate_sweep.log > $R/validate_sweep.out 2>&1; t "validate_sweep rc $?: $(tail -n 1 $R/validate_sweep.log)"
pack; t packed
