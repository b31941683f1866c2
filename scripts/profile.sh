#!/usr/bin/env bash
# scripts/profile.sh — the profiling workflow behind `make profile`, `make ncu` and `make trace`.
#
#   scripts/profile.sh nsys  PHASE [ARGS...]    Nsight Systems timeline, our CUPTI tracer off
#   KERNEL=regex scripts/profile.sh ncu PHASE [ARGS...]   Nsight Compute on one kernel launch
#   scripts/profile.sh trace PHASE [ARGS...]    our own CUPTI Chrome trace (Perfetto)
#
# PHASE is 1..5 (or the program name, e.g. phase3_fused_streams); ARGS go to the phase program
# (e.g. ARGS="--n 50000000" with make). Outputs go to profiles/<device-slug>/ (PROFILE_DIR=...
# overrides), the slug made from `nvidia-smi --query-gpu=name` with the records' rule (lower case,
# runs of other characters -> '-'):
#   nsys   phaseN.nsys-rep, the record phaseN_xxx__nsys.json, and `nsys stats` CSVs the report reads:
#          phaseN_nsys_cuda_gpu_kern_sum.csv, phaseN_nsys_nvtx_sum.csv, phaseN_nsys_cuda_gpu_mem_time_sum.csv
#          (the report compares the kernel list with our CUPTI summary of the same phase)
#   ncu    phaseN_ncu_<kernel>.ncu-rep and phaseN_ncu_<kernel>.csv (`ncu --import --csv --page details`;
#          (<kernel>: the regex with other characters as "_"); sections SpeedOfLight, MemoryWorkloadAnalysis,
#          ComputeWorkloadAnalysis; the first matching launch after SKIP of them (default 0).
#          Without ARGS a short run is used (linreg: --n 1000003 --epochs 3; MLP: --epochs 1); its run
#          record goes to a temporary folder (timings under ncu's replay mean nothing).
#          SKIP=n: skip n matching launches first. Phase 5's persistent and pipelined launches start with
#          a one-step launch (modules load, first-call work): SKIP=1 profiles the epoch, not that step.
#          STALLS=1: instead, where the warps stall and the issue slots go (sections WarpStateStats,
#          SourceCounters, InstructionStats, LaunchStats), plus the per-instruction page
#          phaseN_ncu_<kernel>_sass.csv.gz and its summary by stretch of machine code,
#          phaseN_ncu_<kernel>_regions.json (scripts/ncu_regions.py; PYTHON= names the python3), and
#          by CUDA source line, phaseN_ncu_<kernel>_lines.json (scripts/ncu_lines.py, on the
#          binary's cubins via cuobjdump and nvdisasm -gi; PER=<n> adds executions / n, e.g. warps x
#          steps of a persistent kernel)
#   trace  phaseN_trace.json (Chrome trace-event JSON) and the record phaseN_xxx__trace.json.
# Tools: NSYS= / NCU= name the binaries; otherwise PATH, then /opt/nvidia and /usr/local/cuda*.
# When nsys needs libdw/libelf and the machine lacks them, the Debian packages in .carry/debs are
# unpacked to a temporary folder and put on LD_LIBRARY_PATH.
#
# Exit status: 0 done; 2 usage (unknown mode or phase, ncu without KERNEL); 3 the profiler is not
# installed; 4 the phase binary is not built (run `make phaseN`); 5 no GPU visible; 1 the profiler
# or the phase failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

die() { echo "profile.sh: $2" >&2; exit "$1"; }
usage="usage: scripts/profile.sh nsys|ncu|trace PHASE [ARGS...]  (PHASE 1..5; ncu needs KERNEL=regex)"

MODE="${1:-}"
PHASE_IN="${2:-}"
[ -n "$MODE" ] && [ -n "$PHASE_IN" ] || die 2 "$usage"
shift 2
case "$MODE" in nsys|ncu|trace) ;; *) die 2 "unknown mode '$MODE'; $usage" ;; esac

case "$PHASE_IN" in
  1|phase1|phase1_naive) N=1; NAME=phase1_naive ;;
  2|phase2|phase2_shared_mem) N=2; NAME=phase2_shared_mem ;;
  3|phase3|phase3_fused_streams) N=3; NAME=phase3_fused_streams ;;
  4|phase4|phase4_mlp) N=4; NAME=phase4_mlp ;;
  5|phase5|phase5_batched) N=5; NAME=phase5_batched ;;
  *) die 2 "unknown phase '$PHASE_IN' (expected 1..5); $usage" ;;
esac
BIN="build/$NAME"
[ -x "$BIN" ] || die 4 "$BIN is not built: run 'make phase$N' first"

