# the second command on the same machine (the first's full test run had hit its 150 s limit):
mkdir -p B $OUT/t; [ -x B/gpu_tests ] || xz -dc .carry/j/testsnew.xz > B/gpu_tests; chmod +x B/gpu_tests; timeout 95 B/gpu_tests -sf="*persistent*,*fused*,*kernels*" > $OUT/t/tests2.log 2>&1; echo rc $?; grep -E "test cases|assertions" $OUT/t/tests2.log; grep -B3 -A6 ERROR $OUT/t/tests2.log | head -30
