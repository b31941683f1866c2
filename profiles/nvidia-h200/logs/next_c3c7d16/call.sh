#!/usr/bin/env bash
# The first call of the row chain (--row-chain on, phase5_batched/5a_row_chain.cuh) and of GEMM step 9
# (--fp16-gemm wgmma, common/mlp/gemm/9_f16_wgmma.cuh), one build of c3c7d16 for both (made on the host).
#   STAGE=a  (~6 min) their GPU tests first, then every GPU test case, step 9's under memcheck, then
#            --validate on the row-chain and wgmma paths at validate_sweep.sh's shapes;
#   STAGE=b  (~6 min) the GEMM benchmark (fp16 at batch 8,192 / 2,048, fp32 at 8,192), W1's step with
#            --fp16-gemm auto against wgmma (fp16, batch 1,024 ... 8,192) and with the row chain off
#            against on (fp32 and fp16, batch 32 / 64 / 1,024 / 8,192), 2 rounds alternating, then
#            traced runs with --pdl off for the kernel tables;
#   STAGE=c  (~4 min) Nsight Compute on step 9's two kernels and step 6's weight gradient at batch
#            8,192, and on W2's first-layer fused pass and softmax-CE at h = 8,192 (details and SASS
#            source counters as text).
# Carry: .carry/data, .carry/bins/nx_p5.xz and nx_tests.xz, .carry/call. Results: $OUT/nx-<stage>.tgz.
set -u
STAGE=${STAGE:-a}
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-c3c7d16}  # the carried builds' commit
R=build/nx-$STAGE; rm -rf $R; mkdir -p $R/scratch $R/ab $R/traced $R/gemm
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .nx.XXXXXX); tar czf $f --exclude=scratch $R 2>/dev/null; mv $f $OUT/nx-$STAGE.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/tests
xz -dc .carry/bins/nx_p5.xz > build/phase5_batched & P1=$!
xz -dc .carry/bins/nx_tests.xz > build/tests/gpu_tests & P2=$!
wait $P1 $P2; chmod +x build/phase5_batched build/tests/gpu_tests
D=.carry/data/mnist
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,compute_cap --format=csv,noheader | head -1)"
NCU="ncu --kernel-name-base demangled --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section SourceCounters --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
ncu_one() {  # ncu_one NAME KERNEL-REGEX SKIP ARGS...: one profiled launch, its details as text
  local name=$1 rx=$2 skip=$3; shift 3
  timeout 150 $NCU --kernel-name regex:"$rx" --launch-skip "$skip" --launch-count 1 -o $R/scratch/$name -f build/phase5_batched "$@" \
    --no-cupti --out $R/scratch > $R/ncu-$name.out 2>&1
  t "ncu $name rc $?"
  ncu -i $R/scratch/$name.ncu-rep --page details > $R/ncu-$name.txt 2>&1
  ncu -i $R/scratch/$name.ncu-rep --page source --csv --print-source sass > $R/ncu-$name-sass.csv 2>/dev/null
  pack
}
if [ "$STAGE" = c ]; then
  # Where step 9 spends its time (the proxy fence's MEMBAR, the copies' waits) and, for W2 at h =
  # 8,192, the first layer's fused pass (29.8 us at ~2.2 TB/s) and softmax-CE (11.8 us).
  W1=(--data $D --batch 8192 --precision fp16 --epochs 1 --dropout 0.2 --workload mlp_batch_sweep --fp16-gemm wgmma)
  ncu_one wg-fwd 'gemm_f16wgmma_kernel<nb::mlp::p5_fwd_gather' 4 "${W1[@]}"
  ncu_one wg-wgrad 'gemm_f16wgmma_kernel<nb::mlp::p5_update.*GatherView' 4 "${W1[@]}"
  ncu_one mma-wgrad 'gemm_f16mma_kernel<nb::mlp::p5_update.*GatherView' 4 --data $D --batch 8192 --precision fp16 --epochs 1 --dropout 0.2 --workload mlp_batch_sweep
  W2=(--data $D --layers 784,8192,8192,8192,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16 --steps 8)
  ncu_one w2-first 'p5_fused_update_first' 4 "${W2[@]}"
  ncu_one w2-softmax 'p5_fwd_softmax_ce' 4 "${W2[@]}"
elif [ "$STAGE" = a ]; then
  timeout 90 build/tests/gpu_tests -tc="*step 9*,*row chain*" > $R/test-new.log 2>&1; t "new tests rc $?: $(tail -2 $R/test-new.log | tr '\n' ' ')"
  pack
  timeout 200 build/tests/gpu_tests > $R/tests.log 2>&1; t "all GPU tests rc $?: $(tail -3 $R/tests.log | tr '\n' ' ')"
  pack
  timeout 100 compute-sanitizer --tool memcheck build/tests/gpu_tests -tc="*step 9*" > $R/memcheck-step9.log 2>&1
  t "step 9 under memcheck rc $?: $(grep -E 'ERROR SUMMARY|test cases' $R/memcheck-step9.log | tr '\n' ' ')"
  pack
  DATA=$D ONLY='row-chain|wgmma' NO_BUILD=1 timeout 180 scripts/validate_sweep.sh $R/validate.log > /dev/null 2>&1; t "validate rc $?: $(tail -2 $R/validate.log | tr '\n' ' ')"
