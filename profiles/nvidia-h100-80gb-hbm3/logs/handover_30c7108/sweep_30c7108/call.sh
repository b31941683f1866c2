#!/usr/bin/env bash
# The cluster hand-over as the default (.carry/h/p5.xz, NB_GIT_COMMIT): compare_builds.sh of 821baba's
# build (.carry/b/p5.xz) against it on W1's paths and W2 at h = 128 and 1,024, then W2's width sweep
# at h = 2,048 ... 8,192, every path, with both twins. Results: $OUT/f5.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/f5; rm -rf $R; mkdir -p $R/rec B0/build
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .f5.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/f5.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; [ -x build/phase5_batched ] && [ "$(md5sum < build/phase5_batched | cut -c1-12)" = "$(xz -dc .carry/h/p5.xz | md5sum | cut -c1-12)" ] || xz -dc .carry/h/p5.xz > build/phase5_batched
xz -dc .carry/b/p5.xz > B0/build/phase5_batched; chmod +x build/phase5_batched B0/build/phase5_batched
t "new $(md5sum < build/phase5_batched | cut -c1-12) old $(md5sum < B0/build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 99 build/phase5_batched --data $D --optimizer sgd --lr 0.003 --precision fp16 --dropout 0.2 --layers 784,1100,1100,1100,10 --fp16-stream staged --steps 3 --no-cupti --out $R --tag san-racecheck > $R/racecheck.log 2>&1
t "racecheck (staged, h = 1,100) rc $? $(grep -E 'RACECHECK SUMMARY' $R/racecheck.log | head -1) $(grep -h '^note' $R/racecheck.log | head -2 | tr '\n' ' ')"
ONLY="^(w1-p5-own-fp(32|16)|w1-b8192-p5-own-fp(32|16)|w2-h128-p5-own-fp16|w2-h128-p5-cluster|w2-h1024-p5-own-fp16|w2-h1024-p5-grid)$" ROUNDS=2 REPEATS=3 NO_BUILD=1 \
  timeout ${CMP_LIMIT:-100} scripts/compare_builds.sh B0 $R/compare_builds.log > $R/compare.out 2>&1; t "compare rc $?"; pack
STAGES=w2 W2_HS="${W2_HS:-2048 4096 8192}" NO_BUILD=1 RECORDS_DIR=$R/rec timeout ${LIMIT:-380} scripts/bench_frameworks.sh > $R/w2.log 2>&1; t "w2 rc $?"
mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
kill $WD 2>/dev/null; pack; t done
tail -22 $R/compare_builds.log; grep -v "^\s*$" $R/w2.log | cut -c1-160 | tail -12
