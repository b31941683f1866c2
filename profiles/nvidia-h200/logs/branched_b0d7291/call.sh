#!/usr/bin/env bash
# call 9 (no build of phase 5: two builds carried gzipped -- base = 246ee90, new = the working tree):
# (1) correctness of the branched backward and the deferred step loss: validate_sweep on phase 5's
#     default fp32/fp16 paths and on --backward branched / paired (fp32); --deterministic checksums,
#     new (auto = branched at 2,048) = new --backward paired = base; GPU doctests (built here, in the
#     background while the validation runs);
# (2) A/B timing, base vs new (and new --backward paired), W1's model at batch 32 ... 8,192, 2 epochs,
#     --no-cupti, runs alternating which build goes first.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call9; rm -rf $R; mkdir -p $R/rec $R/ab
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call9.tmp.tgz $R && mv $OUT/call9.tmp.tgz $OUT/call9.tgz; }
( exec >/dev/null 2>&1; sleep 560; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
mkdir -p build
gunzip -c .carry/bins/p5_base.gz > build/p5_base && gunzip -c .carry/bins/p5_new.gz > build/p5_new && chmod +x build/p5_base build/p5_new
cp build/p5_new build/phase5_batched && touch build/phase5_batched
( nice -n 10 make -j14 DEPS_PREFIX=.carry/deps build/tests/gpu_tests > $R/make_gpu_tests.log 2>&1; echo "rc $?" >> $R/make_gpu_tests.log ) & MK=$!
D=(--data .carry/data/mnist)
# (1a) validation
NO_BUILD=1 ONLY='phase5_batched --precision fp(32|16)$|backward' timeout 300 bash scripts/validate_sweep.sh $R/validate_sweep.log > $R/validate_sweep.out 2>&1
t "validate_sweep rc $?: $(tail -n 3 $R/validate_sweep.out | tr '\n' ' ')"
# (1b) checksums
ck() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['metrics']['param_checksum'])" "$1"; }
for b in 2047 64; do
  for v in "new auto" "new paired" "base auto"; do
    set -- $v; B=build/p5_$1; X=(); [ "$2" = paired ] && X=(--backward paired)
    timeout 60 $B "${D[@]}" --batch $b --epochs 1 --deterministic --no-cupti --repeats 1 "${X[@]}" --out $R/rec --tag det-b$b-$1-$2 > $R/det-b$b-$1-$2.log 2>&1
    t "det b$b $1 $2 rc $?: $(ck $R/rec/phase5_batched__det-b$b-$1-$2.json 2>&1 | tail -1)  $(grep -h 'GEMM plan\|epoch 0' $R/det-b$b-$1-$2.log | tr '\n' ' ' | cut -c1-200)"
  done
done
# (1c) GPU doctests
wait $MK; t "make gpu_tests: $(tail -n 1 $R/make_gpu_tests.log)"
[ -x build/tests/gpu_tests ] && { timeout 200 build/tests/gpu_tests > $R/gpu_tests.log 2>&1; t "gpu_tests rc $?: $(tail -n 4 $R/gpu_tests.log | tr '\n' ' ')"; }
pack
# (2) A/B timing
for b in 32 64 128 512 1024 2048 4096 8192; do
  for round in 1 2; do
    V="base new"; [ $round = 2 ] && V="new base"
    for s in $V; do
      timeout 60 build/p5_$s "${D[@]}" --batch $b --epochs 2 --no-cupti --workload mlp_batch_sweep --out $R/ab --tag ab-b$b-$s-r$round > $R/ab/b$b-$s-r$round.log 2>&1
    done
    if [ $b -ge 2048 ] && [ $round = 1 ]; then
      timeout 60 build/p5_new "${D[@]}" --batch $b --epochs 2 --no-cupti --workload mlp_batch_sweep --backward paired --out $R/ab --tag ab-b$b-paired-r1 > $R/ab/b$b-paired-r1.log 2>&1
      timeout 60 build/p5_new "${D[@]}" --batch $b --epochs 2 --no-cupti --workload mlp_batch_sweep --pdl off --out $R/ab --tag ab-b$b-pdloff-r1 > $R/ab/b$b-pdloff-r1.log 2>&1
    fi
  done
  t "ab b$b done"
done
python3 - <<'PY' | tee -a build/call9/steps.txt
import json, glob, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob("build/call9/ab/*.json")):
    r = json.load(open(f)); tag = r["config"].get("tag") or f
    name = f.split("__ab-")[-1].rsplit("-r", 1)[0]
    d[name].append(r["timing"]["per_step_ms"]["median"] * 1000)
for k in sorted(d, key=lambda s: (int(s.split("-")[0][1:]), s)):
    print("%-18s %s" % (k, "  ".join("%.2f" % x for x in d[k])))
PY
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 560" 2>/dev/null
