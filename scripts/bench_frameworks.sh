#!/usr/bin/env bash
# scripts/bench_frameworks.sh — the yardstick in one short run: for each workload the notebook leads
# with, our fastest path, the fastest PyTorch mode (compiled-graph) and every JAX mode, on the same
# data, initial weights and batch order, one GPU, one run. Every "x fastest framework" of the report
# can then name a ratio whose two sides come from the same run. (The full benchmarks,
# scripts/bench_linreg.sh and scripts/bench_mlp.sh, run every mode of every twin; this is the subset
# that fits in about nine minutes.)
#
#   linreg  5M points x 200 epochs: phase 3 (default path), PyTorch compiled-graph, JAX jit-step and
#           jit-run (--validate, --profile).                                   tags headline[-<impl>]
#   w1      W1 (784-128-64-10, Adam, dropout 0.2, batch 32, 5 epochs): phase 5 own and pipelined,
#           PyTorch compiled-graph, JAX jit-step/jit-epoch/jit-run (--validate, --profile).
#                                                                          tags w1-own, w1-pipelined, w1-<impl>
#   match   W1 with dropout 0: phase 5 own and JAX jit-epoch/jit-run (losses compared step by step).
#                                                                          tags w1-nodrop-own, w1-nodrop-<impl>
#   w2      W2 (784-h-h-h-10, SGD, fp16) at h in $W2_HS: phase 5 own, grid (and cluster at 128), PyTorch
#           compiled-graph, JAX jit-epoch and jit-run.               tags w2-h<h>-own, -grid, -cluster, -<impl>
#   sweep   the W1 model at batch in $SWEEP_BATCHES (2 epochs): phase 5 own (its default GEMM plan;
#           --fp32-gemm tile: the 32 x 64 SIMT tile for every product; --fp32-gemm fma: the CUDA cores
#           only, GEMM step 7 where the plan puts step 5; fp16; fp16 with every product on
#           step 6, --fp16-gemm mma), phase 5 on cuBLASLt (fp32, fp16), PyTorch compiled-graph (and with
#           TF32 matmuls allowed: a labelled comparison row, never the yardstick), JAX jit-run; the
#           twins in $SWEEP_TWINS (default "torch torch-tf32 jax": a run may name fewer, and its
#           records then hold only those).
#                               tags batch-sweep-b<B>[-tile|-fma|-fp16|-fp16-mma|-cublaslt-<p>|-<impl>[-tf32]]
#
# Environment: RECORDS_DIR (default profiles/<device-slug>), DATA (.carry/data/mnist or data/mnist),
# PYTHON, JOBS (16), STAGES ("linreg w1 match w2 sweep"), W2_HS ("128 8192"), SWEEP_BATCHES
# ("32 1024 8192"), TWIN_MODE (the compiled-graph twin's inductor mode, default "default"), PACK
# (a .tgz rewritten with the records after every stage: what a run cut short still hands back),
# NO_BUILD (1: run the programs already under build/, e.g. built elsewhere for this GPU and carried).
# Without JAX the JAX runs print one skip line each. Exit status: 0 when every run succeeded.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
if [ -z "${DEPS_PREFIX:-}" ] && [ -d .carry/deps ]; then export DEPS_PREFIX=.carry/deps; fi
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-16}"
STAGES="${STAGES:-linreg w1 match w2 sweep}"
W2_HS="${W2_HS:-128 8192}"
SWEEP_BATCHES="${SWEEP_BATCHES:-32 1024 8192}"
SWEEP_TWINS="${SWEEP_TWINS:-torch torch-tf32 jax}"
TWIN_MODE="${TWIN_MODE:-default}"
if [ -z "${DATA:-}" ]; then
  DATA=data/mnist
  [ -d .carry/data/mnist ] && DATA=.carry/data/mnist
fi
WORK=build/bench_frameworks
LOGS=$WORK/logs
mkdir -p "$LOGS"
FAILS=0
T_START=$(date +%s)
HAVE_JAX=0
"$PYTHON" -c 'import jax' >/dev/null 2>&1 && HAVE_JAX=1

