#!/usr/bin/env bash
# --next-forward auto (pass where a row slice holds at most two sub-tiles and every cluster fits):
# the plan it picks at h = 1,024 / 2,048 / 4,096; compare_builds.sh of d2c18ad's build
# (.carry/i/p5.xz) against this one (.carry/n/p5.xz, NB_GIT_COMMIT) on W1's paths and W2's
# cluster and grid rungs; then W2's width sweep at h = 1,024 with both twins. Results: $OUT/h4.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/h4; rm -rf $R; mkdir -p $R/rec $R/plan B0/build
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .h4.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/h4.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/n/p5.xz > build/phase5_batched; xz -dc .carry/i/p5.xz > B0/build/phase5_batched
chmod +x build/phase5_batched B0/build/phase5_batched
t "new $(md5sum < build/phase5_batched | cut -c1-12) old $(md5sum < B0/build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --precision fp16"
for h in 1024 2048 4096; do
  timeout 30 build/phase5_batched --data $D $W --dropout 0 --layers 784,$h,$h,$h,10 --steps 200 --no-cupti --out $R/plan --tag plan-h$h > $R/plan/h$h.log 2>&1
  t "plan h=$h rc $? $(grep -h 'backward 0 ' $R/plan/h$h.log | tr -s ' ' | tr '\n' ' ')"
done
ONLY="^(w1-p5-own-fp(32|16)|w1-b8192-p5-own-fp(32|16)|w2-h128-p5-own-fp16|w2-h128-p5-cluster|w2-h1024-p5-grid)$" ROUNDS=2 REPEATS=3 NO_BUILD=1 \
  timeout ${CMP_LIMIT:-120} scripts/compare_builds.sh B0 $R/compare_builds.log > $R/compare.out 2>&1; t "compare rc $?"; pack
tail -12 $R/compare_builds.log
STAGES=w2 W2_HS="${W2_HS:-1024}" NO_BUILD=1 RECORDS_DIR=$R/rec timeout ${LIMIT:-200} scripts/bench_frameworks.sh > $R/w2.log 2>&1; t "w2 rc $?"
mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
kill $WD 2>/dev/null; pack; t done
grep -v "^\s*$" $R/w2.log | cut -c1-160 | tail -12
