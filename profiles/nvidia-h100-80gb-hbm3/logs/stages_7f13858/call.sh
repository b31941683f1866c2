#!/usr/bin/env bash
# PART=ab: the tile's pipeline depth for the products with a byte operand (the gathered forward and
# the first layer's weight gradient; steps 5, 6, 7 and 10): 3 (main), 4 or 6 stages of k-tiles, an
# experiment build (.carry/j/p5exp.xz, NB_TC_STAGES). GEMM benchmark at 8,192 (fp32 and fp16, 2
# rounds), W1's step (300 steps) at 8,192 (2 rounds) and 1,024-4,096 (one), fp32 and fp16;
# --validate at 4,097 for 4 and 6 stages. PART=sweep: main's build (.carry/j/p5.xz), the batch sweep
# at 2,048 and 4,096 with the twins. $OUT/j12-$PART.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT; : "${PART:?}"
R=build/j12-$PART; rm -rf $R; mkdir -p $R/g $R/ab $R/v $R/rec $R/logs
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j12.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j12-$PART.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; D=.carry/data/mnist
if [ "$PART" = ab ]; then
  xz -dc .carry/j/p5exp.xz > build/p5exp; chmod +x build/p5exp; P=build/p5exp
  t "exp $(md5sum < $P | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
  for r in 1 2; do for s in 3 4 6; do for pr in fp32 fp16; do
    NB_TC_STAGES=$s timeout 90 $P --data $D --batch 8192 --precision $pr --gemm-compare --out $R/g --tag gemm-b8192-$pr-s$s-$r > $R/g/b8192-$pr-s$s-$r.log 2>&1; t "gemm 8192 $pr s$s $r rc $?"
  done; done; done
  for f in $R/g/*.log; do echo "== $(basename $f .log)"; grep -E 'L0 (forward|weight-gradient)' $f | grep -v -E 'own-tile|tf32 ' ; done > $R/gemm-summary.txt; pack
  for r in 1 2; do for s in 3 4 6; do for pr in fp32 fp16; do
    NB_TC_STAGES=$s timeout 30 $P --data $D --batch 8192 --precision $pr --steps 300 --no-cupti --out $R/ab --tag ab-b8192-$pr-s$s-$r > $R/ab/b8192-$pr-s$s-$r.log 2>&1
  done; done; t "ab 8192 round $r"; done
  for b in 1024 2048 4096; do for s in 3 4 6; do for pr in fp32 fp16; do
    NB_TC_STAGES=$s timeout 30 $P --data $D --batch $b --precision $pr --steps 300 --no-cupti --out $R/ab --tag ab-b$b-$pr-s$s-1 > $R/ab/b$b-$pr-s$s-1.log 2>&1
  done; done; t "ab $b"; done
  python3 - $R/ab > $R/ab-summary.txt <<'PY'
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=d['metrics'].get('param_checksum')
for k in sorted(v): print('%-18s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
  cat $R/ab-summary.txt; pack
  for s in 4 6; do for pr in fp32 fp16; do
    NB_TC_STAGES=$s timeout 60 $P --data $D --batch 4097 --precision $pr --steps 4 --validate --validate-steps 2 --no-cupti --out $R/v --tag v-b4097-$pr-s$s > $R/v/b4097-$pr-s$s.log 2>&1
    t "validate 4097 $pr s$s rc $? $(grep -ci fail $R/v/b4097-$pr-s$s.log) fail-lines"
  done; done
else
  xz -dc .carry/j/p5.xz > build/phase5_batched; chmod +x build/phase5_batched
  t "p5 $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
  SWEEP_TWINS="torch jax" STAGES=sweep SWEEP_BATCHES="2048 4096" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 400 scripts/bench_frameworks.sh > $R/sweep.log 2>&1; t "sweep rc $?"
  cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null
  grep -v "^\s*$" $R/sweep.log | cut -c1-170 | tail -24
fi
kill $WD 2>/dev/null; pack; t done
