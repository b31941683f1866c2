#!/usr/bin/env bash
# (k3) One machine. (a) The GPU test of the last layer's cluster tail, 20 times (main's test build,
# .carry/j/tests.xz); (b) the GEMM benchmark at batch 8,192 and 1,024 in fp16 with the dense-X probe
# rows; (c) W1's model at batch 1,024 and 8,192 in one run, the same build
# (NB_GIT_COMMIT, .carry/j/p5.xz; its step code is main's): scripts/bench_frameworks.sh stage sweep (every
# phase 5 path, PyTorch compiled-graph with and without TF32, JAX jit-run, the same init and order).
# $OUT/k3.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT; PROBE_COMMIT=$NB_GIT_COMMIT
R=build/k3; rm -rf $R; mkdir -p $R/rec $R/gemm B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .k3.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/k3.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/j/p5.xz > build/phase5_batched; cp build/phase5_batched B/p5probe
xz -dc .carry/j/tests.xz > B/gpu_tests; chmod +x build/phase5_batched B/p5probe B/gpu_tests
D=.carry/data/mnist
t "base $(md5sum < build/phase5_batched | cut -c1-12) probe $(md5sum < B/p5probe | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
ok=0; for i in $(seq 1 ${REPS:-20}); do
  timeout 30 B/gpu_tests -tc="*cluster tail*" >> $R/tests-repeat.log 2>&1 && ok=$((ok+1)); done
t "cluster-tail test passed $ok of ${REPS:-20} $(grep -c 'ERROR' $R/tests-repeat.log) error lines"
for b in 8192 1024; do
  NB_GIT_COMMIT=$PROBE_COMMIT timeout 60 B/p5probe --data $D --gemm-compare --precision fp16 --batch $b --no-cupti --out $R/gemm --tag probe-gemm-b$b-fp16 > $R/gemm/b$b-fp16.log 2>&1
  t "gemm probe b=$b rc $?"; done
pack
STAGES=sweep SWEEP_BATCHES="${SWEEP_BATCHES:-1024 8192}" NO_BUILD=1 RECORDS_DIR=$R/rec timeout ${LIMIT:-420} scripts/bench_frameworks.sh > $R/sweep.log 2>&1
t "sweep rc $?"; mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
kill $WD 2>/dev/null; pack; t done
grep -E "L0 |gather" $R/gemm/b8192-fp16.log | cut -c1-150; grep -E "ok |FAIL|fail" $R/sweep.log | cut -c1-170 | tail -30
