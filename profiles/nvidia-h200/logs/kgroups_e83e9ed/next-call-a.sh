#!/usr/bin/env bash
# The next calls, part a: a build of this folder's follow-ups ("new") against 7d4fc94's ("old").
# V names the build carried as .carry/bins/${V}_p5.xz and ${V}_tests.xz (with .carry/data):
#   V=kh: the per-product hybrid (branch kgroups-hybrid); V=k2: two k-tiles a first level and step 7 in
#   8 x 8 lane tiles (branch kgroups-level1).
# Part a: every GPU test case of the new build; --validate at 8,192 and 4,097 (300/100), 1,000
# (1,000/1,000), also with --fp32-gemm fma; Nsight Compute on the new steps 5-7 at 8,192. Part b
# (next-call-b.sh, on the still-warm machine, .carry/bins/s8g_p5.xz): the GEMM benchmark at 8,192 /
# 4,096 / 2,048 / 1,024 and W1's step at 1,024 ... 8,192, fp32 and fp16, alternating, 2 rounds.
set -u
V=${V:?V=kh or V=k2: the build to measure}
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/${V}a; rm -rf $R; mkdir -p $R/scratch $R/ab $R/ncu
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/${V}a.tmp.tgz --exclude='*.ncu-rep' --exclude=scratch $R 2>/dev/null; mv $OUT/${V}a.tmp.tgz $OUT/${V}a.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/kb
PIDS=""
xz -dc .carry/bins/${V}_p5.xz > build/kb/new & PIDS="$PIDS $!"
xz -dc .carry/bins/${V}_tests.xz > build/kb/gpu_tests & PIDS="$PIDS $!"
wait $PIDS; chmod +x build/kb/*
mkdir -p build/kb/data; cp -r .carry/data/mnist build/kb/data/; D=build/kb/data/mnist
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 150 build/kb/gpu_tests > $R/tests.log 2>&1; t "all GPU tests rc $?: $(tail -3 $R/tests.log | tr '\n' ' ')"
pack
VA="--data $D --no-cupti --epochs 1 --validate --validate-steps 1"
for c in "8192|--precision fp32" "8192|--precision fp16" "4097|--precision fp32 --layers 784,300,100,10" "4097|--precision fp16 --layers 784,300,100,10" "1000|--precision fp16 --layers 784,1000,1000,10" "8192|--fp32-gemm fma" "4097|--fp32-gemm fma --layers 784,300,100,10"; do
  IFS='|' read -r b a <<<"$c"
  timeout 100 build/kb/new $VA --batch $b $a --out $R/scratch --tag val > $R/val-$b-${a// /_}.log 2>&1
  echo "validate b=$b $a rc $?: $(grep -c ' ok$' $R/val-$b-${a// /_}.log) ok, $(grep -ci 'fail' $R/val-$b-${a// /_}.log) fail" | tee -a $R/validate.txt
done
t validate; pack
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters"
for k in "f16wg|fp16|gemm_f16mma_kernel.*0>, nb::mlp::GatherView" "x3wg|fp32|gemm_tf32x3_kernel.*0>, nb::mlp::GatherView" "f16fwd|fp16|gemm_f16mma_kernel.*GemmProblem<nb::mlp::GatherView" "x3fwd|fp32|gemm_tf32x3_kernel.*GemmProblem<nb::mlp::GatherView" "fmafwd|fp32|gemm_fma64_kernel.*GemmProblem<nb::mlp::GatherView"; do
  IFS='|' read -r kn pr rx <<<"$k"
  timeout 100 ncu --kernel-name-base demangled --kernel-name "regex:$rx" --launch-skip 2 --launch-count 1 $S --import-source yes -o $R/ncu/$kn build/kb/new --batch 8192 --precision $pr --gemm-compare --data $D --out $R/scratch --tag ncu > $R/ncu/$kn.out 2>&1
  ncu -i $R/ncu/$kn.ncu-rep > $R/ncu/$kn.txt 2>&1
  ncu -i $R/ncu/$kn.ncu-rep --page source --csv --print-source sass > $R/ncu/$kn-sass.csv 2>&1; t "ncu $kn rc $?"
done
for f in $R/ncu/*-sass.csv; do python3 scripts/ncu_sass_summary.py $f > ${f%.csv}-summary.txt 2>&1; gzip -f $f; done
kill $WD 2>/dev/null; pack; t packed
