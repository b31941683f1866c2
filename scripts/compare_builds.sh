#!/usr/bin/env bash
# scripts/compare_builds.sh — did a restructure move the phases' results or speed? Builds the phases
# it compares at two commits (BEFORE in a git worktree under build/compare/, AFTER = this tree), then
# runs both builds of each configuration back to back on the same GPU and compares the results
# (MLP: the final parameters' metrics.param_checksum; linear regression: the final w, b and train
# loss; both must be bit-identical) and the median time (must stay within TOL_PCT, default 3%). One
# line per configuration. Linear regression: phases 1 and 2 with --deterministic (1,000,003 and 5M
# points), phase 3 at 5M on its persistent path and on the graph path with --deterministic; 200
# epochs.
#
#   scripts/compare_builds.sh BEFORE [LOG]     (default LOG build/compare_builds.log; needs a GPU and the data)
#
# BEFORE is a commit of this repository, or a directory holding that commit's tree (for a copy of
# the working tree without a usable .git, e.g. `git archive BEFORE | tar -x -C .carry/before`).
#
# Paths: phase 4 fp32/fp16; phase 5 own GEMM fp32/fp16, cuBLASLt fp32/fp16, the persistent and
# pipelined kernels (fp32 W1 shapes; also their generic instances at 1, 2, 4 and 8 units a block),
# cluster32 (W1; its generic instance, SGD; 784-37-30-10 at batch 64), the cluster kernel (fp16 W2 h = 128, SGD,
# no dropout) and the grid kernel (fp16 W2 h = 1,024); W1's model at batch 2,048 and 8,192 on the own GEMMs, fp32 and fp16 (the batch sweep's
# big-batch paths: GEMM steps 5 and 6, the branched backward; 2 and 5 epochs, 58 and 35 steps a run).
# W1: 784-128-64-10, Adam, dropout 0.2 (and 0), batch 32, one epoch; W2: 784-h-h-h-10,
# SGD lr 0.003, no dropout, batch 32, 500 steps. ROUNDS (default 3) rounds of REPEATS (default 5) timed runs after one
# warm-up, --no-cupti; the two builds alternate which runs first from round to round, and each
# side's median is taken over all its rounds' samples (the launch-bound configurations drift by
# several percent between back-to-back processes; one round of each cannot resolve 3%). Every
# round's checksum must be the same.
# Environment: DATA (default .carry/data/mnist or data/mnist), JOBS, DEPS_PREFIX, REPEATS, ROUNDS, TOL_PCT,
# NO_BUILD=1 (the binaries are already in BEFORE's build/ and this tree's: built on another machine;
# BEFORE must then be a directory),
# ONLY (a regex: only the configurations whose label matches, and only their phases built; none
# matching: exit 2), NB_GIT_COMMIT (names the AFTER tree on
# a device copy whose git does not know its commit).
# Exit status: 0 when every checksum matches and every median is within TOL_PCT; 1 otherwise;
# 2 on usage errors; 3 without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ $# -ge 1 ] || { echo "usage: scripts/compare_builds.sh BEFORE [LOG]"; exit 2; }
BEFORE="$1"
LOG="${2:-build/compare_builds.log}"
if [ -d "$BEFORE" ]; then
  BEFORE_DIR="$(cd "$BEFORE" && pwd)"
else
  BEFORE_DIR=""
  git rev-parse --verify -q "$BEFORE^{commit}" >/dev/null || { echo "compare_builds: $BEFORE is not a commit here (nor a directory)"; exit 2; }
fi
nvidia-smi -L >/dev/null 2>&1 || { echo "compare_builds: no GPU visible (nvidia-smi -L lists none)"; exit 3; }
DATA="${DATA:-data/mnist}"
[ -d .carry/data/mnist ] && [ "$DATA" = data/mnist ] && DATA=.carry/data/mnist
DATA="$(cd "$DATA" && pwd)" || { echo "compare_builds: no data at $DATA (make data)"; exit 2; }
if [ -z "${DEPS_PREFIX:-}" ] && [ -d .carry/deps ]; then export DEPS_PREFIX=.carry/deps; fi
[ -n "${DEPS_PREFIX:-}" ] && DEPS_PREFIX="$(cd "$DEPS_PREFIX" && pwd)"
JOBS="${JOBS:-$(nproc)}"
REPEATS="${REPEATS:-5}"
ROUNDS="${ROUNDS:-3}"
TOL_PCT="${TOL_PCT:-3}"
PY="${PYTHON:-python3}"
mkdir -p build/compare "$(dirname "$LOG")"
WT=build/compare/before
if [ -n "$BEFORE_DIR" ]; then
  # copied over the last copy (timestamps kept): its build stays, so a second call (ONLY=...) on the
  # same machine rebuilds nothing
  mkdir -p "$WT" && cp -a "$BEFORE_DIR"/. "$WT"/ || { echo "compare_builds: cannot copy $BEFORE_DIR"; exit 1; }
