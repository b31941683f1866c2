#!/usr/bin/env bash
# The GEMM benchmark timing each product as a graph of 10 launches (METHOD.md) instead of one launch
# between two events: bench_gemm.sh's gemm stage at 1,024 and 8,192 (the records gemm-b<B>[-fp16]); rounds
# for the big-batch criteria, fp32 at 1,024 ... 8,192 and fp16 at 8,192 (3 rounds), and main's
# build (.carry/j/p5side.xz, 4592eea: one launch between two events) at 8,192 beside each round.
# $OUT/j43.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j43; rm -rf $R; mkdir -p $R/g $R/old $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j43.XXXXXX); cp build/bench_gemm/logs/*.log $R/rec/ 2>/dev/null; tar czf $f $R 2>/dev/null; mv $f $OUT/j43.tgz; }
mkdir -p build; xz -dc .carry/j/p5graph.xz > build/phase5_batched; xz -dc .carry/j/p5side.xz > build/p5_old; chmod +x build/phase5_batched build/p5_old
P=build/phase5_batched; O=build/p5_old; D=.carry/data/mnist
t "p5 $(md5sum < $P | cut -c1-12) old $(md5sum < $O | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
STAGES=gemm BATCHES="1024 8192" NO_BUILD=1 RECORDS_DIR=$R/rec timeout 200 scripts/bench_gemm.sh > $R/bench_gemm.log 2>&1; t "bench_gemm rc $?"
pack
for r in 1 2 3; do
  for b in 8192 1024 2048 4096; do timeout 60 $P --data $D --batch $b --precision fp32 --gemm-compare --no-cupti --out $R/g --tag gemm-b$b-fp32-$r > $R/g/b$b-fp32-$r.log 2>&1 || t "gemm $b fp32 $r rc $?"; done
  timeout 60 $P --data $D --batch 8192 --precision fp16 --gemm-compare --no-cupti --out $R/g --tag gemm-b8192-fp16-$r > $R/g/b8192-fp16-$r.log 2>&1 || t "gemm 8192 fp16 $r rc $?"
  for pr in fp32 fp16; do NB_GIT_COMMIT=4592eea timeout 60 $O --data $D --batch 8192 --precision $pr --gemm-compare --no-cupti --out $R/old --tag gemm-b8192-$pr-$r > $R/old/b8192-$pr-$r.log 2>&1 || t "old $pr $r rc $?"; done
  t "round $r"; pack
done
cat > $R/summary.py <<'PY'
import json, glob, sys, statistics as st, collections
# every rung's time a round and its ratio to cuBLASLt (fp32: cublaslt-fp32; fp16: cublaslt-fp16) of
# the same round and product; medians over rounds
t = collections.defaultdict(dict)
for f in sorted(glob.glob(sys.argv[1] + '/*__gemm-b*.json')):
    b, pr, rnd = f.split('gemm-b')[1][:-5].split('-')
    for x in json.load(open(f))['metrics']['gemm_bench']:
        t[(int(b), pr, x['layer'], x['product'], x['shape'] if 'shape' in x else '')][(x['impl'], int(rnd))] = (x['ms'] * 1e3, x['passed'])
print('batch prec layer product impl: median us [rounds] | median ratio cuBLASLt/own [range]  (ok = every round within tolerance)')
for k in sorted(t):
    v = t[k]; base = 'cublaslt-' + k[1]
    for impl in sorted({i for i, _ in v}):
        rs = sorted(r for i, r in v if i == impl)
        us = [v[(impl, r)][0] for r in rs]; ok = all(v[(impl, r)][1] for r in rs)
        rat = [v[(base, r)][0] / v[(impl, r)][0] for r in rs if (base, r) in v]
        print('%5d %s L%d %-16s %-14s %8.2f [%s] | %s%s' % (k[0], k[1], k[2], k[3], impl, st.median(us), ' '.join('%.2f' % u for u in us),
              ('%.3f [%.3f-%.3f]' % (st.median(rat), min(rat), max(rat))) if rat and impl != base else '-', '' if ok or impl.endswith('tf32') else '  NOT OK'))
PY
python3 $R/summary.py $R/g > $R/summary.txt; python3 $R/summary.py $R/old > $R/summary-old.txt
grep " L0 \| L1 weight\| L1 forward\| L2 weight\| L2 forward" $R/summary.txt | grep -v "tile-wmma" | head -80; echo; grep " L0 " $R/summary-old.txt
pack; t done
