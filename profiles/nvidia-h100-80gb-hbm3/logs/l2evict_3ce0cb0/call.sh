#!/usr/bin/env bash
# (j44) Probe: an L2 eviction priority on the fused backward passes' fp32 master stream (NB_PROBE_L2:
# 0 none, 1 master loads and stores evict_first, 2 also the fp16 copy's stores evict_last, 3 only the latter), probe
# build .carry/j/p5l2h.xz: --validate, memcheck, W2's step A/B at h = 1,024 ... 8,192 (2 rounds
# alternating, 400 steps; at 2,048 and 4,096 also --backward branched and paired), the kernels alone at 2,048 (PDL off). On an H200 first: the GEMM benchmark's
# records at every batch with the graph-timed build (.carry/j/p5graph.xz, b7a1ef2). $OUT/j44.tgz.
set -u
R=build/j44; rm -rf $R; mkdir -p $R/ab $R/v $R/k $R/rec
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .j44.XXXXXX); cp build/bench_gemm/logs/*.log $R/rec/ 2>/dev/null; tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/j44.tgz; }
mkdir -p build; xz -dc .carry/j/p5l2h.xz > build/p5probe; xz -dc .carry/j/p5graph.xz > build/phase5_batched; chmod +x build/p5probe build/phase5_batched
P=build/p5probe; D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --precision fp16"
GPU=$(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)
t "probe $(md5sum < $P | cut -c1-12) graph $(md5sum < build/phase5_batched | cut -c1-12); $GPU"
if [[ "$GPU" == *H200* ]]; then
  NB_GIT_COMMIT=b7a1ef2 STAGES=gemm NO_BUILD=1 RECORDS_DIR=$R/rec timeout 240 scripts/bench_gemm.sh > $R/bench_gemm.log 2>&1; t "bench_gemm (H200) rc $?"; pack
fi
export NB_GIT_COMMIT=probe-l2hint
for v in 0 2; do
  NB_PROBE_L2=$v timeout 60 $P --data $D $W --dropout 0.2 --layers 784,2048,2048,2048,10 --batch 32 --steps 4 --validate --validate-steps 1 --no-cupti --out $R/v --tag v$v > $R/v/v$v.log 2>&1
  t "validate v$v rc $? ok $(grep -c ' ok$' $R/v/v$v.log) fail $(grep -ci fail $R/v/v$v.log)"
done
NB_PROBE_L2=2 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 $P --data $D $W --dropout 0.2 --layers 784,1100,1100,1100,10 --steps 3 --no-cupti --out $R/v --tag san > $R/v/memcheck.log 2>&1
t "memcheck rc $? $(grep -E 'ERROR SUMMARY' $R/v/memcheck.log | head -1)"; pack
for r in 1 2; do for h in 1024 2048 4096 8192; do for v in 0 1 2 3; do
  NB_PROBE_L2=$v timeout 20 $P --data $D $W --dropout 0 --layers 784,$h,$h,$h,10 --steps 400 --no-cupti --out $R/ab --tag ab-h$h-v$v-$r > $R/ab/h$h-v$v-$r.log 2>&1
done; done
  for h in 2048 4096; do for b in branched paired; do
    timeout 20 $P --data $D $W --dropout 0 --layers 784,$h,$h,$h,10 --backward $b --steps 400 --no-cupti --out $R/ab --tag ab-h$h-$b-$r > $R/ab/h$h-$b-$r.log 2>&1
  done; done; t "ab round $r"; done
python3 - $R <<'PY' > $R/ab-summary.txt
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/ab/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=d['metrics'].get('param_checksum')
for k in sorted(v, key=lambda s:(int(s.split('-')[0][1:]), s)): print('%-10s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
cat $R/ab-summary.txt; pack
# W1's model at batch 8,192: the row chain (--row-chain on) against the default (off there), fp32 and fp16.
for r in 1 2; do for pr in fp32 fp16; do for rc in auto on; do
  timeout 30 $P --data $D --batch 8192 --epochs 4 --precision $pr --row-chain $rc --no-cupti --out $R/ab --tag w1-b8192-$pr-rc$rc-$r > $R/ab/w1-$pr-$rc-$r.log 2>&1
done; done; t "w1 round $r"; done
python3 - $R <<'PY' > $R/w1-summary.txt
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/ab/*__w1-*.json')):
  d=json.load(open(f)); k=f.split('__w1-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=d['metrics'].get('param_checksum')
for k in sorted(v): print('%-22s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
cat $R/w1-summary.txt; pack
for v in 0 2; do
  NB_PROBE_L2=$v timeout 30 $P --data $D $W --dropout 0 --layers 784,2048,2048,2048,10 --pdl off --steps 400 --out $R/k --tag k-h2048-v$v > $R/k/h2048-v$v.log 2>&1; t "kernels h=2048 v$v rc $?"
done
python3 - $R/k > $R/k/kernels.txt <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*__k-*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], 'step %.2f us' % (d['timing']['per_step_ms']['median']*1e3))
  for k in sorted(d.get('kernels',[]), key=lambda k:-k['total_ns'])[:9]:
    if k['calls'] >= 400: print('  %8.2f us/call  %4d calls grid %5d  %s' % (k['mean_ns']/1e3, k['calls'], k['grid'][0], k['name'][:100]))
PY
cat $R/k/kernels.txt; pack; t done
