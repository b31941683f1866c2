#!/usr/bin/env bash
# W2's width sweep (W2_HS) with both twins, at NB_GIT_COMMIT (.carry/n/p5.xz). Results: $OUT/h5.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/h5; rm -rf $R; mkdir -p $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .h5.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/h5.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/n/p5.xz > build/phase5_batched; chmod +x build/phase5_batched
t "p5 $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
STAGES=w2 W2_HS="${W2_HS:?}" NO_BUILD=1 RECORDS_DIR=$R/rec timeout ${LIMIT:-540} scripts/bench_frameworks.sh > $R/w2.log 2>&1; t "w2 rc $?"
mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
kill $WD 2>/dev/null; pack; t done
grep -v "^\s*$" $R/w2.log | cut -c1-170 | tail -24
