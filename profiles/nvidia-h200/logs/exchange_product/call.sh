#!/usr/bin/env bash
# One product phase of W2's grid step (5g) alone, per way of reading the exchanged activation
# (tools/exchange_product): the record, the console, and a short run under compute-sanitizer memcheck.
# Carry .carry/bins/ep_tool.xz (build/tools/exchange_product built on the host at the commit named by
# EP_COMMIT). Results: $OUT/ep.tgz. About a minute.
set -u
: "${EP_COMMIT:?name the commit of the carried build}"
R=build/ep; rm -rf $R; mkdir -p $R/rec
mkdir -p build/tools; xz -dc .carry/bins/ep_tool.xz > build/tools/exchange_product; chmod +x build/tools/exchange_product
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1 | tee $R/device.txt
NB_GIT_COMMIT=$EP_COMMIT NB_GIT_DIRTY=0 timeout 240 build/tools/exchange_product --out $R/rec --tag default > $R/run.log 2>&1
echo "exchange_product rc $?" | tee -a $R/steps.txt
NB_GIT_COMMIT=$EP_COMMIT NB_GIT_DIRTY=0 timeout 240 compute-sanitizer --tool memcheck --error-exitcode 99 \
  build/tools/exchange_product --iters 20 --repeats 1 --warmup 0 --out $R/rec --tag memcheck > $R/memcheck.log 2>&1
echo "memcheck rc $?: $(grep -c 'ERROR SUMMARY: 0 errors' $R/memcheck.log) clean" | tee -a $R/steps.txt
tar czf $OUT/ep.tgz $R
cat $R/run.log $R/steps.txt
