#!/usr/bin/env bash
# The short call that ran (~74 s on a warm H100, the device time left): --validate of the two changes'
# build (the graph path at h = 2,000, W1 fp16 with Adam and dropout, the grid kernel at h = 1,000 batch
# 7 and 2,048 batch 32), then 2 rounds alternating: W2's graph path at h = 8,192, old/fb, 400 steps, and
# the grid kernel at h = 1,024, fb/g16, 2,000 steps. The GPU tests ran past their 30 s limit.
export NB_GIT_COMMIT=9901412; R=$OUT/q; mkdir -p $R/s B; xz -dc .carry/c1/p5_3.tar.xz | tar xf - -C B; xz -dc .carry/c1/g16_tests.xz > B/tests; chmod +x B/*; D=.carry/data/mnist; W="--optimizer sgd --lr 0.003 --dropout 0 --precision fp16"; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $R/gpu.txt; timeout 30 B/tests -tc='mlp fused backward*,mlp grid*' > $R/tests.log 2>&1; echo "tests rc $?" >> $R/s.txt; for a in "g16_p5 --layers 784,2000,2000,2000,10 --batch 32" "g16_p5 --layers 784,128,64,10 --precision fp16 --optimizer adam --dropout 0.2" "g16_p5 --layers 784,1000,1000,1000,10 --launch grid --batch 7" "g16_p5 --layers 784,2048,2048,2048,10 --launch grid"; do set -- $a; b=$1; shift; timeout 15 B/$b --data $D $W "$@" --steps 6 --validate --validate-steps 2 --no-cupti --out $R/s --tag v > $R/v.log 2>&1; echo "validate $* rc $? ok $(grep -c ' ok$' $R/v.log) fail $(grep -ci fail $R/v.log)" >> $R/s.txt; done; for r in 1 2; do for b in old_p5 fb_p5; do timeout 15 B/$b --data $D $W --layers 784,8192,8192,8192,10 --steps 400 --no-cupti --out $R/s --tag ab8192-$b-$r > /dev/null 2>&1; done; for b in fb_p5 g16_p5; do timeout 10 B/$b --data $D $W --layers 784,1024,1024,1024,10 --launch grid --steps 2000 --no-cupti --out $R/s --tag abg1024-$b-$r > /dev/null 2>&1; done; done; python3 -c "
import json,glob
for f in sorted(glob.glob('$R/s/*__ab*.json')):
  d=json.load(open(f)); print(f.split('__')[-1], '%.2f'%(d['timing']['per_step_ms']['median']*1e3), d['metrics']['param_checksum'])
" >> $R/s.txt; cat $R/s.txt