note() { printf '[%4ds] %s\n' $(( $(date +%s) - T_START )) "$*"; }
run() {  # run NAME CMD...: output to $LOGS/NAME.log, the last line shown; a non-zero exit counts
  local name="$1"
  shift
  local t0=$(date +%s)
  "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    FAILS=$((FAILS + 1))
    note "FAILED $name (exit $rc): $*"
    tail -n 8 "$LOGS/$name.log" | sed 's/^/    | /'
  else
    note "ok     $name ($(( $(date +%s) - t0 )) s): $(grep -h '^record\|^jax_\|^pytorch_\|^phase' "$LOGS/$name.log" | tail -n 1 | cut -c1-150)"
  fi
}
jax() {  # jax NAME SCRIPT ARGS...
  local name="$1"
  shift
  if [ "$HAVE_JAX" = 1 ]; then run "$name" "$PYTHON" "$@"; else note "skip   $name: JAX is not importable by $PYTHON"; fi
}
pack() {
  [ -n "${PACK:-}" ] || return 0
  local d="${RECORDS_DIR:-profiles/$SLUG}"
  tar czf "$PACK.tmp" --exclude="*.trace.json" -C "$d" . -C "$PWD/$WORK" logs 2>/dev/null && mv "$PACK.tmp" "$PACK"
}
has() { [[ " $STAGES " == *" $1 "* ]]; }
twin() { [[ " $SWEEP_TWINS " == *" $1 "* ]]; }

if [ "${NO_BUILD:-0}" = 1 ]; then
  note "no build (NO_BUILD=1)"
else
  note "build"
  make -j"$JOBS" build/phase1_naive build/phase3_fused_streams build/phase5_batched >"$LOGS/build.log" 2>&1 || {
    tail -n 20 "$LOGS/build.log"; exit 1; }
fi
SLUG=$("$PYTHON" -c 'import sys; sys.path.insert(0, "baselines/pytorch"); import common, torch; print(common.device_slug(torch.cuda.get_device_properties(0).name))')
O=()
[ -n "${RECORDS_DIR:-}" ] && O=(--out "$RECORDS_DIR") && mkdir -p "$RECORDS_DIR"
R=("${O[@]}" --data "$DATA")

if has linreg; then
  note "stage linreg (5M x 200)"
  L=(--n 5000000 --warmup 1 --repeats 5 --tag headline "${O[@]}")
  run lin-p1data build/phase1_naive --n 5000000 --epochs 1 --no-cupti --out "$WORK/scratch" --tag data --save-data "$WORK/lin5m.npy"
  run lin-p3 build/phase3_fused_streams "${L[@]}" --validate
  run lin-torch "$PYTHON" baselines/pytorch/linreg.py --data "$WORK/lin5m.npy" --impl compiled-graph --validate --warmup 1 --repeats 5 --tag headline --profile "${O[@]}"
  jax lin-jax baselines/jax/linreg.py --data "$WORK/lin5m.npy" --impl jit-step,jit-run --validate --warmup 1 --repeats 5 --tag headline --profile "${O[@]}"
  rm -f "$WORK/lin5m.npy"
  pack
fi

if has w1; then
  note "stage w1"
  run w1-p5 build/phase5_batched "${R[@]}" --epochs 5 --repeats 3 --tag w1-own --save-init "$WORK/w1init" --save-order "$WORK/w1order.npy"
  run w1-p5pipe build/phase5_batched "${R[@]}" --epochs 5 --repeats 3 --launch pipelined --tag w1-pipelined
  run w1-torch "$PYTHON" baselines/pytorch/mlp.py "${R[@]}" --epochs 5 --repeats 3 --init "$WORK/w1init" --order "$WORK/w1order.npy" --impl compiled-graph --compile-mode "$TWIN_MODE" --profile --tag "w1-{impl}"
  jax w1-jax baselines/jax/mlp.py "${R[@]}" --epochs 5 --repeats 3 --init "$WORK/w1init" --order "$WORK/w1order.npy" --impl jit-step,jit-epoch,jit-run --validate --profile --tag "w1-{impl}"
  pack
fi

if has match; then
  note "stage match (W1, dropout 0)"
  run m-p5 build/phase5_batched "${R[@]}" --epochs 5 --dropout 0 --tag w1-nodrop-own --save-init "$WORK/minit" --save-order "$WORK/morder.npy"
  jax m-jax baselines/jax/mlp.py "${R[@]}" --epochs 5 --dropout 0 --init "$WORK/minit" --order "$WORK/morder.npy" --impl jit-epoch,jit-run --validate --tag "w1-nodrop-{impl}"
  pack