else
  for spec in "8192 fp16" "2048 fp16" "8192 fp32"; do set -- $spec
    timeout 120 build/phase5_batched --data $D --batch $1 --precision $2 --gemm-compare --out $R/gemm --tag gemm-b$1-$2 > $R/gemm/b$1-$2.log 2>&1
    t "gemm-compare b=$1 $2 rc $?"
  done
  pack
  ab() {  # ab NAME OPTION "VALUE1 VALUE2" BATCHES PRECISIONS
    local name=$1 opt=$2 vals=$3 bs=$4 prs=$5 r b pr v M e
    for r in 1 2; do for b in $bs; do for pr in $prs; do
      M=$vals; [ $r = 2 ] && M=$(echo $vals | awk '{print $2, $1}')
      e=2; [ $b -ge 1024 ] && e=$(( b / 512 ))
      for v in $M; do
        timeout 60 build/phase5_batched --data $D --batch $b --precision $pr --epochs $e --dropout 0.2 --deterministic --no-cupti \
          --workload mlp_batch_sweep $opt $v --out $R/ab --tag ab-$name-$pr-b$b-$v-r$r > $R/ab/$name-$pr-b$b-$v-r$r.log 2>&1
        echo "$name r=$r b=$b $pr $opt $v rc $?" >> $R/ab/rc.txt
      done
    done; done; done
  }
  ab wg --fp16-gemm "auto wgmma" "1024 2048 4096 8192" fp16; t "ab wgmma"; pack
  ab rc --row-chain "off on" "32 64 1024 8192" "fp32 fp16"; t "ab row chain"; pack
  for spec in "8192 fp16 --fp16-gemm auto" "8192 fp16 --fp16-gemm wgmma" "8192 fp32 --row-chain off" "8192 fp32 --row-chain on" \
              "32 fp32 --row-chain off" "32 fp32 --row-chain on"; do set -- $spec
    timeout 60 build/phase5_batched --data $D --batch $1 --precision $2 --epochs 2 --dropout 0.2 --pdl off --workload mlp_batch_sweep $3 $4 \
      --out $R/traced --tag traced-b$1-$2-$4 > $R/traced/b$1-$2-$4.log 2>&1; t "traced b=$1 $2 $3 $4 rc $?"
  done
  python3 - $R <<'PY' | tee -a $R/summary.txt
import json, glob, collections, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(list)); acc = collections.defaultdict(dict)
for f in sorted(glob.glob(sys.argv[1] + "/ab/*__ab-*.json")):
    r = json.load(open(f)); name, v, _ = f.split("__ab-")[-1][:-5].rsplit("-", 2)
    d[name][v].append(r["timing"]["per_step_ms"]["median"] * 1000)
    acc[name][v] = (r["metrics"].get("test_accuracy"), r["metrics"].get("train_loss"))
for n in sorted(d):
    vs = sorted(d[n]); m = {k: statistics.median(x) for k, x in d[n].items()}
    print("%-18s " % n + "  ".join("%s %8.2f us (rounds %s) acc/loss %s" % (k, m[k], ["%.2f" % x for x in d[n][k]], acc[n][k]) for k in vs) +
          ("  ratio %s/%s x%.3f" % (vs[0], vs[1], m[vs[0]] / m[vs[1]]) if len(vs) == 2 else ""))
for f in sorted(glob.glob(sys.argv[1] + "/gemm/*.json")):
    r = json.load(open(f)); print(f.split("__")[-1], "passed" if r["validation"]["passed"] else "FAILED")
    for row in r["metrics"]["gemm_bench"]:
        if row["layer"] == 0:
            print("   %-16s %-14s %8.1f us %7.1f TFLOP/s rel.err %.2e splits %d" % (row["product"], row["impl"], row["ms"] * 1e3,
                  row["tflops"], row["rel_err"] or float("nan"), row["splits"]))
for f in sorted(glob.glob(sys.argv[1] + "/traced/*__traced-*.json")):
    r = json.load(open(f)); print(f.split("__")[-1], "plan:", [(p["product"], p["rung"], p["splits"]) for p in r["metrics"].get("gemm_plan", [])][:4])
    for k in (r.get("kernels") or [])[:12]:
        print("   grid %5d mean %8.2f us, calls %5d  %s" % (k["grid"][0], k["mean_ns"] / 1e3, k["calls"], k["name"][:110]))
PY
fi
kill $WD 2>/dev/null; wait $WD 2>/dev/null; pack; t packed
