#!/usr/bin/env bash
# Rung 5g's two teams: A (f620a8f, 8 chain warps + 8 updating) against C (3402751: A with the chain's
# products unrolled 8 k-steps deep, one round of L2 loads where 8 warps split K = 1,024; ptxas spills). Both
# alternating at h = 256 ... 2,048 (2 rounds); the fastest (geometric mean of its medians) then gets
# the grid GPU tests and sanitizers, --breakdown, and the width sweep of bench_frameworks.sh (stage w2,
# h = 256 ... 2,048: phase 5's graph path and grid kernel, PyTorch compiled-graph, JAX) as its records.
# (A again: stop there.) No build: both phase 5 binaries and their grid tests carried xz'd.
set -u
R=build/tc; rm -rf $R; mkdir -p $R/rec $R/ab $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/tc.tmp.tgz --exclude="*.trace.json" $R && mv $OUT/tc.tmp.tgz $OUT/tc.tgz; }
( exec >/dev/null 2>&1; sleep 440; pack ) & WD=$!
mkdir -p build; P=""
for v in A C; do xz -dc .carry/bins/p5_$v.xz > build/p5_$v & P="$P $!"; xz -dc .carry/bins/gt_$v.xz > build/gt_$v & P="$P $!"; done
wait $P; chmod +x build/p5_? build/gt_?
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
D=(--data .carry/data/mnist)
w2() { echo --layers "784,$1,$1,$1,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16; }
for r in 1 2; do
  for h in 256 512 1024 2048; do
    V="A C"; [ $r = 2 ] && V="C A"
    for v in $V; do
      timeout 60 build/p5_$v "${D[@]}" $(w2 $h) --steps 3000 --repeats 3 --no-cupti --out $R/ab --launch grid --tag "w2-h$h-$v-r$r" > $R/ab/w2-$h-$v-r$r.log 2>&1 || echo "h=$h $v r$r FAILED" >> $R/steps.txt
    done
  done
  t "round $r"
done
python3 - <<'PY' | tee $R/ab/summary.txt
import json, glob, statistics, collections, math
d = collections.defaultdict(list); ck = collections.defaultdict(set)
for f in glob.glob("build/tc/ab/*.json"):
    r = json.load(open(f)); tag = r["config"]["tag"].split("-")
    d[(int(tag[1][1:]), tag[2])].append(r["timing"]["per_step_ms"]["median"] * 1000); ck[(int(tag[1][1:]), tag[2])].add(r["metrics"]["param_checksum"])
hs = sorted({k[0] for k in d}); gm = {}
for v in "AC":
    gm[v] = math.exp(sum(math.log(statistics.median(d[(h, v)])) for h in hs) / len(hs))
for h in hs:
    print("h=%5d  " % h + "  ".join("%s %s" % (v, " ".join("%.2f" % x for x in sorted(d[(h, v)]))) for v in "AC") + "  checksums " + " ".join("%s:%s" % (v, ",".join(sorted(ck[(h, v)]))) for v in "AC"))
print("geometric means: " + "  ".join("%s %.2f" % (v, gm[v]) for v in "AC"))
best = min(gm, key=gm.get); print("fastest:", best); open("build/tc/best", "w").write(best)
PY
B=$(cat $R/best); declare -A C=([A]=f620a8f [B]=4246d01 [C]=3402751); export NB_GIT_COMMIT=${C[$B]}
t "fastest $B ($NB_GIT_COMMIT)"
if [ "$B" = A ]; then pack; kill $WD 2>/dev/null; pkill -f "sleep 440" 2>/dev/null; exit 0; fi  # A's records: logs/teams_ab/
timeout 100 build/gt_$B -tc="mlp grid*" > $R/tests.log 2>&1; t "grid tests rc $?: $(tail -2 $R/tests.log | tr '\n' ' ')"
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 99 build/gt_$B -tc="mlp grid: a short run*" > $R/$tool.log 2>&1
  t "$tool rc $?: $(tail -1 $R/$tool.log)"
done
for h in 256 512 1024 2048; do
  timeout 60 build/p5_$B "${D[@]}" $(w2 $h) --steps 3000 --repeats 1 --no-cupti --out $R/scratch --launch grid --breakdown --tag "w2-h$h-bd" > $R/w2-$h-bd.log 2>&1
  t "breakdown $h rc $?"; grep -A8 "breakdown (block" $R/w2-$h-bd.log
done
cp build/p5_$B build/phase5_batched
NO_BUILD=1 STAGES=w2 W2_HS="256 512 1024 2048" RECORDS_DIR=$R/rec timeout 300 scripts/bench_frameworks.sh > $R/w2.log 2>&1; t "w2 rc $?"
grep "^\[" $R/w2.log | tail -20
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 440" 2>/dev/null
