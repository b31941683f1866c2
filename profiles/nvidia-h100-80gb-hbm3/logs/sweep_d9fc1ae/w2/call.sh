#!/usr/bin/env bash
# W2 on one machine, one build of HEAD (.carry/e/p5.xz, NB_GIT_COMMIT) and one of HEAD with the
# gathered first layer's W kept on registers (.carry/ev/p5v.xz): --validate of the variant, step 8's
# rule A/B (regs | auto | variant's auto; 2 rounds alternating at h = 1,024 ... 8,192; records ab/),
# then the width sweep with both twins (bench_frameworks.sh stage w2, NO_BUILD=1) and the grid
# kernel's --breakdown at 256 ... 2,048. Results: $OUT/e1.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/e1; rm -rf $R; mkdir -p $R/rec $R/bd $R/ab B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .e1.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/e1.tgz; }
( exec >/dev/null 2>&1; while sleep 20; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/e/p5.xz > build/phase5_batched; xz -dc .carry/ev/p5v.xz > B/p5v; chmod +x build/phase5_batched B/p5v
t "build $(md5sum < build/phase5_batched | cut -c1-12) variant $(md5sum < B/p5v | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --dropout 0 --precision fp16"
timeout 40 B/p5v --data $D $W --layers 784,3000,3000,3000,10 --batch 7 --steps 6 --validate --validate-steps 2 --no-cupti --out $R/ab --tag v > $R/v.log 2>&1
t "variant validate h=3000 b=7 rc $? ok $(grep -c ' ok$' $R/v.log) fail $(grep -ci fail $R/v.log) $(grep -o 'f16-stream[a-z-]*' $R/v.log | sort | uniq -c | tr '\n' ' ')"
for r in 1 2; do for h in 1024 2048 4096 8192; do for m in regs auto var; do
  b=build/phase5_batched; a=$m; [ $m = var ] && b=B/p5v && a=auto
  timeout 15 $b --data $D $W --layers 784,$h,$h,$h,10 --fp16-stream $a --steps 400 --no-cupti --out $R/ab --tag ab-h$h-$m-$r > /dev/null 2>&1
done; done; t "ab round $r"; done
python3 - $R <<'PY' > $R/ab-summary.txt
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/ab/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=d['metrics'].get('param_checksum')
for k in sorted(v, key=lambda s:(int(s.split('-')[0][1:]), s)): print('%-12s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
cat $R/ab-summary.txt; pack
STAGES=w2 W2_HS="${W2_HS:-128 256 512 1024 2048 4096 8192}" NO_BUILD=1 RECORDS_DIR=$R/rec timeout ${LIMIT:-420} scripts/bench_frameworks.sh > $R/w2.log 2>&1
t "w2 rc $?"; mkdir -p $R/logs; cp build/bench_frameworks/logs/*.log $R/logs/ 2>/dev/null; pack
for h in ${BD_HS:-256 512 1024 2048}; do
  timeout 30 build/phase5_batched --data $D $W --layers 784,$h,$h,$h,10 --launch grid --steps 2000 --breakdown --no-cupti --out $R/bd --tag bd-h$h > $R/bd/h$h.log 2>&1; t "breakdown h=$h rc $?"
done
kill $WD 2>/dev/null; pack; t done
grep -v "^\s*$" $R/w2.log | cut -c1-160 | tail -45
