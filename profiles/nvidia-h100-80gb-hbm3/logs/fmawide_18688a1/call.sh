#!/usr/bin/env bash
# GEMM step 11 (the gathered forward on the CUDA cores in 64 x 128 tiles): its GPU test plainly and under
# memcheck, --validate with --fp32-gemm fma where it runs (batch 8,192, 7,681) and where it does not
# (4,097); the GEMM benchmark at batch 8,192 (3 rounds; the record of the last); W1's step with
# --fp32-gemm fma, the build before (.carry/j/p5bg.xz, cecac83) against this one, 2 rounds; and the paths
# it leaves alone (the default fp32 and fp16 at 8,192 and 32): the same checksums. $OUT/j36.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j36; rm -rf $R; mkdir -p $R/rec $R/ab $R/val $R/gemm
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j36.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j36.tgz; }
mkdir -p build/tests; xz -dc .carry/j/p5wide.xz > build/phase5_batched; xz -dc .carry/j/p5bg.xz > build/p5_old
xz -dc .carry/j/tests_wide.xz > build/tests/gpu_tests; chmod +x build/phase5_batched build/p5_old build/tests/gpu_tests
t "p5 $(md5sum < build/phase5_batched | cut -c1-12) old $(md5sum < build/p5_old | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 200 build/tests/gpu_tests -tc='*step 11*,*steps 5, 6 and 7 on the gathered*' > $R/test.log 2>&1; t "gpu tests rc $? $(grep -E '^\[doctest\] (test cases|assertions)' $R/test.log | tr '\n' ' ')"
timeout 200 compute-sanitizer --tool memcheck build/tests/gpu_tests -tc='*step 11*' > $R/test_memcheck.log 2>&1; t "memcheck rc $? $(grep -E 'ERROR SUMMARY' $R/test_memcheck.log)"
for b in 8192 7681 4097; do
  timeout 120 build/phase5_batched --data .carry/data/mnist --batch $b --fp32-gemm fma --steps 6 --validate --no-cupti --out $R/val --tag val-b$b > $R/val/b$b.log 2>&1
  t "validate b=$b rc $? $(grep -m1 -o 'forward 0[^|]*' $R/val/b$b.log | head -1 | cut -c1-60)"
done
pack
for r in 1 2 3; do
  timeout 60 build/phase5_batched --data .carry/data/mnist --batch 8192 --gemm-compare --out $R/gemm --tag gemm-b8192 > $R/gemm/r$r.log 2>&1; t "gemm r$r rc $?"
done
grep -E "L0 forward +8192 x +128 x +784" $R/gemm/r*.log | cut -c1-120
D="--data .carry/data/mnist --workload mlp_batch_sweep --epochs 2 --no-cupti"
for r in 1 2; do for v in old new; do
  bin=build/phase5_batched; c=$NB_GIT_COMMIT; [ $v = old ] && bin=build/p5_old c=cecac83
  NB_GIT_COMMIT=$c timeout 60 $bin $D --batch 8192 --fp32-gemm fma --out $R/ab --tag ab-fma-$v-r$r > $R/ab/fma-$v-r$r.log 2>&1; t "fma $v r$r rc $?"
done; done
for v in old new; do
  bin=build/phase5_batched; c=$NB_GIT_COMMIT; [ $v = old ] && bin=build/p5_old c=cecac83
  for cfg in "8192 fp32" "8192 fp16" "32 fp32" "32 fp16"; do set -- $cfg
    NB_GIT_COMMIT=$c timeout 60 $bin $D --batch $1 --precision $2 --out $R/ab --tag ab-same-b$1-$2-$v > $R/ab/same-b$1-$2-$v.log 2>&1; t "same b=$1 $2 $v rc $?"
  done
done
python3 - $R/ab <<'PY' | tee $R/ab/summary.txt
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    j = json.load(open(f)); plan = [p['rung'] for p in j['metrics'].get('gemm_plan', []) if p['product'] == 'forward 0']
    print(j['config']['tag'], '%.2f us a step' % (1e3 * j['timing']['per_step_ms']['median']), j['metrics']['param_checksum'], plan)
PY
pack; t done
