#!/usr/bin/env bash
# (k6) --fixup kernel (the first layer's split weight gradient added and updated by a kernel of its
# own): its GPU test (and under memcheck), --validate at batch 8,192 and 4,097 in fp32 and fp16, then W1's
# step at batch 2,048 / 8,192, fp32 and fp16, tail -> kernel, 2 rounds alternating, one build
# (.carry/j/p5.xz, .carry/j/tests.xz; NB_GIT_COMMIT). $OUT/k6.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/k6; rm -rf $R; mkdir -p $R/ab $R/v B
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .k6.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/k6.tgz; }
mkdir -p build; xz -dc .carry/j/p5.xz > build/phase5_batched; xz -dc .carry/j/tests.xz > B/gpu_tests
chmod +x build/phase5_batched B/gpu_tests; P=build/phase5_batched; D=.carry/data/mnist
t "p5 $(md5sum < $P | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | head -1)"
timeout 120 B/gpu_tests -tc="*fix-up in a kernel of its own*,*gathered bytes*" > $R/tests.log 2>&1; t "tests rc $? $(grep -E 'test cases' $R/tests.log | tr -s ' ')"
ok=0; for i in $(seq 1 10); do timeout 60 B/gpu_tests -tc="*fix-up in a kernel of its own*" >> $R/tests-repeat.log 2>&1 && ok=$((ok+1)); done
t "deferred fix-up test passed $ok of 10 (fresh random inputs each run; a contraction difference in Adam between the two kernels would show here)"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 B/gpu_tests -tc="*fix-up in a kernel of its own*" > $R/memcheck.log 2>&1; t "memcheck rc $?"
for pr in fp32 fp16; do for b in 8192 4097; do
  timeout 60 $P --data $D --batch $b --epochs 1 --precision $pr --fixup kernel --validate --no-cupti --out $R/v --tag v-$pr-b$b > $R/v/$pr-b$b.log 2>&1; t "validate $pr b=$b rc $?"
done; done; pack
for r in 1 2; do for b in 8192 2048; do for pr in fp32 fp16; do for f in tail kernel; do
  timeout 60 $P --data $D --batch $b --epochs 3 --precision $pr --fixup $f --no-cupti --out $R/ab --tag ab-b$b-$pr-$f-$r > $R/ab/b$b-$pr-$f-$r.log 2>&1
done; done; done; t "ab round $r"; done
python3 - $R <<'PY' > $R/ab-summary.txt
import json,glob,sys,collections
v=collections.defaultdict(list); c={}
for f in sorted(glob.glob(sys.argv[1]+'/ab/*__ab-*.json')):
  d=json.load(open(f)); k=f.split('__ab-')[-1][:-5].rsplit('-',1)[0]
  v[k].append(d['timing']['per_step_ms']['median']*1e3); c[k]=(d['metrics'].get('param_checksum'), d['metrics'].get('fixup'))
for k in sorted(v): print('%-20s %s  mean %.2f  %s' % (k, ' '.join('%.2f'%x for x in v[k]), sum(v[k])/len(v[k]), c[k]))
PY
pack; t done; cat $R/ab-summary.txt
