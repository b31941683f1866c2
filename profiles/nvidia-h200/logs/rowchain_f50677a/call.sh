#!/usr/bin/env bash
# The row chain's first call (--row-chain on, phase5_batched/5a_row_chain.cuh): its GPU test first,
# then every GPU test case, --validate on both row-chain paths at validate_sweep.sh's shapes, and W1's
# step with the row chain off and on in one binary (fp32 and fp16, batch 32 ... 8,192, 2 rounds
# alternating), plus one traced run each way at 8,192 and 32 for the kernel tables.
# Carry: .carry/data, .carry/bins/rc_p5.xz and rc_tests.xz (this commit's builds, made on the host), .carry/call.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-13e6f6a}  # the carried builds' commit
R=build/rc; rm -rf $R; mkdir -p $R/scratch $R/ab $R/traced
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .rc.XXXXXX); tar czf $f --exclude=scratch $R 2>/dev/null; mv $f $OUT/rc.tgz; }  # (own temp file: a pack still running in the background cannot clobber the last one)
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/tests
xz -dc .carry/bins/rc_p5.xz > build/phase5_batched & P1=$!
xz -dc .carry/bins/rc_tests.xz > build/tests/gpu_tests & P2=$!
wait $P1 $P2; chmod +x build/phase5_batched build/tests/gpu_tests
D=.carry/data/mnist
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 120 build/tests/gpu_tests -tc="*row chain*" > $R/test-row-chain.log 2>&1; t "row chain test rc $?: $(tail -2 $R/test-row-chain.log | tr '\n' ' ')"
pack
timeout 200 build/tests/gpu_tests > $R/tests.log 2>&1; t "all GPU tests rc $?: $(tail -3 $R/tests.log | tr '\n' ' ')"
pack
DATA=$D ONLY='row-chain' NO_BUILD=1 timeout 150 scripts/validate_sweep.sh $R/validate.log > /dev/null 2>&1; t "validate rc $?: $(tail -1 $R/validate.log)"
pack
for r in 1 2; do
  for b in 32 64 1024 8192; do for pr in fp32 fp16; do
    M="off on"; [ $r = 2 ] && M="on off"
    e=2; [ $b -ge 1024 ] && e=$(( b / 512 ))
    for m in $M; do
      timeout 60 build/phase5_batched --data $D --batch $b --precision $pr --epochs $e --dropout 0.2 --deterministic --no-cupti \
        --workload mlp_batch_sweep --row-chain $m --out $R/ab --tag ab-$pr-b$b-$m-r$r > $R/ab/$pr-b$b-$m-r$r.log 2>&1
      echo "r=$r b=$b $pr row-chain $m rc $?" >> $R/ab/rc.txt
    done
  done; done
done
t "ab"; pack
for b in 8192 32; do for m in off on; do
  timeout 60 build/phase5_batched --data $D --batch $b --epochs 2 --dropout 0.2 --pdl off --workload mlp_batch_sweep --row-chain $m \
    --out $R/traced --tag traced-b$b-$m > $R/traced/b$b-$m.log 2>&1; t "traced b=$b $m rc $?"
done; done
python3 - $R <<'PY' | tee -a $R/summary.txt
import json, glob, collections, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(list)); acc = collections.defaultdict(dict)
for f in sorted(glob.glob(sys.argv[1] + "/ab/*__ab-*.json")):
    r = json.load(open(f)); name, m, _ = f.split("__ab-")[-1][:-5].rsplit("-", 2)
    d[name][m].append(r["timing"]["per_step_ms"]["median"] * 1000)
    acc[name][m] = (r["metrics"].get("test_accuracy"), r["metrics"].get("train_loss"), r["metrics"].get("row_chain"))
for n in sorted(d, key=lambda s: (s.split("-")[0], int(s.split("-b")[1]))):
    m = {k: statistics.median(v) for k, v in d[n].items()}
    print("%-10s off %8.2f on %8.2f us a step (rounds %s / %s) off/on x%.3f  acc/loss/flag off %s on %s" % (
        n, m.get("off", 0), m.get("on", 0), ["%.2f" % x for x in d[n]["off"]], ["%.2f" % x for x in d[n]["on"]],
        m.get("off", 0) / max(m.get("on", 1e-9), 1e-9), acc[n].get("off"), acc[n].get("on")))
for f in sorted(glob.glob(sys.argv[1] + "/traced/*__traced-*.json")):
    r = json.load(open(f)); print(f.split("__")[-1])
    for k in (r.get("kernels") or [])[:12]:
        print("   grid %5d mean %8.2f us, calls %5d  %s" % (k["grid"][0], k["mean_ns"] / 1e3, k["calls"], k["name"]))
PY
kill $WD 2>/dev/null; wait $WD 2>/dev/null; pack; t packed
