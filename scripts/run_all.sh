#!/usr/bin/env bash
# scripts/run_all.sh — `make run`: the notebook, ending with the report.
#
#   make run            the quick notebook (default): every figure drawn from fewer sizes, widths,
#                       epochs, repeats and framework modes; its records go to profiles/<slug>/quick/, where
#                       they never replace a full run's; its own record run_all__quick.json says how long
#                       each step took (profiles/nvidia-h200/quick/; docs/RUNNING.md)
#   make run FULL=1     everything: with 2 or more GPUs visible scripts/bench_lanes.sh (the benchmarks
#                       and their --check spread over the GPUs), else bench_linreg.sh then bench_mlp.sh;
#                       its records go to profiles/<slug>/
#
# With a GPU (nvidia-smi -L lists one): fetch and verify the data (`make data`: MNIST and
# Fashion-MNIST; phases 4-5 need it), build everything, measure the tracer's overhead
# (tools/tracer_overhead), run the benchmarks — which write run records — write the run's own record
# (run_all__<mode>.json: phase run_all, each step with its duration and status, timing.total_ms),
# then `make report`. Without a GPU: one line saying so, then `make report` from the committed profiles/.
#
# Where the records go: a full run writes profiles/<slug>/ (the device slug of common/device_info.h);
# the quick notebook writes every record of its run — the benchmarks', the tracer overhead's and
# run_all__quick.json — to profiles/<slug>/quick/ (RECORDS_DIR, passed to the bench scripts and
# tools as --out), so a quick run never overwrites a full run's record. `make report` reads both
# folders; where a full record and a quick one fill the same slot (device, phase, tag) the full one
# is used (report/records.py load_profiles).
#
# Quick mode exports NB_RUN_MODE=quick: every record written says "run_mode": "quick". Its
# reductions, each passed to the bench scripts as their own environment variables (a caller's
# setting overrides):
#   (both: the JAX twins run beside the PyTorch ones where JAX is importable, one skip line where not,
#   in one mode a stage: the fastest of the stage in the H200's full-run records)
#   linear regression: REPEATS=2, SWEEP_NS=5000,500000,5000000, SWEEP_PARTS="p1 p2 p3" (no twin in
#     the sweep: the headline compares the frameworks), P1_MAX_N=500000 (phase 1 swept up to 500K only),
#     the headline's twin in eager, graph and compiled-graph (HEADLINE_TWIN_IMPLS; no torch.compile
#     alone, no CPU, HEADLINE_SYNC=0: no eager with loss.item() every epoch; compiled-graph in
#     inductor's default mode, HEADLINE_COMPILE_MODE=default, the mode the full runs' trial kept on
#     both GPUs), the headline's JAX twin
#     in jit-run only (HEADLINE_JAX_IMPLS), phase 3's pre-flight with one graph configuration and one
#     --poll-ns value (P3_CANDIDATES, P3_POLL_CANDIDATES=400)
#   MLP: STAGES="w1 w2 sweep seeds" (no match, gemm, persist, fashion), W1_EPOCHS=1, W2_HS="128" (h =
#     8,192 and its twins, about two minutes of the quick run, only in the full notebook),
#     W2_STEPS=500, W2_STEPS_SLOW=200, no paired/no-PDL ablations, P5_REPEATS=2,
#     SWEEP_BATCHES="32 512 8192", SWEEP_EPOCHS=1, phase 5's default path only and no twin in the batch
#     sweep (SWEEP_PATHS empty, SWEEP_TWIN=0), no twin in the seed study;
#     the MLP twins run eager, graph and compiled-graph only (torch.compile alone and max-autotune
#     left out: their compilation is most of the full run's twin time), and the compiled-graph twin
#     compiles in inductor's default mode (TWIN_COMPILE_MODE=default: no minute of GEMM autotuning);
#     the JAX twin in jit-epoch at W1 (JAX_W1_IMPLS) and jit-run at W2 (JAX_W2_IMPLS): each JAX
#     mode compiles its own program and validates against the float64 reference on its own; the W2
#     twins' kernel lists (--profile) at h = 128 only (W2_PROFILE_HS: Figure 12 accounts h = 128).
#
# Environment: FULL (1: everything), JOBS (parallel build jobs, default: nproc), ARCH (nvcc's target,
# default sm_<the first GPU's compute capability>), DEPS_PREFIX
# (default .carry/deps when present), DATA_SRC (as for make data), PYTHON (interpreter with torch),
# RECORDS_DIR (every record of the run there instead of profiles/<slug>/ or profiles/<slug>/quick/:
# the benchmarks', the tracer overhead's and this run's own; the report step still reads profiles/),
# anything the bench scripts read. Exit status: 0 when every step succeeded; 1 when a step failed
# (the report is still rebuilt from whatever records exist, and says which are missing).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run_all.sh: no GPU visible (nvidia-smi -L lists none): rebuilding the report from the committed profiles/ only"
  exec make report