else
  rm -rf "$WT"
  git worktree prune
  git worktree add -q --detach "$WT" "$BEFORE" || { echo "compare_builds: git worktree add failed"; exit 1; }
fi
cleanup() { [ -n "$BEFORE_DIR" ] || git worktree remove --force "$WT" >/dev/null 2>&1; }
trap cleanup EXIT
SCRATCH=$(mktemp -d)
trap 'cleanup; rm -rf "$SCRATCH"' EXIT
W1="--layers 784,128,64,10 --batch 32 --epochs 1"
W2="--layers 784,H,H,H,10 --optimizer sgd --lr 0.003 --dropout 0 --batch 32 --steps 500"
CONFIGS=()  # "label|binary|args"
CONFIGS+=("p1-det|phase1_naive|--n 1000003 --deterministic" "p2-det|phase2_shared_mem|--n 5000000 --deterministic"
          "p3|phase3_fused_streams|--n 5000000" "p3-graph-det|phase3_fused_streams|--n 5000000 --path graph --deterministic")
for dr in 0.2 0; do
  w="$W1 --dropout $dr"; t="w1"; [ "$dr" = 0 ] && t="w1-nodrop"
  for pr in fp32 fp16; do CONFIGS+=("$t-p4-$pr|phase4_mlp|$w --precision $pr"); done
  for pr in fp32 fp16; do CONFIGS+=("$t-p5-own-$pr|phase5_batched|$w --precision $pr"); done
  for pr in fp32 fp16; do CONFIGS+=("$t-p5-cublas-$pr|phase5_batched|$w --precision $pr --gemm cublas"); done
  CONFIGS+=("$t-p5-persistent|phase5_batched|$w --launch persistent")
  CONFIGS+=("$t-p5-pipelined|phase5_batched|$w --launch pipelined")
  CONFIGS+=("$t-p5-cluster32|phase5_batched|$w --launch cluster32")
done
# the one-launch rungs' generic kernels (the W1 instance aside): 1, 2, 4 and 8 first-layer units a
# block (default blocks, 64, 32, 16); cluster32's generic instance, with SGD, and its 64-row instance
for nb in 0 64 32 16; do
  b=""; [ "$nb" != 0 ] && b="--blocks $nb"
  CONFIGS+=("w1-p5-persistent-g$nb|phase5_batched|$W1 --dropout 0.2 --launch persistent $b --generic-kernel")
  CONFIGS+=("w1-p5-pipelined-g$nb|phase5_batched|$W1 --dropout 0.2 --launch pipelined $b --generic-kernel")
done
CONFIGS+=("w1-p5-cluster32-generic|phase5_batched|$W1 --dropout 0.2 --launch cluster32 --generic-kernel")
W1N="${W1/784,128,64,10/784,37,30,10}"  # the 64-row instance holds narrow first layers only
CONFIGS+=("b64-narrow-p5-cluster32|phase5_batched|${W1N/--batch 32/--batch 64} --dropout 0.2 --launch cluster32")
CONFIGS+=("w1-sgd-p5-cluster32|phase5_batched|$W1 --dropout 0.2 --optimizer sgd --lr 0.01 --launch cluster32")
for b in 2048 8192; do
  e=2; [ "$b" = 8192 ] && e=5
  w="${W1/--batch 32 --epochs 1/--batch $b --epochs $e} --dropout 0.2"
  for pr in fp32 fp16; do CONFIGS+=("w1-b$b-p5-own-$pr|phase5_batched|$w --precision $pr"); done
done
for h in 128 1024; do
  w="${W2//H/$h}"
  for pr in fp32 fp16; do CONFIGS+=("w2-h$h-p4-$pr|phase4_mlp|$w --precision $pr"); done
  for pr in fp32 fp16; do CONFIGS+=("w2-h$h-p5-own-$pr|phase5_batched|$w --precision $pr"); done
  for pr in fp32 fp16; do CONFIGS+=("w2-h$h-p5-cublas-$pr|phase5_batched|$w --precision $pr --gemm cublas"); done
  [ "$h" = 128 ] && CONFIGS+=("w2-h$h-p5-cluster|phase5_batched|$w --precision fp16 --launch cluster")
  [ "$h" = 1024 ] && CONFIGS+=("w2-h$h-p5-grid|phase5_batched|$w --precision fp16 --launch grid")
done
# Build, in both trees, only the phases the selected configurations run (ONLY=one W2 configuration
# builds phase 4 or 5 alone, not all five phases twice).
TARGETS=()
for c in "${CONFIGS[@]}"; do
  IFS='|' read -r label bin _ <<<"$c"
  [[ "$label" =~ ${ONLY:-.} ]] || continue
  [[ " ${TARGETS[*]} " == *" build/$bin "* ]] || TARGETS+=("build/$bin")
