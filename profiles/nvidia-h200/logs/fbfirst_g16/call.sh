#!/usr/bin/env bash
# Two changes, each against the build without it, one machine: (fb) the fused update pass without a
# backward-data product (the first layer) in 8-warp blocks, and every pass's bias summed from the
# staged dZ inside the sub-tile loop; (g16) the grid kernel (5g) with 16-byte fragment reads.
# Builds carried (nvcc 13.0, sm_90a): old = main without either, fb = with (fb), g16 = with both.
# 1. GPU tests of both (fused backward, grid kernel; plain and memcheck); --validate of the graph path
#    (W2 at awkward widths, W1 fp16 with Adam) and the grid kernel (h 100 ... 2,048, batch 1 / 7 / 32).
# 2. A/B, 2 rounds alternating, 2,000 steps (600 at 8,192): W2's graph path old/fb at h = 1,024 ...
#    8,192 and W1 fp16 at batch 32; the grid kernel fb/g16 at h = 256, 1,024, 2,048.
# 3. Each kernel's own time (PDL off) at h = 8,192 old/fb; --breakdown of the grid step at 1,024 fb/g16.
# Carry .carry/data, .carry/c1 (p5_3.tar.xz: old_p5, fb_p5, g16_p5; g16_tests.xz). Results: $OUT/fg.tgz
set -u
: "${NB_GIT_COMMIT:?name the commit of the carried builds}"; export NB_GIT_COMMIT
R=build/fg; rm -rf $R; mkdir -p $R/ab $R/val $R/scratch $R/bd $R/k
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .fg.XXXXXX); tar czf $f --exclude=scratch --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/fg.tgz; }
( exec >/dev/null 2>&1; while sleep 30; do pack; done ) & WD=$!
B=build/fgb; mkdir -p $B
xz -dc .carry/c1/p5_3.tar.xz | tar xf - -C $B & P1=$!; xz -dc .carry/c1/g16_tests.xz > $B/tests & P2=$!; wait $P1 $P2
for v in old fb g16; do mv $B/${v}_p5 $B/$v; done; chmod +x $B/*
t "$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist
W2() { echo --layers 784,$1,$1,$1,10 --optimizer sgd --lr 0.003 --dropout 0 --precision fp16; }
timeout 90 $B/tests -tc='mlp fused backward*,mlp grid*' > $R/val/tests.log 2>&1; t "tests rc $?: $(grep -h 'test cases' $R/val/tests.log | tail -1)"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 $B/tests -tc='mlp fused backward*' > $R/val/memcheck-fb.log 2>&1; t "memcheck fb rc $?: $(grep -h 'ERROR SUMMARY' $R/val/memcheck-fb.log | tail -1)"
for c in "2000 32" "300 1" "3000 7"; do set -- $c
  timeout 60 $B/g16 --data $D $(W2 $1) --batch $2 --steps 30 --validate --no-cupti --out $R/scratch --tag v > $R/val/graph-h$1-b$2.log 2>&1
  t "validate graph h=$1 b=$2 rc $?: $(grep -c ' ok$' $R/val/graph-h$1-b$2.log) ok, $(grep -ci 'fail' $R/val/graph-h$1-b$2.log) fail"
done
for b in 32 7; do
  timeout 60 $B/g16 --data $D --precision fp16 --batch $b --steps 30 --validate --no-cupti --out $R/scratch --tag v > $R/val/w1f16-b$b.log 2>&1
  t "validate W1 fp16 b=$b rc $?: $(grep -c ' ok$' $R/val/w1f16-b$b.log) ok, $(grep -ci 'fail' $R/val/w1f16-b$b.log) fail"
done
for h in 100 1000 2048; do for b in 1 7 32; do
  timeout 100 $B/g16 --data $D $(W2 $h) --launch grid --batch $b --steps 4 --validate --validate-steps 2 --no-cupti --out $R/scratch --tag v > $R/val/grid-h$h-b$b.log 2>&1
  echo "validate grid h=$h b=$b rc $?: $(grep -c ' ok$' $R/val/grid-h$h-b$b.log) ok, $(grep -ci 'fail' $R/val/grid-h$h-b$b.log) fail" >> $R/val/summary.txt
done; done
t "grid validate: $(grep -c 'rc 0' $R/val/summary.txt) of 9 rc 0, $(grep -c ' 0 fail' $R/val/summary.txt) with 0 fail"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 $B/g16 --data $D $(W2 1000) --launch grid --steps 20 --no-cupti --out $R/scratch --tag mc > $R/val/memcheck-grid.log 2>&1
t "memcheck grid rc $?: $(grep -h 'ERROR SUMMARY' $R/val/memcheck-grid.log | tail -1)"
pack
ab() {  # ab NAME A B ARGS...: 2 rounds alternating
  local n=$1 a=$2 b=$3; shift 3
  for r in 1 2; do M="$a $b"; [ $r = 2 ] && M="$b $a"
    for v in $M; do timeout 60 $B/$v --data $D "$@" --no-cupti --out $R/ab --tag "ab-$n-$v-r$r" > $R/ab/$n-$v-r$r.log 2>&1; echo "$n $v r$r rc $?" >> $R/ab/rc.txt; done
  done
}
for h in 1024 2048 4096; do ab graph$h old fb $(W2 $h) --steps 2000; done
ab graph8192 old fb $(W2 8192) --steps 600
ab w1f16 old fb --precision fp16 --steps 2000
t "ab graph"; pack
for h in 256 1024 2048; do ab grid$h fb g16 $(W2 $h) --launch grid --steps 2000; done
t "ab grid"
python3 - $R/ab <<'PY' | tee $R/ab/summary.txt
import json, glob, collections, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(list)); ck = collections.defaultdict(lambda: collections.defaultdict(set))
for f in sorted(glob.glob(sys.argv[1] + "/*__ab-*.json")):
    r = json.load(open(f)); n, v, _ = f.split("__ab-")[-1][:-5].split("-")
    d[n][v].append(r["timing"]["per_step_ms"]["median"] * 1000); ck[n][v].add(r["metrics"]["param_checksum"])
for n in d:
    (a, xa), (b, xb) = list(d[n].items())[:2] if len(d[n]) == 2 else (list(d[n].items()) + [("-", [0])])[:2]
    ma, mb = statistics.median(xa), statistics.median(xb)
    print("%-10s %-4s %8.2f %s  %-4s %8.2f %s  x%.3f  checksums equal: %s" % (n, a, ma, ["%.2f" % x for x in xa], b, mb, ["%.2f" % x for x in xb], ma / mb if mb else 0, ck[n][a] == ck[n][b]))
PY
pack
for v in old fb; do for h in 8192; do
  timeout 60 $B/$v --data $D $(W2 $h) --steps 600 --pdl off --out $R/k --tag "k-$v-h$h" > $R/k/$v-h$h.log 2>&1; t "kernels $v h=$h rc $?"
done; done
python3 - $R/k > $R/k/kernels.txt <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/*__k-*.json')):
  d=json.load(open(f)); print(os.path.basename(f), 'step %.2f us'%(d['timing']['per_step_ms']['median']*1000))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:6]:
    print('  %9.2f us  x%-5d grid %-5d min %7.1f max %7.1f  %s'%(k['mean_ns']/1e3,k['calls'],k['grid'][0],k['min_ns']/1e3,k['max_ns']/1e3,k['name'][:100]))
PY
for v in fb g16; do
  timeout 60 $B/$v --data $D $(W2 1024) --launch grid --steps 2000 --breakdown --no-cupti --out $R/bd --tag bd-$v > $R/bd/h1024-$v.log 2>&1; t "breakdown $v rc $?"
done
pack; kill $WD 2>/dev/null; t done
cat $R/k/kernels.txt; grep -h -B2 -A12 "part of the step" $R/bd/h1024-*.log | head -40
