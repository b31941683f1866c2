#!/usr/bin/env bash
# call 10: the branched backward's graph trajectory against its eager one (--validate's single steps)
# and against the paired backward, at batch 2,047, --deterministic, PDL on and off; each build's
# determinism (two runs).
set -u
R=build/call10; rm -rf $R; mkdir -p $R/rec
mkdir -p build
for b in base new; do [ -x build/p5_$b ] || { gunzip -c .carry/bins/p5_$b.gz > build/p5_$b; chmod +x build/p5_$b; }; done
D=(--data .carry/data/mnist)
show() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('   graph', [round(x,7) for x in r['loss']['per_step']['first_exact'][:5]], r['metrics']['param_checksum'])" $R/rec/phase5_batched__$1.json; }
for pdl in on off; do for bw in branched paired; do
  n=b2047-$bw-pdl$pdl
  timeout 60 build/p5_new "${D[@]}" --batch 2047 --epochs 1 --deterministic --no-cupti --repeats 1 --warmup 0 --validate --validate-steps 4 --backward $bw --pdl $pdl --out $R/rec --tag $n > $R/$n.log 2>&1
  echo "== $n rc $?"; grep -h "step [0-9]: loss\|epoch 0" $R/$n.log | cut -c1-60
  show $n
done; done
for b in base new; do for k in 1 2; do
  n=b2047-$b-run$k
  timeout 60 build/p5_$b "${D[@]}" --batch 2047 --epochs 1 --deterministic --no-cupti --repeats 1 --warmup 0 --backward paired --out $R/rec --tag $n > $R/$n.log 2>&1
  echo "== $n rc $?"; show $n
done; done
tar czf $OUT/call10.tgz $R
