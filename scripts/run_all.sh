#!/usr/bin/env bash
# scripts/run_all.sh — `make run`: the whole notebook, ending with the report.
#
# With a GPU (nvidia-smi -L lists one): fetch and verify the data (`make data`: MNIST and
# Fashion-MNIST from DATA_SRC or the mirrors; phases 4-5 need it), build everything, measure the tracer's overhead
# (tools/tracer_overhead), run the benchmark scripts that exist — scripts/bench_linreg.sh
# (phases 1-3 + their PyTorch twin; it also measures the ceilings) and scripts/bench_mlp.sh
# (phases 4-5 + twin) — which write run records under profiles/<device-slug>/, then `make report`.
# Without a GPU: one line saying so, then `make report` from the committed profiles/.
#
# Environment: JOBS (parallel build jobs, default: nproc), DEPS_PREFIX (default .carry/deps when
# present), DATA_SRC (as for make data), anything the bench scripts read (REPEATS, PYTHON, ...).
# Exit status: 0 when every step succeeded; 1 when a build or benchmark step failed (the report is
# still rebuilt from whatever records exist, and says which are missing); the report's own status
# when only the report was built.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run_all.sh: no GPU visible (nvidia-smi -L lists none): rebuilding the report from the committed profiles/ only"
  exec make report
fi

if [ -z "${DEPS_PREFIX:-}" ] && [ -d .carry/deps ]; then export DEPS_PREFIX=.carry/deps; fi
JOBS="${JOBS:-$(nproc)}"
status=0
failed=()
step() {  # step NAME COMMAND...
  local name="$1"; shift
  echo "run_all.sh: == $name: $*"
  if "$@"; then echo "run_all.sh: == $name: ok"; else echo "run_all.sh: == $name: FAILED (exit $?)"; status=1; failed+=("$name"); fi
}

step data make data
step build make -j"$JOBS" ${DEPS_PREFIX:+DEPS_PREFIX=$DEPS_PREFIX} all
if [ -x build/tools/tracer_overhead ]; then step tracer_overhead build/tools/tracer_overhead; fi
for b in bench_linreg bench_mlp; do
  if [ -f "scripts/$b.sh" ]; then
    step "$b" bash "scripts/$b.sh"
  else
    echo "run_all.sh: scripts/$b.sh does not exist yet: its records (and figures) will be missing"
  fi
done
# The report wants the pinned .venv (make venv needs PyPI). A GPU machine without network falls
# back to its own python3 when that has numpy and matplotlib (PNG bytes may then differ).
build_report() {
  make report && return 0
  if python3 -c 'import numpy, matplotlib' 2>/dev/null; then
    echo "run_all.sh: the pinned .venv could not be made here; building the report with this machine's python3" \
         "(matplotlib $(python3 -c 'import matplotlib; print(matplotlib.__version__)'))"
    python3 report/make_report.py --profiles profiles --out report
  else
    return 1
  fi
}
step report build_report
if [ $status -ne 0 ]; then
  echo "run_all.sh: failed steps: ${failed[*]} (the report lists the records that are missing)"
fi
exit $status
