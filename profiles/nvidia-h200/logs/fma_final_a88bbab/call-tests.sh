#!/usr/bin/env bash
# a88bbab's GEMM GPU tests (the GEMM cases and the gathered bytes, from a test binary of those two
# files) and memcheck on step 7 and the gathered bytes.
set -u
R=build/ft; rm -rf $R; mkdir -p $R
xz -dc .carry/bins/gemm_tests.xz > build/gemm_tests; chmod +x build/gemm_tests
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt 2>&1
timeout 200 build/gemm_tests -tc='*GEMM*,*gathered bytes*' > $R/tests.log 2>&1; echo "tests rc $?: $(tail -2 $R/tests.log | tr '\n' ' ')"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 build/gemm_tests -tc='*step 7*,*gathered bytes*' > $R/memcheck.log 2>&1; echo "memcheck rc $?: $(tail -1 $R/memcheck.log)"
tar czf $OUT/ft.tgz $R
