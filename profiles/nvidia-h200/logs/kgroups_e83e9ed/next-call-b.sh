#!/usr/bin/env bash
# The next calls, part b (see next-call-a.sh): V's build, left in build/kb/new by part a, against
# 7d4fc94's (.carry/bins/s8g_p5.xz): the GEMM benchmark at 8,192 / 4,096 / 2,048 / 1,024 and W1's step
# at 1,024 ... 8,192 (and --fp32-gemm fma at 8,192), fp32 and fp16, alternating, 2 rounds.
set -u
V=${V:?V=kh or V=k2: the build part a left}
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-unknown}
R=build/${V}b; rm -rf $R; mkdir -p $R/scratch $R/ab $R/ncu
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/${V}b.tmp.tgz --exclude='*.ncu-rep' --exclude=scratch $R 2>/dev/null; mv $OUT/${V}b.tmp.tgz $OUT/${V}b.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
mkdir -p build/kb
PIDS=""
xz -dc .carry/bins/s8g_p5.xz > build/kb/old & PIDS="$PIDS $!"
wait $PIDS; chmod +x build/kb/*
D=build/kb/data/mnist
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
for r in 1 2; do for b in 8192 4096 2048 1024; do for pr in fp16 fp32; do
  VS="new old"; [ $r = 2 ] && VS="old new"
  for v in $VS; do
    timeout 60 build/kb/$v --batch $b --precision $pr --gemm-compare --data $D --out $R/scratch --tag "g-b$b-$pr-$v-r$r" > $R/ab/g-b$b-$pr-$v-r$r.log 2>&1
    echo "b=$b $pr $v r=$r rc $? fails $(grep -c 'FAIL' $R/ab/g-b$b-$pr-$v-r$r.log): $(grep -h '^  L0.*own-\(f16-mma\|tf32x3\|fma64\)\|^  L0.*cublaslt' $R/ab/g-b$b-$pr-$v-r$r.log | awk '{print substr($2,1,3), $8, $9}' | tr '\n' ' ')" | tee -a $R/ab-gemm.txt
  done
done; done; done
t "gemm ab"; pack
for r in 1 2; do
  for cfg in "f32-b1024|--batch 1024 --epochs 2" "f16-b1024|--precision fp16 --batch 1024 --epochs 2" \
             "f32-b2048|--batch 2048 --epochs 4" "f16-b2048|--precision fp16 --batch 2048 --epochs 4" \
             "f32-b4096|--batch 4096 --epochs 8" "f16-b4096|--precision fp16 --batch 4096 --epochs 8" \
             "f32-b8192|--batch 8192 --epochs 16" "f16-b8192|--precision fp16 --batch 8192 --epochs 16" \
             "fma-b8192|--fp32-gemm fma --batch 8192 --epochs 16"; do
    IFS='|' read -r name args <<<"$cfg"
    VS="old new"; [ $r = 2 ] && VS="new old"
    for v in $VS; do
      timeout 40 build/kb/$v --data $D $args --dropout 0.2 --deterministic --no-cupti --workload mlp_batch_sweep --out $R/ab --tag ab-$name-$v-r$r > $R/ab/$name-$v-r$r.log 2>&1
    done
  done
done
python3 - $R <<'PY' | tee -a $R/ab-steps.txt
import json, glob, collections, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(list)); ck = collections.defaultdict(lambda: collections.defaultdict(set))
for f in sorted(glob.glob(sys.argv[1] + "/ab/*__ab-*.json")):
    r = json.load(open(f)); name, v, _ = f.split("__ab-")[-1][:-5].rsplit("-", 2)
    d[name][v].append(r["timing"]["per_step_ms"]["median"] * 1000); ck[name][v].add(r["metrics"]["param_checksum"])
for n in sorted(d):
    m = {v: statistics.median(x) for v, x in d[n].items()}
    print("%-10s old %8.2f new %8.2f us a step (rounds: %s / %s) x%.3f checksums equal: %s" % (n, m.get("old", 0), m.get("new", 0), ["%.2f" % x for x in d[n]["old"]], ["%.2f" % x for x in d[n]["new"]], m.get("old", 0) / max(m.get("new", 1), 1e-9), ck[n]["old"] == ck[n]["new"]))
PY
t "step ab"; pack
kill $WD 2>/dev/null; pack; t packed
