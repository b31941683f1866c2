#!/usr/bin/env bash
# scripts/validate_sweep.sh — the MLP trainers' --validate (common/mlp/validate.h) at awkward shapes
# on every path: phase 4 fp32/fp16, phase 5 own fp32 (its plan, and --fp32-gemm tile and tf32x3:
# every product on the SIMT tile, every one on step 5's 3xTF32; --backward branched and paired at
# every batch, where auto picks one by the batch) and fp16 (also --fp16-gemm mma: every
# product on step 6; --fp16-gemm wgmma: the first layer's products on step 9), both with --row-chain on (two hidden layers whose layout fits; the others are
# refused with exit 2 and logged as skips), cuBLASLt fp32/fp16, the
# persistent, pipelined and cluster32 kernels (fp32, two hidden layers, batch <= 64) and the cluster
# kernel (fp16 SGD without dropout, batch <= 32), each for 4 steps, up to batch 8,192 (W1's shape: its
# weight gradients past 16 split-K slices) and widths of 1,000. One line per run: each check's error,
# its tolerance and their ratio; then the worst ratio per precision (how much room the shape-derived
# tolerances leave).
#
#   scripts/validate_sweep.sh [LOG]     (default build/validate_sweep.log; needs a GPU and the data)
#
# Environment: DATA (default .carry/data/mnist or data/mnist), JOBS (build jobs, default nproc),
# DEPS_PREFIX, ONLY (an extended regex: only the paths whose command line matches it, e.g. 'mma'),
# NO_BUILD (1: run the programs already under build/). Exit status: 0 when every applicable run
# validated; 1 when one failed validation or exited with anything but 0 or 2 (2: this path does not
# take this shape, which it says in a line).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
LOG="${1:-build/validate_sweep.log}"
DATA="${DATA:-data/mnist}"
[ -d .carry/data/mnist ] && [ "$DATA" = data/mnist ] && DATA=.carry/data/mnist
if [ -z "${DEPS_PREFIX:-}" ] && [ -d .carry/deps ]; then export DEPS_PREFIX=.carry/deps; fi
mkdir -p build "$(dirname "$LOG")"
[ "${NO_BUILD:-0}" = 1 ] ||
  make -j"${JOBS:-$(nproc)}" ${DEPS_PREFIX:+DEPS_PREFIX=$DEPS_PREFIX} build/phase4_mlp build/phase5_batched >build/validate_sweep_make.log 2>&1 ||
  { tail -n 20 build/validate_sweep_make.log; echo "validate_sweep: build failed"; exit 1; }
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
COMMON=(--data "$DATA" --steps 4 --warmup 0 --repeats 1 --no-cupti --out "$SCRATCH" --validate)
SHAPES=("--batch 32 --layers 784,128,64,10"
        "--batch 1000 --layers 784,200,200,10"
        "--batch 1 --layers 784,37,10"
        "--batch 17 --layers 784,37,200,10"
        "--batch 33 --layers 784,200,37,10 --optimizer sgd --lr 0.01"
        "--batch 31 --layers 784,100,300,10 --optimizer sgd --lr 0.01 --dropout 0"
        "--batch 64 --layers 784,1024,1024,10"
        "--batch 1000 --layers 784,200,200,10 --optimizer sgd --lr 0.01 --dropout 0"
        "--batch 256 --layers 784,10 --dropout 0"
        "--batch 4097 --layers 784,300,100,10"
        "--batch 8192 --layers 784,128,64,10"
        "--batch 1025 --layers 784,1000,1000,10 --optimizer sgd --lr 0.01 --dropout 0")
PATHS=("build/phase4_mlp --precision fp32" "build/phase4_mlp --precision fp16"
       "build/phase5_batched --precision fp32" "build/phase5_batched --precision fp16"
       "build/phase5_batched --precision fp32 --fp32-gemm tile" "build/phase5_batched --precision fp32 --fp32-gemm tf32x3"
       "build/phase5_batched --precision fp32 --backward branched" "build/phase5_batched --precision fp32 --backward paired"
       "build/phase5_batched --precision fp16 --fp16-gemm mma" "build/phase5_batched --precision fp16 --fp16-gemm wgmma"
       "build/phase5_batched --precision fp32 --row-chain on" "build/phase5_batched --precision fp16 --row-chain on"
       "build/phase5_batched --precision fp32 --gemm cublas" "build/phase5_batched --precision fp16 --gemm cublas"
       "build/phase5_batched --precision fp32 --launch persistent" "build/phase5_batched --precision fp32 --launch pipelined"
       "build/phase5_batched --precision fp32 --launch cluster32" "build/phase5_batched --precision fp16 --launch cluster")
fails=0
: >"$LOG"
for s in "${SHAPES[@]}"; do
  for p in "${PATHS[@]}"; do
    [ -n "${ONLY:-}" ] && ! [[ "$p" =~ $ONLY ]] && continue
    # shellcheck disable=SC2086
    out=$($p $s "${COMMON[@]}" 2>&1)
    rc=$?
    if [ $rc -eq 2 ]; then
      echo "skip  [$s] $p: $(echo "$out" | grep -m1 '^error:')" >>"$LOG"
      continue
    fi
    line=$(echo "$out" | awk '/^  validate /{gsub(/[()]/, ""); printf "%s %s / %s = %.2f; ", $2, $4, $6, ($6 > 0 ? $4 / $6 : 0)}')
    if [ $rc -ne 0 ] || [ -z "$line" ]; then fails=$((fails + 1)); st=FAIL; else st=ok; fi
    echo "$st    [$s] $p (exit $rc): $line" >>"$LOG"
  done
done
cat "$LOG"
# the worst error / tolerance ratio per precision and check
awk '/^ok/{prec = ($0 ~ /fp16/) ? "fp16" : "fp32"; n = split($0, parts, "; ");
     for (i = 1; i <= n; i++) { m = split(parts[i], w, " "); if (m < 5) continue; name = w[m - 5]; r = w[m] + 0;
       k = prec " " name; if (r > worst[k]) worst[k] = r } }
     END { for (k in worst) printf "worst error/tolerance %-28s %.2f\n", k, worst[k] }' "$LOG" | sort | tee -a "$LOG"
echo "validate_sweep: $fails failure(s); log $LOG" | tee -a "$LOG"
[ $fails -eq 0 ]
