#!/usr/bin/env bash
# The fp16 plan of d9b3450 (step 6 also for products of >= 1,024 rows and >= 16 tiles, and the first
# layer's weight gradient from batch 1,024) against 221cbbf's:
#  1. --validate of the new plan where it differs (fp16: batch 1,024 and 2,048 on W1's widths; 1,100
#     and 2,047 on 300/100; against float64, 1 step);
#  2. W1's fp16 step, new against old, batch 1,024 / 2,048 / 4,096 (4,096: the same plan, a control),
#     2 rounds alternating (ab/summary.txt);
#  3. the sweep stage at 1,024 and 2,048 (default fp32 and fp16, both twins): the records;
#  4. W2's kernels one by one, PDL off, h = 1,024 ... 8,192, and Nsight Compute on its fused backward at 8,192;
#  5. the match stage (W1 without dropout: phase 4, phase 5's paths and launches, the twins).
# Carry .carry/data, .carry/bins/fp_p5.xz (d9b3450), ra_p5.xz (221cbbf, the old), ra_p4.xz (phase 4;
# its sources are the same at both commits). Results: $OUT/fp.tgz. STAGES picks (default: all):
# val ab w2 ncu sweep match.
set -u
STAGES=" ${STAGES:-val ab w2 ncu sweep match} "; has() { [[ "$STAGES" == *" $1 "* ]]; }
: "${NB_GIT_COMMIT:?name the commit of the carried build}"; export NB_GIT_COMMIT
R=build/fp; rm -rf $R; mkdir -p $R/records $R/ab $R/val $R/scratch
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .fp.XXXXXX); tar czf $f --exclude=scratch $R 2>/dev/null; mv $f $OUT/fp.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/fpb
xz -dc .carry/bins/fp_p5.xz > build/phase5_batched & P1=$!
xz -dc .carry/bins/ra_p5.xz > build/fpb/old & P2=$!
xz -dc .carry/bins/ra_p4.xz > build/phase4_mlp & P3=$!
wait $P1 $P2 $P3; chmod +x build/phase5_batched build/fpb/old build/phase4_mlp
D=.carry/data/mnist
t "$(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)"
has val && for c in "1024|" "2048|" "1100|--layers 784,300,100,10" "2047|--layers 784,300,100,10"; do
  IFS='|' read -r b a <<<"$c"
  timeout 100 build/phase5_batched --data $D --no-cupti --epochs 1 --validate --validate-steps 1 --precision fp16 --batch $b $a \
    --out $R/scratch --tag val > $R/val/b$b${a:+-300}.log 2>&1
  echo "validate fp16 b=$b $a rc $?: $(grep -c ' ok$' $R/val/b$b${a:+-300}.log) ok, $(grep -ci 'fail' $R/val/b$b${a:+-300}.log) fail" | tee -a $R/val/summary.txt
done
has val && grep -h "plan\|step 6\|f16" $R/val/b1024.log | head -20 > $R/val/plan-b1024.txt
t validate; pack
has ab && for r in 1 2; do for b in 1024 2048 4096; do
  M="old new"; [ $r = 2 ] && M="new old"
  for v in $M; do
    B=build/phase5_batched; [ $v = old ] && B=build/fpb/old
    timeout 60 $B --data $D --batch $b --precision fp16 --epochs $(( b / 512 )) --dropout 0.2 --deterministic \
      --no-cupti --workload mlp_batch_sweep --out $R/ab --tag ab-f16-b$b-$v-r$r > $R/ab/b$b-$v-r$r.log 2>&1
    echo "r=$r b=$b $v rc $?" >> $R/ab/rc.txt
  done
done; done
has ab && python3 - $R/ab <<'PY' | tee $R/ab/summary.txt
import json, glob, collections, statistics, sys
d = collections.defaultdict(list); ck = collections.defaultdict(set)
for f in glob.glob(sys.argv[1] + "/*__ab-f16-*.json"):
    r = json.load(open(f)); _, _, b, v, _ = f.split("__")[-1][:-5].split("-")
    d[(int(b[1:]), v)].append(r["timing"]["per_step_ms"]["median"] * 1000); ck[(int(b[1:]), v)].add(r["metrics"]["param_checksum"])
for b in sorted({k[0] for k in d}):
    o, n = statistics.median(d[(b, "old")]), statistics.median(d[(b, "new")])
    print("fp16 b=%5d  old (221cbbf) %8.2f us %s  new (d9b3450) %8.2f us %s  old/new x%.3f  checksums equal: %s" % (b, o, ["%.2f" % x for x in d[(b, "old")]], n, ["%.2f" % x for x in d[(b, "new")]], o / n, ck[(b, "old")] == ck[(b, "new")]))
PY
t "ab"; pack
has sweep && NO_BUILD=1 STAGES=sweep SWEEP_BATCHES="1024 2048" SWEEP_PATHS="fp16" SWEEP_TWIN_TF32=0 \
  RECORDS_DIR=$R/records DATA=$D timeout 300 scripts/bench_mlp.sh > $R/bench-sweep.log 2>&1
t "sweep rc $?"; pack
# W2's step kernel by kernel at h = 1,024 ... 8,192, PDL off (each kernel's own time), and Nsight
# Compute's memory view of the fused backward pass at 8,192 (where the step is weight traffic).
mkdir -p $R/w2
has w2 && for h in 1024 2048 4096 8192; do
  timeout 60 build/phase5_batched --data $D --layers 784,$h,$h,$h,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 \
    --steps 200 --pdl off --launch graph --out $R/w2 --tag w2k-h$h > $R/w2/h$h.log 2>&1; echo "w2 h=$h rc $?" >> $R/w2/rc.txt
done
has w2 && python3 - $R/w2 <<'PY' > $R/w2/summary.txt
import json, glob, sys, re
for f in sorted(glob.glob(sys.argv[1] + "/*__w2k-*.json"), key=lambda f: int(re.search(r"h(\d+)", f).group(1))):
    r = json.load(open(f)); print("== %s  step %.2f us (PDL off)" % (f.split("__")[-1][:-5], r["timing"]["per_step_ms"]["median"] * 1000))
    for k in sorted(r["kernels"], key=lambda k: -k["total_ns"]):
        if "p5_eval" in k["name"] or k["calls"] < 100: continue
        m = re.match(r"(?:nb::mlp::)?(\w+)<(?:nb::mlp::)?(\w+)", k["name"])
        print("  %-26s %-22s grid %5d block %4d calls %6d mean %8.2f us" % (m.group(1) if m else k["name"][:26], m.group(2) if m else "", k["grid"][0], k["block"][0], k["calls"], k["mean_ns"] / 1000))
PY
has ncu && timeout 120 ncu --kernel-name-base demangled --kernel-name "regex:fused_update_bwd_kernel<nb::mlp::p5_fused_update_bwd" --launch-skip 4 --launch-count 2 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
  build/phase5_batched --data $D --layers 784,8192,8192,8192,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --steps 4 --pdl off --launch graph \
  --no-cupti --out $R/scratch --tag ncu > $R/w2/ncu-fused-h8192.txt 2>&1
t "w2 kernels, ncu rc $?"; pack
mkdir -p $R/match
has match && NO_BUILD=1 STAGES=match RECORDS_DIR=$R/match DATA=$D timeout 240 scripts/bench_mlp.sh > $R/bench-match.log 2>&1
t "match rc $?"
kill $WD 2>/dev/null; wait $WD 2>/dev/null; pack
cat $R/steps.txt $R/val/summary.txt $R/ab/summary.txt $R/w2/summary.txt; tail -12 $R/bench-sweep.log; tail -25 $R/bench-match.log
