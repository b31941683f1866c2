#!/usr/bin/env bash
# (k7) adam_moments (Adam's moments and step with every rounding spelled out): this build's GPU tests
# (all, once), the last layer's cluster-tail test 20 times (now bit for bit under Adam), --validate on
# W1's Adam paths (phase 5 at batch 32 on each one-launch rung, own GEMMs fp32/fp16 at 8,192 and 4,097;
# phase 4), and compare_builds.sh against the build before it (.carry/j/p5.xz: the same default
# code as main before adam_moments) on W1's Adam paths (checksums expected to differ: the bias's
# rounding) and W2's SGD paths (expected the same). $OUT/k7.tgz.
set -u
: "${NB_GIT_COMMIT:?}"; export NB_GIT_COMMIT
R=build/k7; rm -rf $R B/before; mkdir -p $R/v B/before/build
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/steps.txt; }
pack() { local f; f=$(mktemp -p $OUT .k7.XXXXXX); tar czf $f $R 2>/dev/null; mv $f $OUT/k7.tgz; }
mkdir -p build; xz -dc .carry/j/p5new.xz > build/phase5_batched; xz -dc .carry/j/p4new.xz > build/phase4_mlp
xz -dc .carry/j/testsnew.xz > B/gpu_tests; xz -dc .carry/j/p5.xz > B/before/build/phase5_batched
chmod +x build/phase5_batched build/phase4_mlp B/gpu_tests B/before/build/phase5_batched
P=build/phase5_batched; D=.carry/data/mnist
t "after $(md5sum < $P | cut -c1-12) before $(md5sum < B/before/build/phase5_batched | cut -c1-12); $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)"
timeout 150 B/gpu_tests > $R/tests.log 2>&1; t "gpu tests rc $? $(grep -E 'test cases' $R/tests.log | tr -s ' ')"
grep -B3 -A8 "ERROR" $R/tests.log | head -60
ok=0; for i in $(seq 1 20); do timeout 30 B/gpu_tests -tc="*cluster tail*" >> $R/tests-repeat.log 2>&1 && ok=$((ok+1)); done
t "cluster-tail test passed $ok of 20"; pack
W1="--data $D --layers 784,128,64,10 --dropout 0.2 --epochs 1 --no-cupti --validate --out $R/v"
for l in persistent pipelined cluster32; do timeout 60 $P $W1 --batch 32 --launch $l --tag v-$l > $R/v/$l.log 2>&1; t "validate $l rc $?"; done
for pr in fp32 fp16; do for b in 8192 4097 32; do timeout 60 $P $W1 --batch $b --precision $pr --tag v-own-$pr-b$b > $R/v/own-$pr-b$b.log 2>&1; t "validate own $pr b=$b rc $?"; done; done
timeout 60 build/phase4_mlp --data $D --layers 784,128,64,10 --dropout 0.2 --epochs 1 --batch 32 --validate --no-cupti --out $R/v --tag v-p4 > $R/v/p4.log 2>&1; t "validate phase 4 rc $?"
pack
NO_BUILD=1 ROUNDS=3 ONLY="^(w1-p5-own-fp(32|16)|w1-b(2048|8192)-p5-own-fp(32|16)|w1-p5-(persistent|pipelined|cluster32)|w2-h128-p5-own-fp16|w2-h1024-p5-own-fp16|w2-h128-p5-cluster|w2-h1024-p5-grid)$" \
  timeout ${LIMIT:-300} scripts/compare_builds.sh B/before $R/compare_builds.log > $R/compare.out 2>&1
t "compare rc $?"; pack; cat $R/compare_builds.log | tail -16