GPU_NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
[ -n "$GPU_NAME" ] || die 5 "no GPU visible (nvidia-smi lists none): profiling needs one"
SLUG="$(printf '%s' "$GPU_NAME" | tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+//; s/-+$//')"
OUT="${PROFILE_DIR:-profiles/$SLUG}"
mkdir -p "$OUT" || die 1 "cannot create $OUT"

find_tool() {  # $1 = tool name, $2 = override value
  if [ -n "$2" ]; then
    [ -x "$2" ] && { echo "$2"; return 0; }
    command -v "$2" 2>/dev/null && return 0
    return 1
  fi
  command -v "$1" 2>/dev/null && return 0
  local found
  found="$(find /opt/nvidia /usr/local/cuda* -name "$1" -type f -perm -u+x 2>/dev/null | sort)"
  # prefer the launcher in a bin/ folder over the per-target copies
  echo "$found" | grep "/bin/$1\$" | tail -n 1 | grep . && return 0
  echo "$found" | tail -n 1 | grep .
}

args=("$@")
echo "profile.sh: $MODE on $NAME ($GPU_NAME) -> $OUT/"

case "$MODE" in
nsys)
  NSYS_BIN="$(find_tool nsys "${NSYS:-}")" || die 3 "nsys (Nsight Systems) not found: install it or set NSYS=/path/to/nsys"
  if ! ldconfig -p 2>/dev/null | grep -q 'libdw.so.1' && compgen -G ".carry/debs/*.deb" >/dev/null; then
    DW="$(mktemp -d)"
    for d in .carry/debs/*.deb; do dpkg -x "$d" "$DW" || die 1 "cannot unpack $d"; done
    export LD_LIBRARY_PATH="$DW/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "profile.sh: libdw/libelf from .carry/debs on LD_LIBRARY_PATH"
  fi
  REP="$OUT/phase$N"
  # --cuda-graph-trace=node: phase 3 (and 5) launch their epochs as CUDA graphs; without it nsys
  # records each graph launch as one range and its kernels never reach the kernel summary.
  echo "+ $NSYS_BIN profile -t cuda,nvtx --cuda-graph-trace=node -o $REP $BIN --no-cupti --tag nsys ${args[*]}"
  "$NSYS_BIN" profile -t cuda,nvtx --cuda-graph-trace=node --force-overwrite true -o "$REP" "$BIN" --no-cupti --tag nsys "${args[@]}"
  rc=$?
  [ $rc -eq 0 ] || die 1 "nsys profile (or $NAME under it) failed with exit status $rc"
  [ -f "$REP.nsys-rep" ] || die 1 "nsys wrote no $REP.nsys-rep"
  STATS="$OUT/phase${N}_nsys"
  rm -f "${STATS}"_*.csv
  echo "+ $NSYS_BIN stats --report cuda_gpu_kern_sum,nvtx_sum,cuda_gpu_mem_time_sum --format csv --output $STATS $REP.nsys-rep"
  "$NSYS_BIN" stats --force-export true --report cuda_gpu_kern_sum,nvtx_sum,cuda_gpu_mem_time_sum \
    --format csv --force-overwrite true --output "$STATS" "$REP.nsys-rep" || die 1 "nsys stats failed"
  KSUM="${STATS}_cuda_gpu_kern_sum.csv"
  [ -s "$KSUM" ] || die 1 "nsys stats wrote no $KSUM (files: $(ls "$OUT" | grep "phase${N}_nsys" | tr '\n' ' '))"
  for f in "${STATS}"_*.csv; do echo "profile.sh: wrote $f"; done
  size=$(stat -c %s "$REP.nsys-rep")
  echo "profile.sh: wrote $REP.nsys-rep ($((size / 1024)) KiB)$([ "$size" -gt 5000000 ] && echo '; larger than 5 MB: keep it out of git')"
  echo "profile.sh: kernels seen by nsys (instances, total ns, name):"
  awk -F, 'NR > 1 { gsub(/"/, ""); printf "  %8s %14s  %s\n", $3, $2, $NF }' "$KSUM" | head -n 15
  echo "profile.sh: 'make report' puts this kernel list beside our CUPTI summary of $NAME"
  ;;
ncu)
  [ -n "${KERNEL:-}" ] || die 2 "ncu needs KERNEL=<name or regex> (kernel names: the 'kernels' list of a $NAME record)"
  NCU_BIN="$(find_tool ncu "${NCU:-}")" || die 3 "ncu (Nsight Compute) not found: install it or set NCU=/path/to/ncu"
  if [ ${#args[@]} -eq 0 ]; then
    if [ "$N" -le 3 ]; then args=(--n 1000003 --epochs 3 --warmup 0 --repeats 1)
    else args=(--epochs 1 --warmup 0 --repeats 1); fi
  fi
  SAFE="$(printf '%s' "$KERNEL" | tr -c 'A-Za-z0-9_' '_' | sed -E 's/_+/_/g; s/^_//; s/_$//' | cut -c1-60)"
  [ -n "$SAFE" ] || SAFE=kernel
  SKIP="${SKIP:-0}"
  [[ "$SKIP" =~ ^[0-9]+$ ]] || die 2 "SKIP must be a count of launches (it is '$SKIP')"
  REP="$OUT/phase${N}_ncu_$SAFE"
  sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis)
  [ "${STALLS:-0}" = 1 ] && sections=(--section WarpStateStats --section SourceCounters --section InstructionStats --section LaunchStats)
  RECDIR="$(mktemp -d)"
  echo "+ $NCU_BIN ${sections[*]} -k regex:$KERNEL --launch-skip $SKIP -c 1 -o $REP $BIN --no-cupti ${args[*]}"
  "$NCU_BIN" "${sections[@]}" -k "regex:$KERNEL" --launch-skip "$SKIP" -c 1 -f -o "$REP" "$BIN" --no-cupti --tag ncu \
    --out "$RECDIR" "${args[@]}"
  rc=$?
  [ $rc -eq 0 ] || die 1 "ncu (or $NAME under it) failed with exit status $rc"
  [ -f "$REP.ncu-rep" ] || die 1 "no kernel matched regex:$KERNEL (no $REP.ncu-rep); see the 'kernels' list of a $NAME record"
  "$NCU_BIN" --import "$REP.ncu-rep" --csv --page details > "$REP.csv.tmp" || die 1 "ncu --import failed"
  mv "$REP.csv.tmp" "$REP.csv"
  echo "profile.sh: wrote $REP.ncu-rep and $REP.csv"
  if [ "${STALLS:-0}" = 1 ]; then
    "$NCU_BIN" --import "$REP.ncu-rep" --page source --csv --print-source sass > "${REP}_sass.csv.tmp" || die 1 "ncu --import --page source failed"
    gzip -c "${REP}_sass.csv.tmp" > "${REP}_sass.csv.gz" && rm -f "${REP}_sass.csv.tmp" || die 1 "cannot write ${REP}_sass.csv.gz"
    "${PYTHON:-python3}" scripts/ncu_regions.py "${REP}_sass.csv.gz" --json "${REP}_regions.json" || die 1 "scripts/ncu_regions.py failed on ${REP}_sass.csv.gz"
    # The same page by CUDA source line (scripts/ncu_lines.py): the binary's cubins (cuobjdump), each
    # disassembled with its line table (nvdisasm -gi) until one holds the profiled kernel's code.
    CUOBJ="$(find_tool cuobjdump "${CUOBJDUMP:-}")" && NVDIS="$(find_tool nvdisasm "${NVDISASM:-}")" || {
      echo "profile.sh: cuobjdump or nvdisasm not found: no ${REP}_lines.json (the regions are written)"; exit 0; }
    XD="$(mktemp -d)"
    (cd "$XD" && "$CUOBJ" -xelf all "$OLDPWD/$BIN" > /dev/null) || die 1 "cuobjdump -xelf failed on $BIN"
    found=0
    for cub in "$XD"/*.cubin; do
      [ -f "$cub" ] || continue
      if "${PYTHON:-python3}" scripts/ncu_lines.py "${REP}_sass.csv.gz" "$cub" --nvdisasm "$NVDIS" ${PER:+--per "$PER"} \
           --json "${REP}_lines.json" > "$XD/lines.txt" 2> "$XD/lines.err"; then
        found=1 && cat "$XD/lines.txt" && break
      fi
    done
    rm -rf "$XD"
    [ "$found" = 1 ] || die 1 "no cubin of $BIN holds the profiled kernel's code (scripts/ncu_lines.py)"
  else
    grep -E 'Speed Of Light' "$REP.csv" | awk -F'","' '{ printf "  %-40s %10s %s\n", $13, $15, $14 }' | tr -d '"' | head -n 12
  fi
  ;;
trace)
  TRACE="$OUT/phase${N}_trace.json"
  echo "+ $BIN --trace $TRACE --tag trace ${args[*]}"
  "$BIN" --trace "$TRACE" --tag trace "${args[@]}" || die 1 "$NAME failed"
  [ -s "$TRACE" ] || die 1 "$NAME wrote no trace (was our CUPTI tracer off? see the record's notes)"
  echo "profile.sh: wrote $TRACE — open it in https://ui.perfetto.dev or chrome://tracing"
  if [ "$N" -le 3 ]; then twin=linreg; else twin=mlp; fi
  echo "profile.sh: the PyTorch side of the same work: baselines/pytorch/$twin.py ... --profile (torch.profiler"
  echo "            trace next to its record), to open beside this one"
  ;;
esac
