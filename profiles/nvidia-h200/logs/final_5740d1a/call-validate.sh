#!/usr/bin/env bash
# --validate on phase 5's --fp32-gemm fma path (GEMM step 7 where the plan puts step 5), 5740d1a:
# W1 at batch 8,192 and 4,097 (widths 300 / 100), and 1,023 with widths 1,000 / 1,000; one step checked.
set -u
export NB_GIT_COMMIT=${NB_GIT_COMMIT:-5740d1a}
R=build/vf; rm -rf $R; mkdir -p $R/scratch
xz -dc .carry/bins/p5_final.xz > build/phase5_batched; chmod +x build/phase5_batched
D=(--data .carry/data/mnist --no-cupti --epochs 1 --fp32-gemm fma --validate --validate-steps 1 --out $R/scratch)
timeout 60 build/phase5_batched "${D[@]}" --batch 8192 --tag v8192 > $R/val-8192.log 2>&1; echo "8192 rc $?: $(grep -ci 'fail' $R/val-8192.log) fail lines"
timeout 60 build/phase5_batched "${D[@]}" --batch 4097 --layers 784,300,100,10 --tag v4097 > $R/val-4097.log 2>&1; echo "4097 rc $?: $(grep -ci 'fail' $R/val-4097.log) fail lines"
timeout 100 build/phase5_batched "${D[@]}" --batch 1023 --layers 784,1000,1000,10 --tag v1023 > $R/val-1023.log 2>&1; echo "1023 rc $?: $(grep -ci 'fail' $R/val-1023.log) fail lines"
grep -h "validate" $R/val-*.log | head -30
tar czf $OUT/vf.tgz $R
