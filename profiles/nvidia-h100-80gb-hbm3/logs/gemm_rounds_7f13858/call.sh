#!/usr/bin/env bash
# The GEMM benchmark in rounds on main's build (.carry/j/p5.xz, 7f13858: the GEMM code of main): fp32
# at batch 8,192 (7 rounds) and 1,024 / 2,048 / 4,096 (3 rounds), fp16 at 8,192 (3 rounds); each
# rung's time and its ratio to cuBLASLt of the same round, medians over rounds (summary.py); W1's
# fp32 step at 8,192 kernel by kernel with PDL off. $OUT/j18.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/j18; rm -rf $R; mkdir -p $R/g $R/k
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j18.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/j18.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/j/p5.xz > build/phase5_batched; chmod +x build/phase5_batched; P=build/phase5_batched; D=.carry/data/mnist
t "p5 $(md5sum < $P | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
for r in 1 2 3 4 5 6 7; do
  timeout 60 $P --data $D --batch 8192 --precision fp32 --gemm-compare --out $R/g --tag gemm-b8192-fp32-$r > $R/g/b8192-fp32-$r.log 2>&1; t "gemm 8192 fp32 $r rc $?"
  if [ $r -le 3 ]; then
    for b in 1024 2048 4096; do timeout 60 $P --data $D --batch $b --precision fp32 --gemm-compare --out $R/g --tag gemm-b$b-fp32-$r > $R/g/b$b-fp32-$r.log 2>&1; done; t "gemm 1024-4096 fp32 $r"
    timeout 60 $P --data $D --batch 8192 --precision fp16 --gemm-compare --out $R/g --tag gemm-b8192-fp16-$r > $R/g/b8192-fp16-$r.log 2>&1; t "gemm 8192 fp16 $r rc $?"
  fi
  pack
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
python3 $R/summary.py $R/g > $R/summary.txt 2>&1; grep -E " L0 " $R/summary.txt | head -40; pack
timeout 60 $P --data $D --batch 8192 --precision fp32 --pdl off --steps 100 --out $R/k --tag k-fp32 > $R/k/fp32.log 2>&1; t "kernels fp32 rc $?"
python3 - $R/k > $R/k/kernels.txt <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], 'step %.2f us' % (d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:12]:
    print('  %8.2f us/call  %4d calls grid %5d  %s' % (k['mean_ns']/1e3, k['calls'], k['grid'][0], k['name'][:100]))
PY
cat $R/k/kernels.txt
kill $WD 2>/dev/null; pack; t done
