#!/usr/bin/env bash
# The final tree's GPU tests, all of them, plainly and under compute-sanitizer memcheck (make
# test-gpu's two runs), from a test binary built here.
set -u
R=build/lt; rm -rf $R; mkdir -p $R build/tests
xz -dc .carry/bins/tests_final.xz > build/tests/gpu_tests; chmod +x build/tests/gpu_tests
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1
timeout 150 build/tests/gpu_tests > $R/gpu_tests.log 2>&1; echo "gpu_tests rc $?: $(tail -2 $R/gpu_tests.log | tr '\n' ' ')"
timeout 220 compute-sanitizer --tool memcheck --error-exitcode 99 build/tests/gpu_tests > $R/gpu_tests_memcheck.log 2>&1; echo "memcheck rc $?: $(tail -3 $R/gpu_tests_memcheck.log | tr '\n' ' ')"
tar czf $OUT/lt.tgz $R
