#!/usr/bin/env bash
# GEMM step 8's cluster hand-over, the final build (.carry/h/p5.xz, tests.xz; NB_GIT_COMMIT): GPU tests
# (step 8's, bit-compared with the global hand-over of the slices launched; the fused forward's),
# --validate where the clusters are re-planned, memcheck and racecheck there. Results: $OUT/f4.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/f4; rm -rf $R; mkdir -p $R/v B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .f4.XXXXXX); tar czf $f --exclude='*.trace.json' $R 2>/dev/null; mv $f $OUT/f4.tgz; }
( exec >/dev/null 2>&1; while sleep 15; do pack; done ) & WD=$!
mkdir -p build; xz -dc .carry/h/p5.xz > build/phase5_batched; xz -dc .carry/h/tests.xz > B/gpu_tests
chmod +x build/phase5_batched B/gpu_tests
t "p5 $(md5sum < build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 150 B/gpu_tests -tc="*gather + GEMM + bias*,*step 8*" > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E 'test cases|assertions' $R/tests.log | tr -s ' ' | tr '\n' ' ')"
D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --precision fp16"
for v in "1000 1 on 0" "2048 32 auto 0.2" "3000 7 auto 0" "4096 32 auto 0"; do set -- $v
  timeout 90 build/phase5_batched --data $D $W --dropout $4 --layers 784,$1,$1,$1,10 --batch $2 --fp16-stream $3 --steps 4 --validate --validate-steps 1 --no-cupti --out $R/v --tag v-h$1-b$2-d$4 > $R/v/h$1-b$2-d$4.log 2>&1
  t "validate h=$1 b=$2 --fp16-stream $3 dropout $4 rc $? ok $(grep -c ' ok$' $R/v/h$1-b$2-d$4.log) fail $(grep -ci fail $R/v/h$1-b$2-d$4.log) $(grep -h '^note' $R/v/h$1-b$2-d$4.log | tr '\n' ' ')"
done
python3 - $R/v > $R/v/plans.txt <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], [(q['product'],q['rung'],q['splits'],q.get('handover','global')) for q in d['metrics'].get('gemm_plan',[])][:4])
PY
cat $R/v/plans.txt; pack
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 99 build/phase5_batched --data $D $W --dropout 0.2 --layers 784,2048,2048,2048,10 --steps 3 --no-cupti --out $R/v --tag san-$tool > $R/v/$tool.log 2>&1
  t "$tool rc $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/v/$tool.log | head -2 | tr '\n' ' ') $(grep -h '^note' $R/v/$tool.log | head -2 | tr '\n' ' ')"
done
kill $WD 2>/dev/null; pack; t done
