#!/usr/bin/env bash
# The batch sweep at the small batches where --row-chain auto turns the row chain on (fp32 <= 64,
# fp16 <= 32): phase 5's default and --row-chain on (fp32 and fp16), the compiled-graph and JAX
# jit-run twins on its init and order, at batch 32 / 64 / 128; the records replace the sweep's there.
# Carry: .carry/data and .carry/bins/ra_p5.xz, ra_p4.xz (phase 5 and phase 4 built on the host at the
# commit named by NB_GIT_COMMIT). Results: $OUT/ra.tgz (records under build/ra/records).
set -u
: "${NB_GIT_COMMIT:?the carried build's commit}"; export NB_GIT_COMMIT
R=build/ra; rm -rf $R; mkdir -p $R/records
pack() { local f; f=$(mktemp -p $OUT .ra.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/ra.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
xz -dc .carry/bins/ra_p5.xz > build/phase5_batched & P1=$!
xz -dc .carry/bins/ra_p4.xz > build/phase4_mlp & P2=$!
wait $P1 $P2; chmod +x build/phase5_batched build/phase4_mlp
NO_BUILD=1 STAGES=sweep SWEEP_BATCHES="${SWEEP_BATCHES:-32 64 128}" SWEEP_PATHS=row-chain SWEEP_TWIN_TF32=0 \
  RECORDS_DIR=$R/records DATA=.carry/data/mnist timeout 560 scripts/bench_mlp.sh > $R/bench.log 2>&1
echo "bench_mlp rc $?" >> $R/bench.log
kill $WD 2>/dev/null; wait $WD 2>/dev/null; pack
tail -30 $R/bench.log
