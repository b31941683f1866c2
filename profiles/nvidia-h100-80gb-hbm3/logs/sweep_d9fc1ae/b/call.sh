#!/usr/bin/env bash
# W1's model at batch 8,192 (bench_frameworks.sh stage sweep) and the GEMM benchmark at 1,024 and
# 8,192 (bench_gemm.sh stage gemm) on HEAD's build (.carry/e/p5.xz); then compare_builds.sh from
# e802857 (.carry/cb/p5.xz, the last build it compared) to HEAD on phase 5's paths that the big-batch
# and W2 work since left alone or should not have slowed. Results: $OUT/e2.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/e2; rm -rf $R; mkdir -p $R/rec B0/build
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .e2.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/e2.tgz; }
( exec >/dev/null 2>&1; while sleep 20; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/e/p5.xz > build/phase5_batched; xz -dc .carry/cb/p5.xz > B0/build/phase5_batched; chmod +x build/phase5_batched B0/build/phase5_batched
t "build $(md5sum < build/phase5_batched | cut -c1-12) before $(md5sum < B0/build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
if [ -n "${W2_HS:-}" ]; then
  STAGES=w2 NO_BUILD=1 RECORDS_DIR=$R/w2rec timeout ${W2_LIMIT:-150} scripts/bench_frameworks.sh > $R/w2.log 2>&1; t "w2 $W2_HS rc $?"
  mkdir -p $R/logs-w2; cp build/bench_frameworks/logs/*.log $R/logs-w2/ 2>/dev/null; pack
fi
if [ "${SKIP_B:-0}" != 1 ]; then
STAGES=sweep SWEEP_BATCHES=8192 NO_BUILD=1 RECORDS_DIR=$R/rec timeout 200 scripts/bench_frameworks.sh > $R/sweep.log 2>&1; t "sweep rc $?"
mkdir -p $R/logs-sweep; cp build/bench_frameworks/logs/*.log $R/logs-sweep/ 2>/dev/null; pack
STAGES=gemm BATCHES="1024 8192" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 200 scripts/bench_gemm.sh > $R/gemm.log 2>&1; t "gemm rc $?"
cp -r build/bench_gemm/logs $R/logs-gemm 2>/dev/null; pack
fi
ONLY="${ONLY:-^(w1-p5-own-fp(32|16)|w1-nodrop-p5-own-fp32|w1-p5-cublas-fp32|w1-p5-persistent|w1-p5-pipelined|w1-p5-cluster32|w1-b(2048|8192)-p5-own-fp(32|16)|w2-h128-p5-(cluster|own-fp16)|w2-h1024-p5-(own-fp16|own-fp32|grid))$}" \
  ROUNDS=${ROUNDS:-2} NO_BUILD=1 timeout ${CMP_LIMIT:-300} scripts/compare_builds.sh B0 $R/compare_builds.log > $R/compare.out 2>&1; t "compare rc $?"
if [ "${NCU:-1}" = 1 ]; then  # the hidden layers' fused backward passes at h = 4,096 (~67% of the copy ceiling in the step)
  D=.carry/data/mnist; mkdir -p $R/ncu
  timeout 150 ncu --kernel-name regex:fused_update_bwd_kernel --launch-skip 40 --launch-count 4 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    build/phase5_batched --data $D --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --layers 784,4096,4096,4096,10 \
    --steps 30 --no-cupti --out $R/ncu --tag ncu > $R/ncu/fb-h4096.txt 2>&1; t "ncu rc $?"
fi
kill $WD 2>/dev/null; pack; t done
grep -v "^\s*$" $R/sweep.log $R/gemm.log 2>/dev/null | cut -c1-160 | tail -30; cat $R/compare_builds.log
