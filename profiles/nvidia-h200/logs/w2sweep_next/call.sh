#!/usr/bin/env bash
# The width sweep of W2 (784-h-h-h-10, fp16, SGD, batch 32) at h = 128 ... 8,192 on one machine:
# scripts/bench_frameworks.sh stage w2 with no build (phase 5 built here with nvcc 13.0 for sm_90a and
# carried as .carry/c2/p5.xz): phase 5's graph path and grid kernel (and cluster at 128), PyTorch
# compiled-graph, JAX jit-epoch and jit-run on the same init and order. Then the grid kernel's
# --breakdown at h = 256 / 512 / 1,024 / 2,048. Results: $OUT/w2.tgz (records under rec/).
# PART=b instead: W1's model at batch 8,192 (bench_frameworks.sh stage sweep, PyTorch compiled-graph
# with and without TF32, JAX jit-run) and the GEMM benchmark (bench_gemm.sh stage gemm) at batch
# 1,024 and 8,192. Results: $OUT/b.tgz. AB=1 first times step 8's rule (auto) against --fp16-stream regs
# (2 rounds alternating at h = 1,024 ... 8,192; records under ab/).
set -u
: "${NB_GIT_COMMIT:?name the commit of the carried build}"; export NB_GIT_COMMIT
R=build/w2s; rm -rf $R; mkdir -p $R/rec $R/bd
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .w2.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/w2.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/c2/p5.xz > build/phase5_batched  # phase 5 built at NB_GIT_COMMIT, xz'd
chmod +x build/phase5_batched; t "build: $(md5sum < build/phase5_batched | cut -c1-12)"
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
if [ "${PART:-w2}" = b ]; then
  STAGES=sweep SWEEP_BATCHES=8192 NO_BUILD=1 RECORDS_DIR=$R/rec timeout 200 scripts/bench_frameworks.sh > $R/sweep.log 2>&1; t "sweep rc $?"
  mkdir -p $R/logs-sweep; cp build/bench_frameworks/logs/*.log $R/logs-sweep/ 2>/dev/null; pack
  STAGES=gemm BATCHES="1024 8192" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 200 scripts/bench_gemm.sh > $R/gemm.log 2>&1; t "gemm rc $?"
  cp -r build/bench_gemm/logs $R/logs-gemm 2>/dev/null; f=$(mktemp -p $OUT .b.XXXXXX); tar czf $f --exclude='*.trace.json' $R; mv $f $OUT/b.tgz
  kill $WD 2>/dev/null; rm -f $OUT/w2.tgz; grep -v "^\s*$" $R/sweep.log $R/gemm.log | cut -c1-160 | tail -40; exit 0
fi
if [ "${AB:-0}" = 1 ]; then  # step 8's rule (auto: W staged from 2,048 rows) against registers (regs), 2 rounds
  D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --dropout 0 --precision fp16"; mkdir -p $R/ab
  for r in 1 2; do for h in 1024 2048 4096 8192; do for m in regs auto; do
    timeout 15 build/phase5_batched --data $D $W --layers 784,$h,$h,$h,10 --fp16-stream $m --steps 400 --no-cupti --out $R/ab --tag ab-h$h-$m-$r > /dev/null 2>&1
  done; done; t "ab round $r"; done; pack
fi
STAGES=w2 W2_HS="${W2_HS:-128 256 512 1024 2048 4096 8192}" NO_BUILD=1 RECORDS_DIR=$R/rec timeout ${LIMIT:-500} scripts/bench_frameworks.sh > $R/w2.log 2>&1
t "w2 rc $?"; mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null; pack
for h in ${BD_HS:-256 512 1024 2048}; do
  timeout 30 build/phase5_batched --data .carry/data/mnist --layers 784,$h,$h,$h,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 \
    --launch grid --steps 2000 --breakdown --no-cupti --out $R/bd --tag bd-h$h > $R/bd/h$h.log 2>&1; t "breakdown h=$h rc $?"
done
pack; kill $WD 2>/dev/null; t done
grep -v "^\s*$" $R/w2.log | cut -c1-160 | tail -45