done
[ ${#TARGETS[@]} -gt 0 ] || { echo "compare_builds: no configuration matches ONLY='${ONLY:-}'"; exit 2; }
for d in "$WT" .; do
  if [ "${NO_BUILD:-0}" = 1 ]; then  # binaries built elsewhere, copied into both trees' build/
    for t in "${TARGETS[@]}"; do [ -x "$d/$t" ] || { echo "compare_builds: NO_BUILD=1 but $d/$t is missing"; exit 2; }; done
    continue
  fi
  make -C "$d" -j"$JOBS" ${DEPS_PREFIX:+DEPS_PREFIX=$DEPS_PREFIX} "${TARGETS[@]}" \
    >"build/compare/make_$(basename "$d").log" 2>&1 || { tail -n 20 "build/compare/make_$(basename "$d").log"; echo "compare_builds: build failed in $d"; exit 1; }
done
# field FILE KEY: the result (metrics.param_checksum, or w, b, train loss) / the timed samples of
# timing.total_ms, one per line
field() {
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["metrics"]
if sys.argv[2] == "sum":
    print(repr(m["param_checksum"]) if "param_checksum" in m else repr((m["w"], m["b"], m["train_loss"])).replace(" ", ""))
else:
    print("\n".join("%.6f" % v for v in r["timing"]["total_ms"]["samples"]))
EOF
}
# median: of the numbers on stdin, one per line
median() { sort -g | awk 'NF { v[++n] = $1 } END { if (n % 2) printf "%.6f", v[(n + 1) / 2]; else printf "%.6f", (v[n / 2] + v[n / 2 + 1]) / 2 }'; }
fails=0
{
  if [ -n "${NB_GIT_COMMIT:-}" ]; then after="$NB_GIT_COMMIT (NB_GIT_COMMIT)"
  else after="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!profiles' ':!report' || echo ' (+ uncommitted changes)')"; fi
  if [ -n "$BEFORE_DIR" ]; then before="$BEFORE_DIR"; else before="$(git rev-parse --short "$BEFORE")"; fi
  echo "# compare_builds: before $before, after $after"
  echo "# $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1); $ROUNDS rounds (which build runs first alternates) of $REPEATS timed runs after 1 warm-up; medians of the pooled samples; tolerance $TOL_PCT%"
  printf '%-26s %-10s %12s %12s %8s  %s\n' config checksum before_ms after_ms "after/b" verdict
} | tee "$LOG"
for c in "${CONFIGS[@]}"; do
  IFS='|' read -r label bin args <<<"$c"
  [[ "$label" =~ ${ONLY:-.} ]] || continue
  read -r -a A <<<"$args"
  ok=1
  declare -A sums=() samples=()
  for ((round = 1; round <= ROUNDS; ++round)); do
    order="before after"; [ $((round % 2)) = 0 ] && order="after before"
    for side in $order; do
      root=.; [ "$side" = before ] && root="$WT"
      out="$SCRATCH/$side"
      mkdir -p "$out"
      D=(); case "$bin" in phase4_mlp|phase5_batched) D=(--data "$DATA") ;; esac
      if ! "$root/build/$bin" "${A[@]}" "${D[@]}" --warmup 1 --repeats "$REPEATS" --no-cupti --out "$out" --tag "$label" \
        >"$SCRATCH/$side-$label.log" 2>&1; then
        echo "  $label ($side, round $round): exit $?: $(tail -n 1 "$SCRATCH/$side-$label.log")" | tee -a "$LOG"
        ok=0; break 2
      fi
      rec="$out/${bin}__$label.json"
      s="$(field "$rec" sum)"
      if [ -z "${sums[$side]:-}" ]; then sums[$side]="$s"
      elif [ "${sums[$side]}" != "$s" ]; then sums[$side]="not reproducible: ${sums[$side]} then $s"; fi
      samples[$side]+="$(field "$rec" samples)"$'\n'
    done
  done
  if [ "$ok" = 1 ]; then
    mb=$(printf '%s' "${samples[before]}" | median); ma=$(printf '%s' "${samples[after]}" | median)
    same=differs; [ "${sums[before]}" = "${sums[after]}" ] && same=same
    ratio=$(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.4f", a / b }')
    within=$(awk -v r="$ratio" -v t="$TOL_PCT" 'BEGIN { print (r <= 1 + t / 100) ? "ok" : "slower" }')
    verdict="ok"; { [ "$same" != same ] || [ "$within" != ok ]; } && verdict="FAIL" && fails=$((fails + 1))
    printf '%-26s %-10s %12s %12s %8s  %s\n' "$label" "$same" "$mb" "$ma" "$ratio" \
      "$verdict$([ "$same" != same ] && echo " (checksums ${sums[before]} vs ${sums[after]})")" | tee -a "$LOG"
  else
    fails=$((fails + 1))
  fi
  unset sums samples
done
echo "compare_builds: $fails configuration(s) failed; log $LOG" | tee -a "$LOG"
[ "$fails" -eq 0 ]
