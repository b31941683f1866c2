#!/usr/bin/env bash
# Per-product kernel times of W1's fp16 step, --fp16-gemm auto against mma, PDL off (a kernel's time
# is then its own), CUPTI on, batch 1,024 / 2,048 / 4,096 / 8,192; the table names each product's
# kernel and rung. Carry .carry/data, .carry/bins/ra_p5.xz. Results: $OUT/fr.tgz
set -u
R=build/fr; rm -rf $R; mkdir -p $R
xz -dc .carry/bins/ra_p5.xz > build/phase5_batched; chmod +x build/phase5_batched
D=.carry/data/mnist
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt
for b in 1024 2048 4096 8192; do for v in auto mma; do for pdl in off on; do
  timeout 60 build/phase5_batched --data $D --batch $b --precision fp16 --epochs $(( b / 1024 + 1 )) --dropout 0.2 --deterministic \
    --workload mlp_batch_sweep --fp16-gemm $v --pdl $pdl --out $R --tag fr-b$b-$v-pdl$pdl > $R/b$b-$v-pdl$pdl.log 2>&1
  echo "b=$b $v pdl=$pdl rc $?" >> $R/rc.txt
done; done; done
python3 - $R <<'PY' | tee $R/summary.txt
import json, glob, sys, re
for f in sorted(glob.glob(sys.argv[1] + "/*__fr-*.json")):
    r = json.load(open(f)); tag = f.split("__fr-")[-1][:-5]
    print("== %s  step %.2f us" % (tag, r["timing"]["per_step_ms"]["median"] * 1000))
    for k in sorted(r["kernels"], key=lambda k: -k["total_ns"]):
        if "p5_eval" in k["name"]: continue
        m = re.match(r"nb::mlp::(\w+)<nb::mlp::(\w+)", k["name"])
        print("  %-22s %-20s grid %5d calls %5d mean %7.2f us" % (m.group(1) if m else k["name"][:22], m.group(2) if m else "", k["grid"][0], k["calls"], k["mean_ns"] / 1000))
PY
tar czf $OUT/fr.tgz $R