fi

if [ -z "${DEPS_PREFIX:-}" ] && [ -d .carry/deps ]; then export DEPS_PREFIX=.carry/deps; fi
JOBS="${JOBS:-$(nproc)}"
PYTHON="${PYTHON:-python3}"
MODE=quick
[ "${FULL:-0}" = 1 ] && MODE=full
export NB_RUN_MODE=$MODE
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
# The device slug of common/device_info.h (the twins' helper where python3 can import it, else the
# same rule in sed): lower case, every run of other characters one '-'.
device_slug() {
  python3 -c 'import sys; sys.path.insert(0, "baselines/pytorch"); import common; print(common.device_slug(sys.argv[1]))' \
    "${1:-unknown}" 2>/dev/null ||
    printf '%s' "${1:-unknown}" | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9]+/-/g; s/^-+//; s/-+$//'
}
SLUG=$(device_slug "$GPU_NAME")
# The quick notebook's records in their own folder: they never replace a full run's.
if [ "$MODE" = quick ] && [ -z "${RECORDS_DIR:-}" ]; then
  export RECORDS_DIR="profiles/${SLUG:-unknown}/quick"
fi
[ -n "${RECORDS_DIR:-}" ] && mkdir -p "$RECORDS_DIR"
T0=$(date +%s%N)
now_ms() { echo $(( ($(date +%s%N) - T0) / 1000000 )); }

# ---------------------------------------------------------------- the steps and their estimates
# name|estimated seconds on an H100 (quick / full)|command (eval'd)
STEPS=()
add() { STEPS+=("$1|$2|$3"); }
# The GPU's architecture, asked once: every make of the run (and of the bench scripts it calls) gets
# ARCH=sm_XY from the environment instead of nvcc's -arch=native, which opens the driver in every
# nvcc call; on Hopper sm_90a (its architecture-specific instructions: GEMM step 9's wgmma). (CAP,
# not CC: an exported CC would reach make.)
if [ -z "${ARCH:-}" ]; then
  CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
  [[ "$CAP" =~ ^[0-9]+$ ]] && export ARCH="sm_$CAP$([ "$CAP" = 90 ] && echo a)"
fi
MAKE_ARGS="-j$JOBS ${DEPS_PREFIX:+DEPS_PREFIX=$DEPS_PREFIX}"
add data 10 "make data"
has_tracer_overhead() { [ -x build/tools/tracer_overhead ] || [ -f tools/tracer_overhead.cu ]; }
if [ "$MODE" = quick ]; then
  # Phase 5 is the longest compile (its trainer's translation unit alone takes about 40 s). The
  # quick notebook compiles the objects of phases 4-5 in the background (niced) from the start,
  # while the libraries, phases 1-3 and the tools build and the linear-regression benchmark runs,
  # and waits for that build before the MLP benchmark. The two builds share only the libraries: the
  # background one links phases 4-5 (and would build a missing library) under the lock the
  # foreground make holds (flock on build/.make.lock; without flock, the libraries are built first).
  # The full notebook builds everything first.
  add build 30 "make $MAKE_ARGS deps && start_build_mlp && locked make $MAKE_ARGS build/libnb_cuda.a build/libnb_host.a build/phase1_naive build/phase2_shared_mem build/phase3_fused_streams tools"
  has_tracer_overhead && add tracer_overhead 5 "run_tracer_overhead"
  add bench_linreg 85 "bench linreg"
  add build_mlp 5 "wait_build_mlp"
  add bench_mlp 110 "bench mlp"
else
  add build 75 "make $MAKE_ARGS all"
  has_tracer_overhead && add tracer_overhead 5 "run_tracer_overhead"
  if [ "${NGPU:-0}" -ge 2 ] && [ -f scripts/bench_lanes.sh ]; then
    add bench_lanes 900 "bash scripts/bench_lanes.sh"
  else
    add bench_linreg 340 "bench linreg"
    add bench_mlp 780 "bench mlp"
  fi
fi
REPORT_EST=30

