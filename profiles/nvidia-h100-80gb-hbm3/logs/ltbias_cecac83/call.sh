#!/usr/bin/env bash
# The cuBLASLt path's bias gradients in slices (lt_bias_grad.cuh): its GPU test (plainly and under
# memcheck), --validate on the cuBLASLt path at batch 4,097 and 8,192 (fp32, fp16), the old build
# (.carry/j/p5.xz) against the new at batch 8,192 (2 rounds), then the cuBLASLt rows of the batch sweep
# (batch 32 ... 8,192, fp32 and fp16, bench_frameworks.sh's arguments and tags). $OUT/j33.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j33; rm -rf $R; mkdir -p $R/rec $R/ab $R/val
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j33.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j33.tgz; }
mkdir -p build/tests; xz -dc .carry/j/p5bg.xz > build/phase5_batched; xz -dc .carry/j/p5.xz > build/p5_old
xz -dc .carry/j/tests_bg.xz > build/tests/gpu_tests; chmod +x build/phase5_batched build/p5_old build/tests/gpu_tests
t "p5 $(md5sum < build/phase5_batched | cut -c1-12) old $(md5sum < build/p5_old | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 120 build/tests/gpu_tests -tc='*bias gradients*' > $R/test.log 2>&1; t "gpu test rc $? $(grep -E '^\[doctest\] (test cases|assertions)' $R/test.log | tr '\n' ' ')"
timeout 200 compute-sanitizer --tool memcheck build/tests/gpu_tests -tc='*bias gradients*' > $R/test_memcheck.log 2>&1; t "memcheck rc $? $(grep -E 'ERROR SUMMARY' $R/test_memcheck.log)"
D="--data .carry/data/mnist --workload mlp_batch_sweep --gemm cublas"
for b in 4097 8192; do for pr in fp32 fp16; do
  timeout 120 build/phase5_batched $D --batch $b --precision $pr --steps 6 --validate --no-cupti --out $R/val --tag val-b$b-$pr > $R/val/b$b-$pr.log 2>&1
  t "validate b=$b $pr rc $? $(grep -m1 -i 'validat' $R/val/b$b-$pr.log | cut -c1-120)"
done; done
pack
for r in 1 2; do for v in old new; do for pr in fp32 fp16; do
  bin=build/phase5_batched; [ $v = old ] && bin=build/p5_old
  timeout 60 $bin $D --batch 8192 --precision $pr --epochs 2 --no-cupti --out $R/ab --tag ab-$v-$pr-r$r > $R/ab/$v-$pr-r$r.log 2>&1; t "ab $v $pr r$r rc $?"
done; done; done
python3 - $R/ab <<'PY' | tee $R/ab/summary.txt
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    j = json.load(open(f)); print(j['config']['tag'], '%.1f us a step' % (1e3 * j['timing']['per_step_ms']['median']), j['metrics']['param_checksum'])
PY
pack
for b in 32 64 128 256 512 1024 2048 4096 8192; do for pr in fp32 fp16; do
  timeout 90 build/phase5_batched --data .carry/data/mnist --out $R/rec --batch $b --epochs 2 --workload mlp_batch_sweep --gemm cublas --precision $pr --tag batch-sweep-b$b-cublaslt-$pr > $R/rec/b$b-$pr.log 2>&1
  t "sweep b=$b $pr rc $? $(grep -m1 -o 'median[^,]*' $R/rec/b$b-$pr.log)"
done; done
pack; t done
