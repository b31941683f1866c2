#!/usr/bin/env bash
# call 11 (phase 5 built here and carried gzipped: new = the working tree with the first forward
# product's B after the PDL wait and --validate's graph-replay check; base = 246ee90):
# (1) validate_sweep on phase 5's default fp32/fp16 paths and --backward paired (fp32),
#     every run also replaying its steps as one graph against the single steps, bit for bit;
#     W2's shape (fp16, SGD, batch 32) at h = 1,000 with --validate; GPU doctests (built here);
# (2) --deterministic checksums at batch 2,047: branched, paired, paired with PDL off;
# (3) A/B timing, base vs new, W1 at batch 32 ... 8,192, 2 epochs, --no-cupti; --backward branched at
#     64 ... 1,024; W2 h = 4,096 and 8,192 (fp16 graph path), 2,000 steps.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/call11; rm -rf $R; mkdir -p $R/rec $R/ab
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call11.tmp.tgz $R && mv $OUT/call11.tmp.tgz $OUT/call11.tgz; }
( exec >/dev/null 2>&1; sleep 280; pack ) & WD=$!
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
mkdir -p build
for b in base new; do gunzip -c .carry/bins/p5_$b.gz > build/p5_$b; chmod +x build/p5_$b; done
cp build/p5_new build/phase5_batched && touch build/phase5_batched
( nice -n 10 make -j14 DEPS_PREFIX=.carry/deps build/tests/gpu_tests > $R/make_gpu_tests.log 2>&1; echo "rc $?" >> $R/make_gpu_tests.log ) & MK=$!
D=(--data .carry/data/mnist)
NO_BUILD=1 ONLY='phase5_batched --precision fp32($| --backward paired)' timeout 150 bash scripts/validate_sweep.sh $R/validate_sweep.log > $R/validate_sweep.out 2>&1
t "validate_sweep rc $?: $(tail -n 4 $R/validate_sweep.out | tr '\n' ' ')"
timeout 60 build/p5_new "${D[@]}" --layers 784,1000,1000,1000,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --steps 200 --validate --no-cupti --repeats 1 --out $R/rec --tag w2-h1000-check > $R/w2-h1000.log 2>&1
t "w2 h1000 fp16 validate rc $?: $(grep -h 'graph_replay\|epoch 0' $R/w2-h1000.log | tr '\n' ' ' | cut -c1-200)"
timeout 60 build/p5_new "${D[@]}" --batch 4097 --precision fp16 --steps 8 --validate --no-cupti --repeats 1 --out $R/rec --tag w1-b4097-fp16-check > $R/w1-b4097-fp16.log 2>&1
t "w1 b4097 fp16 validate rc $?: $(grep -h 'graph_replay\|FAIL' $R/w1-b4097-fp16.log | tr '\n' ' ' | cut -c1-200)"
ck() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['metrics']['param_checksum'])" "$1"; }
for v in "branched on" "paired on" "paired off"; do
  set -- $v; n=det-b2047-$1-pdl$2
  timeout 60 build/p5_new "${D[@]}" --batch 2047 --epochs 1 --deterministic --no-cupti --repeats 1 --backward $1 --pdl $2 --out $R/rec --tag $n > $R/$n.log 2>&1
  t "$n rc $?: $(ck $R/rec/phase5_batched__$n.json 2>&1 | tail -1) $(grep -h 'epoch 0' $R/$n.log | cut -c1-90)"
done
wait $MK; t "make gpu_tests: $(tail -n 1 $R/make_gpu_tests.log)"
[ -x build/tests/gpu_tests ] && { timeout 100 build/tests/gpu_tests -tc='mlp fused*,mlp cuBLASLt*,mlp: *' > $R/gpu_tests.log 2>&1; t "gpu_tests rc $?: $(tail -n 4 $R/gpu_tests.log | tr '\n' ' ')"; }
pack
for b in 64 512 1024 2048 8192; do
  for round in 1; do
    V="base new"
    for s in $V; do
      timeout 60 build/p5_$s "${D[@]}" --batch $b --epochs 2 --no-cupti --workload mlp_batch_sweep --out $R/ab --tag ab-b$b-$s-r$round > $R/ab/b$b-$s-r$round.log 2>&1
    done
  done
done
for b in 64 1024; do
  timeout 60 build/p5_new "${D[@]}" --batch $b --epochs 2 --no-cupti --workload mlp_batch_sweep --backward branched --out $R/ab --tag ab-b$b-branched-r1 > $R/ab/b$b-branched-r1.log 2>&1
done
for h in 4096; do for s in base new; do
  timeout 60 build/p5_$s "${D[@]}" --layers 784,$h,$h,$h,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --steps 1000 --no-cupti --out $R/ab --tag ab-w2h$h-$s-r1 > $R/ab/w2h$h-$s-r1.log 2>&1
done; done
t "ab done"
python3 - <<'PY' | tee -a build/call11/steps.txt
import json, glob, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob("build/call11/ab/*.json")):
    r = json.load(open(f)); name = f.split("__ab-")[-1].rsplit("-r", 1)[0]
    d[name].append(r["timing"]["per_step_ms"]["median"] * 1000)
for k in sorted(d, key=lambda s: (s.startswith("w2"), int(s.split("-")[0].split("h")[-1].lstrip("b")), s)):
    print("%-18s %s" % (k, "  ".join("%.2f" % x for x in d[k])))
PY
pack; t packed; kill $WD 2>/dev/null; pkill -f "sleep 280" 2>/dev/null