BUILD_MLP_PID=""
# locked CMD...: CMD under build/.make.lock (flock), so that two makes never build the same library
locked() {
  mkdir -p build
  if command -v flock >/dev/null 2>&1; then flock build/.make.lock "$@"; else "$@"; fi
}
start_build_mlp() {  # phases 4-5, in the background (output in build/run_all_make_mlp.log)
  mkdir -p build
  if ! command -v flock >/dev/null 2>&1; then  # no lock: the libraries first, then as before
    # shellcheck disable=SC2086
    make $MAKE_ARGS build/libnb_cuda.a build/libnb_host.a >build/run_all_make_libs.log 2>&1 || { tail -n 30 build/run_all_make_libs.log; return 1; }
  fi
  # shellcheck disable=SC2086
  { nice -n 10 make $MAKE_ARGS mlp-objects && locked nice -n 10 make $MAKE_ARGS build/phase4_mlp build/phase5_batched; } \
    >build/run_all_make_mlp.log 2>&1 &
  BUILD_MLP_PID=$!
  echo "run_all.sh: phases 4-5 compiling in the background (pid $BUILD_MLP_PID, build/run_all_make_mlp.log)"
}
wait_build_mlp() {
  [ -n "$BUILD_MLP_PID" ] || { echo "run_all.sh: the background build of phases 4-5 never started"; return 1; }
  if ! wait "$BUILD_MLP_PID"; then tail -n 30 build/run_all_make_mlp.log; return 1; fi
}

run_tracer_overhead() {
  if [ -x build/tools/tracer_overhead ]; then build/tools/tracer_overhead ${RECORDS_DIR:+--out "$RECORDS_DIR"}; else echo "build/tools/tracer_overhead not built"; return 1; fi
}

bench() {  # bench linreg|mlp: the bench script, with the quick reductions in quick mode
  local b="$1"
  if [ ! -f "scripts/bench_$b.sh" ]; then
    echo "run_all.sh: scripts/bench_$b.sh does not exist: its records (and figures) will be missing"
    return 1
  fi
  if [ "$MODE" = full ]; then bash "scripts/bench_$b.sh"; return; fi
  if [ "$b" = linreg ]; then
    env REPEATS="${REPEATS:-2}" SWEEP_NS="${SWEEP_NS:-5000,500000,5000000}" \
      SWEEP_PARTS="${SWEEP_PARTS:-p1 p2 p3}" P1_MAX_N="${P1_MAX_N:-500000}" \
      HEADLINE_TWIN_IMPLS="${HEADLINE_TWIN_IMPLS:-eager,graph,compiled-graph}" HEADLINE_SYNC="${HEADLINE_SYNC:-0}" \
      HEADLINE_JAX_IMPLS="${HEADLINE_JAX_IMPLS:-jit-run}" HEADLINE_COMPILE_MODE="${HEADLINE_COMPILE_MODE:-default}" \
      P3_CANDIDATES="${P3_CANDIDATES:---update next-epoch --blocks-per-sm 2}" P3_POLL_CANDIDATES="${P3_POLL_CANDIDATES:-400}" \
      bash scripts/bench_linreg.sh
  else
    env STAGES="${STAGES:-w1 w2 sweep seeds}" W2_HS="${W2_HS:-128}" W1_EPOCHS="${W1_EPOCHS:-1}" \
      W2_STEPS="${W2_STEPS:-500}" W2_STEPS_SLOW="${W2_STEPS_SLOW:-200}" W2_PAIRED_HS="${W2_PAIRED_HS:-}" \
      W2_NOPDL_HS="${W2_NOPDL_HS:-}" TWIN_COMPILE_W2="${TWIN_COMPILE_W2:-}" W2_PROFILE_HS="${W2_PROFILE_HS:-128}" P5_REPEATS="${P5_REPEATS:-2}" \
      TWIN_W1_IMPLS="${TWIN_W1_IMPLS:-eager,graph,compiled-graph}" TWIN_W2_IMPLS="${TWIN_W2_IMPLS:-eager,graph,compiled-graph}" \
      TWIN_COMPILE_MODE="${TWIN_COMPILE_MODE:-default}" JAX_W1_IMPLS="${JAX_W1_IMPLS:-jit-epoch}" JAX_W2_IMPLS="${JAX_W2_IMPLS:-jit-run}" \
      SWEEP_BATCHES="${SWEEP_BATCHES:-32 512 8192}" SWEEP_EPOCHS="${SWEEP_EPOCHS:-1}" SWEEP_PATHS="${SWEEP_PATHS-}" SWEEP_TWIN=0 SEEDS_TWIN=0 \
      bash scripts/bench_mlp.sh
  fi
}

