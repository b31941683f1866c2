#!/usr/bin/env bash
# The batch sweep at the small batches where --row-chain auto turns the row chain on (fp32 <= 64,
# fp16 <= 32): phase 5's default (fp32, fp16) and --row-chain on (fp32 and fp16), the compiled-graph and JAX
# jit-run twins on its init and order, at batch 32 and 64; the records replace the sweep's there.
# Then (~1 minute), W1's fp16 step with --fp16-gemm auto against mma (every product on step 6) at
# batch 1,024 ... 8,192, 2 rounds alternating: whether the upper layers' updates, on the WMMA tile
# beside the chain under auto, should move to step 6 at big batches (ab/summary.txt).
# Carry: .carry/data and .carry/bins/ra_p5.xz, ra_p4.xz (phase 5 and phase 4 built on the host at the
# commit named by NB_GIT_COMMIT). Results: $OUT/ra.tgz (records under build/ra/records).
set -u
: "${NB_GIT_COMMIT:?name the commit of the carried build}"; export NB_GIT_COMMIT
R=build/ra; rm -rf $R; mkdir -p $R/records
pack() { local f; f=$(mktemp -p $OUT .ra.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/ra.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
xz -dc .carry/bins/ra_p5.xz > build/phase5_batched & P1=$!
xz -dc .carry/bins/ra_p4.xz > build/phase4_mlp & P2=$!
wait $P1 $P2; chmod +x build/phase5_batched build/phase4_mlp
D=.carry/data/mnist
NO_BUILD=1 STAGES=sweep SWEEP_BATCHES="${SWEEP_BATCHES:-32 64}" SWEEP_PATHS="row-chain fp16" SWEEP_TWIN_TF32=0 \
  RECORDS_DIR=$R/records DATA=$D timeout 420 scripts/bench_mlp.sh > $R/bench.log 2>&1
echo "bench_mlp rc $?" >> $R/bench.log
pack
mkdir -p $R/ab
for r in 1 2; do for b in 1024 2048 4096 8192; do
  M="auto mma"; [ $r = 2 ] && M="mma auto"
  for v in $M; do
    timeout 60 build/phase5_batched --data $D --batch $b --precision fp16 --epochs $(( b / 512 )) --dropout 0.2 --deterministic \
      --no-cupti --workload mlp_batch_sweep --fp16-gemm $v --out $R/ab --tag ab-f16-b$b-$v-r$r > $R/ab/b$b-$v-r$r.log 2>&1
    echo "r=$r b=$b $v rc $?" >> $R/ab/rc.txt
  done
done; done
python3 - $R/ab <<'PY' | tee $R/ab/summary.txt
import json, glob, collections, statistics, sys
d = collections.defaultdict(list)
for f in glob.glob(sys.argv[1] + "/*__ab-f16-*.json"):
    r = json.load(open(f)); _, _, b, v, _ = f.split("__")[-1][:-5].split("-")
    d[(int(b[1:]), v)].append(r["timing"]["per_step_ms"]["median"] * 1000)
for b in sorted({k[0] for k in d}):
    a, m = statistics.median(d[(b, "auto")]), statistics.median(d[(b, "mma")])
    print("fp16 b=%5d  auto %8.2f us %s  mma %8.2f us %s  auto/mma x%.3f" % (b, a, d[(b, "auto")], m, d[(b, "mma")], a / m))
PY
kill $WD 2>/dev/null; wait $WD 2>/dev/null; pack
cat $R/ab/summary.txt; tail -30 $R/bench.log
