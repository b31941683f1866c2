#!/usr/bin/env bash
# A probe of 5g (--launch grid, W2): what the chain takes when the update team's work is skipped, i.e.
# the floor of a decomposition that moves the inner layers' updates off the chain's SMs (at h <= 1,024
# the grid uses 16-64 of the 132 SMs and its update team is busy all of every step). Build:
# 245a523 + grid-probe.patch (NB_PROBE_GRID_SKIP=1: the update team's rows and columns skipped, every
# signal kept; 2: the chain's first-layer update too; timing only: the training is wrong).
# Carry: .carry/data, .carry/bins/gp_p5.xz (that build, made on the host), .carry/call. ~2 minutes.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-245a523+grid-probe.patch}
R=build/gp; rm -rf $R; mkdir -p $R/runs
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .gp.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/gp.tgz; }
xz -dc .carry/bins/gp_p5.xz > build/gp_p5; chmod +x build/gp_p5
D=.carry/data/mnist
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
for r in 1 2; do for h in 256 512 1024 2048; do
  S="0 1 2"; [ $r = 2 ] && S="2 1 0"
  for s in $S; do
    NB_PROBE_GRID_SKIP=$s timeout 60 build/gp_p5 --data $D --layers 784,$h,$h,$h,10 --optimizer sgd --lr 0.003 --dropout 0 \
      --precision fp16 --batch 32 --steps 2000 --launch grid --no-cupti --out $R/runs --tag gp-h$h-s$s-r$r > $R/runs/h$h-s$s-r$r.log 2>&1
    echo "r=$r h=$h skip=$s rc $?" >> $R/rc.txt
  done
done; done
t runs; pack
for s in 0 1 2; do
  NB_PROBE_GRID_SKIP=$s timeout 60 build/gp_p5 --data $D --layers 784,1024,1024,1024,10 --optimizer sgd --lr 0.003 --dropout 0 \
    --precision fp16 --batch 32 --steps 2000 --launch grid --no-cupti --breakdown --out $R/runs --tag gpbd-h1024-s$s > $R/runs/bd-h1024-s$s.log 2>&1
  t "breakdown skip=$s rc $?"
done
python3 - $R <<'PY' | tee $R/summary.txt
import json, glob, collections, statistics, sys
d = collections.defaultdict(list)
for f in glob.glob(sys.argv[1] + "/runs/*__gp-h*.json"):
    r = json.load(open(f)); tag = f.split("__")[-1][:-5]; _, h, s, _ = tag.split("-")
    d[(int(h[1:]), int(s[1:]))].append(r["timing"]["per_step_ms"]["median"] * 1000)
for h in sorted({k[0] for k in d}):
    print("h=%5d  " % h + "  ".join("skip %d: %7.2f us (%s)" % (s, statistics.median(d[(h, s)]), "/".join("%.2f" % x for x in d[(h, s)])) for s in (0, 1, 2) if (h, s) in d))
for f in sorted(glob.glob(sys.argv[1] + "/runs/*__gpbd-*.json")):
    r = json.load(open(f)); print(f.split("__")[-1], "step %.2f us" % (r["timing"]["per_step_ms"]["median"] * 1000))
    print("  ", json.dumps((r.get("metrics", {}).get("grid") or {}).get("step_breakdown"))[:900])
PY
pack; t packed