# ---------------------------------------------------------------- progress and the run record
status=0
failed=()
RESULTS=()  # name|status|rc|duration_ms
estimate_left() {  # estimate_left I: seconds the steps from I on are expected to take (and the report)
  local i s=$REPORT_EST
  for (( i = $1; i < ${#STEPS[@]}; i++ )); do s=$(( s + $(cut -d'|' -f2 <<<"${STEPS[$i]}") )); done
  echo "$s"
}
N=$(( ${#STEPS[@]} + 1 ))
echo "run_all.sh: $MODE notebook on $NGPU GPU(s): ${#STEPS[@]} steps and the report, about $(estimate_left 0) s on an H100" \
     "$( [ "$MODE" = quick ] && echo '(make run FULL=1 runs everything)')"
for (( i = 0; i < ${#STEPS[@]}; i++ )); do
  IFS='|' read -r name est cmd <<<"${STEPS[$i]}"
  echo "run_all.sh: [$(( i + 1 ))/$N $name] start at $(( $(now_ms) / 1000 )) s; about $(estimate_left "$i") s left: $cmd"
  t=$(now_ms)
  eval "$cmd"
  rc=$?
  d=$(( $(now_ms) - t ))
  if [ $rc -eq 0 ]; then st=ok; else st=failed; status=1; failed+=("$name"); fi
  RESULTS+=("$name|$st|$rc|$d")
  echo "run_all.sh: [$(( i + 1 ))/$N $name] $st$( [ $rc -ne 0 ] && echo " (exit $rc)") in $(( d / 1000 )) s;" \
       "elapsed $(( $(now_ms) / 1000 )) s, about $(estimate_left $(( i + 1 ))) s left"
done

# This run's record, before the report so the report lists it (the report step is not in it).
# Written by the twins' record helpers (baselines/pytorch/common.py: the device slug, the commit with
# NB_GIT_COMMIT / NB_GIT_DIRTY winning over the repository, the checks and the atomic write).
write_run_record() {
  python3 - "$GPU_NAME" "$MODE" "$NGPU" "$(now_ms)" "${RESULTS[@]}" <<'EOF' || return 1
import os, socket, sys
sys.path.insert(0, os.path.join("baselines", "pytorch"))
import common as nbc  # noqa: E402
name, mode, ngpu, total = sys.argv[1:5]
steps = []
for s in sys.argv[5:]:
    n, st, rc, d = s.split("|")
    steps.append({"name": n, "status": st, "exit_status": int(rc), "duration_ms": int(d)})
name = name or "unknown"
slug = nbc.device_slug(name)
total = float(total)
rec = {"schema": nbc.SCHEMA, "schema_version": nbc.SCHEMA_VERSION, "phase": "run_all", "workload": "run_all",
       "implementation": "script", "run_mode": mode,
       "config": {"mode": mode, "gpus": int(ngpu), "steps": [s["name"] for s in steps]},
       "device": {"name": name, "slug": slug}, "git": nbc.git_info(), "utc_time": nbc.utc_now(),
       "host": {"hostname": socket.gethostname()}, "software": {},
       "status": "ok" if all(s["status"] == "ok" for s in steps) else "interrupted",
       "timing": {"method": "wall clock (date +%s%N) around each step of scripts/run_all.sh",
                  "includes": "every step below: data, build, tracer overhead, benchmarks",
                  "excludes": "the report step that follows this record",
                  "warmup": 0, "repeats": 1,
                  "total_ms": {"min": total, "median": total, "max": total, "mean": total, "samples": [total]}},
       "steps": steps, "notes": []}
print(f"run_all.sh: this run's record: {nbc.write_record(rec, os.environ.get('RECORDS_DIR', ''), slug, 'run_all', mode)}")
EOF
}
write_run_record || echo "run_all.sh: could not write this run's record"

# The report wants the pinned .venv (make venv needs PyPI). A GPU machine without network falls
# back to its own python3 when that has numpy and matplotlib (PNG bytes may then differ).
build_report() {
  # pip without a network would retry for minutes: fail fast instead (a caller's setting wins)
  PIP_RETRIES="${PIP_RETRIES:-0}" PIP_DEFAULT_TIMEOUT="${PIP_DEFAULT_TIMEOUT:-5}" make report && return 0
  if python3 -c 'import numpy, matplotlib' 2>/dev/null; then
    echo "run_all.sh: the pinned .venv could not be made here; building the report with this machine's python3" \
         "(matplotlib $(python3 -c 'import matplotlib; print(matplotlib.__version__)'))"
    python3 report/make_report.py --profiles profiles --out report
  else
    return 1
  fi
}
echo "run_all.sh: [$N/$N report] start at $(( $(now_ms) / 1000 )) s; about $REPORT_EST s left"
if build_report; then rst=ok; else rst=failed; status=1; failed+=(report); fi
echo "run_all.sh: [$N/$N report] $rst; total $(( $(now_ms) / 1000 )) s ($MODE notebook)"
if [ $status -ne 0 ]; then
  echo "run_all.sh: failed steps: ${failed[*]} (the report lists the records that are missing)"
fi
echo "run_all.sh: the report is report/REPORT.md (figures in report/figures/, every record in report/APPENDIX.md)"
if [ "$MODE" = quick ]; then
  echo "run_all.sh: records of the run are in ${RECORDS_DIR}/; the report uses a full run's record wherever one fills the same slot"
fi
exit $status
