#!/usr/bin/env bash
# call 2 (phase 5 built here, carried gzipped: new = 16be240 + --backward auto branched wherever the
# fused backward does not run; base = 465b2a2):
# (1) Nsight Compute stalls (STALLS=1) on step 5's two first-layer kernels inside W1's step at batch
#     8,192 (the gathered forward and the first layer's weight gradient + Adam);
# (2) --backward auto (now branched) against paired on the paths whose default changes: fp16 W1 at
#     32, 1,024, 8,192; W2 fp32 at h = 128, 1,024; W2 fp16 at h = 1,000 (no fused pass: widths not
#     multiples of 8); 2 epochs / 1,000 steps, --no-cupti.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-16be240+auto}
R=build/call2; rm -rf $R; mkdir -p $R/rec $R/ab $R/ncu
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { tar czf $OUT/call2.tmp.tgz $R && mv $OUT/call2.tmp.tgz $OUT/call2.tgz; }
( exec >/dev/null 2>&1; sleep 300; pack ) & WD=$!
mkdir -p build
for b in base new; do gunzip -c .carry/bins/p5_$b.gz > build/p5_$b; chmod +x build/p5_$b; done
cp build/p5_new build/phase5_batched && touch build/phase5_batched
D=(--data .carry/data/mnist)
for b in 32 1024 8192; do for bk in paired auto; do
  timeout 60 build/p5_new "${D[@]}" --batch $b --precision fp16 --epochs 2 --no-cupti --workload mlp_batch_sweep --backward $bk --out $R/ab --tag ab-b$b-fp16-$bk-r1 > $R/ab/b$b-fp16-$bk.log 2>&1
done; done
for h in 128 1024 1000; do pr=fp32; [ $h = 1000 ] && pr=fp16; for bk in paired auto; do
  timeout 60 build/p5_new "${D[@]}" --layers 784,$h,$h,$h,10 --optimizer sgd --lr 0.003 --dropout 0 --precision $pr --steps 1000 --no-cupti --backward $bk --out $R/ab --tag ab-w2h$h-$pr-$bk-r1 > $R/ab/w2h$h-$pr-$bk.log 2>&1
done; done
t "ab done"
python3 - <<'PY' | tee -a $R/steps.txt
import json, glob
for f in sorted(glob.glob("build/call2/ab/*.json")):
    r = json.load(open(f)); name = f.split("__ab-")[-1].rsplit("-r", 1)[0]
    print("%-24s %8.2f us  backward=%s" % (name, r["timing"]["per_step_ms"]["median"] * 1000, r["metrics"].get("backward")))
PY
for sk in 4 5 6 7; do
  PROFILE_DIR=$R/ncu/s$sk STALLS=1 KERNEL=gemm_tf32x3_kernel SKIP=$sk timeout 100 scripts/profile.sh ncu 5 "${D[@]}" --batch 8192 --steps 3 --warmup 0 --repeats 1 --pdl off > $R/ncu-s$sk.log 2>&1
  t "ncu skip $sk rc $?: $(grep -h -o 'p5_[a-z_]*' $R/ncu/s$sk/*.csv 2>/dev/null | head -1)"
  rm -f $R/ncu/s$sk/*.ncu-rep
done
pack; kill $WD 2>/dev/null; pkill -f "sleep 300" 2>/dev/null
