#!/usr/bin/env bash
# (j47, run on the machine j46 had just used, held warm) W2's width sweep at h = 2,048 with both twins
# at 31e617a (.carry/j/p5fix.xz: the masters' L2 hint as a kernel instance of its own): the records
# phase5_batched__w2-h2048-{own,grid}, pytorch_mlp__w2-h2048-compiled-graph, jax_mlp__w2-h2048-jit-*.
export NB_GIT_COMMIT=31e617a; R=build/j47; mkdir -p $R/rec build; xz -dc .carry/j/p5fix.xz > build/phase5_batched; chmod +x build/phase5_batched; nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.txt; STAGES=w2 W2_HS=2048 NO_BUILD=1 RECORDS_DIR=$R/rec timeout 150 scripts/bench_frameworks.sh > $R/w2.log 2>&1; echo "w2 rc $?"; mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null; tar czf $OUT/j47.tgz $R; grep -v "^\s*$" $R/w2.log | cut -c1-170 | tail -8