fi

if has w2; then
  note "stage w2 (h in $W2_HS)"
  for h in $W2_HS; do
    W2=(--layers "784,$h,$h,$h,10" --optimizer sgd --lr 0.003 --dropout 0 --precision fp16)
    run "w2-$h-p5" build/phase5_batched "${R[@]}" "${W2[@]}" --steps 5000 --tag "w2-h$h-own" --save-init "$WORK/w2init$h" --save-order "$WORK/w2order$h.npy"
    run "w2-$h-p5grid" build/phase5_batched "${R[@]}" "${W2[@]}" --steps 5000 --launch grid --tag "w2-h$h-grid"
    [ "$h" = 128 ] && run "w2-$h-p5cluster" build/phase5_batched "${R[@]}" "${W2[@]}" --steps 5000 --launch cluster --tag "w2-h$h-cluster"
    run "w2-$h-torch" "$PYTHON" baselines/pytorch/mlp.py "${R[@]}" "${W2[@]}" --steps 500 --init "$WORK/w2init$h" --order "$WORK/w2order$h.npy" --impl compiled-graph --compile-mode "$TWIN_MODE" --profile --tag "w2-h$h-{impl}"
    jax "w2-$h-jax" baselines/jax/mlp.py "${R[@]}" "${W2[@]}" --steps 500 --init "$WORK/w2init$h" --order "$WORK/w2order$h.npy" --impl jit-epoch,jit-run --validate --profile --tag "w2-h$h-{impl}"
    pack
  done
fi

if has sweep; then
  note "stage sweep (batch in $SWEEP_BATCHES, 2 epochs)"
  for b in $SWEEP_BATCHES; do
    run "sweep-$b" build/phase5_batched "${R[@]}" --batch "$b" --epochs 2 --workload mlp_batch_sweep --tag "batch-sweep-b$b" --save-init "$WORK/sw${b}init" --save-order "$WORK/sw${b}order.npy"
    S=("${R[@]}" --batch "$b" --epochs 2 --workload mlp_batch_sweep --init "$WORK/sw${b}init" --order "$WORK/sw${b}order.npy")
    run "sweep-$b-tile" build/phase5_batched "${R[@]}" --batch "$b" --epochs 2 --workload mlp_batch_sweep --fp32-gemm tile --tag "batch-sweep-b$b-tile"
    run "sweep-$b-fma" build/phase5_batched "${R[@]}" --batch "$b" --epochs 2 --workload mlp_batch_sweep --fp32-gemm fma --tag "batch-sweep-b$b-fma"
    run "sweep-$b-fp16" build/phase5_batched "${R[@]}" --batch "$b" --epochs 2 --workload mlp_batch_sweep --precision fp16 --tag "batch-sweep-b$b-fp16"
    run "sweep-$b-fp16-mma" build/phase5_batched "${R[@]}" --batch "$b" --epochs 2 --workload mlp_batch_sweep --precision fp16 --fp16-gemm mma --tag "batch-sweep-b$b-fp16-mma"
    for pr in fp32 fp16; do
      run "sweep-$b-lt-$pr" build/phase5_batched "${R[@]}" --batch "$b" --epochs 2 --workload mlp_batch_sweep --gemm cublas --precision "$pr" --tag "batch-sweep-b$b-cublaslt-$pr"
    done
    twin torch && run "sweep-$b-torch" "$PYTHON" baselines/pytorch/mlp.py "${S[@]}" --impl compiled-graph --compile-mode "$TWIN_MODE" --tag "batch-sweep-b$b-{impl}"
    # faster arithmetic, not the same numerics: drawn beside the others, never the yardstick
    twin torch-tf32 && run "sweep-$b-torch-tf32" "$PYTHON" baselines/pytorch/mlp.py "${S[@]}" --impl compiled-graph --compile-mode "$TWIN_MODE" --tf32 --tag "batch-sweep-b$b-{impl}-tf32"
    twin jax && jax "sweep-$b-jax" baselines/jax/mlp.py "${S[@]}" --impl jit-run --validate --tag "batch-sweep-b$b-{impl}"
    pack
  done
fi
pack
note "done: $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
