// phase5_batched — the same MLP as phase 4, with the whole data path batched onto the GPU.
//
// What this chapter adds over phase 4 (which launched 26 kernels a step from the host, gathered
// each batch on the host and read the loss back every step):
//   * the data set lives on the GPU as bytes (47 MB for MNIST); each epoch's shuffled order is
//     generated on the device (one kernel: the Feistel permutation of mlp_common.h, so phase 4 and
//     phase 5 train on the same order for the same seed); the batch is gathered inside the first
//     GEMM's operand loader, never materialised;
//   * fused epilogues: bias + ReLU + dropout in the forward GEMMs, softmax + cross-entropy +
//     gradient in the last one, ReLU/dropout backward in the backward-data GEMMs, and the
//     optimizer (Adam or SGD, fp32 master weights, fp16 copy) applied inside the weight-gradient
//     GEMM's epilogue, so weight gradients never touch memory; independent products of the
//     backward pass share one launch. W1 is 6 launches a step, W2 8;
//   * every step of an epoch is one CUDA graph (captured once, replayed each epoch; the step
//     number comes from device memory); losses are written per step on the device and read once per
//     epoch, with a non-finite-loss flag (divergence stops the run with exit code 7);
//   * evaluation in chunks of 2048 test images with the same fused kernels, counts read once;
//   * `--launch persistent` (persistent.cuh; fp32, two hidden layers): the whole epoch as ONE
//     cooperative kernel instead of a graph of 6 kernels a step; see the section near the end;
//   * `--launch cluster` (cluster.cuh; fp16, SGD, no dropout, batch <= 32: W2 at h = 128): the whole
//     epoch as ONE thread-block cluster of 16 blocks that hold the model in their shared memory and
//     exchange activations through distributed shared memory; see the last section;
//   * fp16 with SGD (W2): the backward pass as ONE pass over each layer's weights
//     (fused_backward.cuh; `--backward auto|fused|paired`): the update and the backward-data
//     product through the same weights in one kernel, reading each fp32 master weight once; the
//     forward products take their tiles by a cp.async pipeline, 3 stages of 64 (phase4_mlp/kernels.cuh);
//   * programmatic dependent launch (`--pdl on|off`, default on): every kernel of the step is
//     launched with the PDL attribute, so it starts while the one before it finishes; it fetches
//     its first weight tiles (written a step earlier) before griddepcontrol.wait and everything
//     the previous kernel wrote after it, and lets the next one start right after its own wait;
//   * `--gemm cublas` runs the same trainer with cuBLASLt for the products (plus separate epilogue,
//     bias-gradient and one whole-model optimizer kernel), to show how close the own GEMMs come;
//     `--gemm-compare` times our plain GEMM against cuBLASLt on the configured layer shapes.
//
// Prediction (two numbers, W1): a step needs ~14.5 MFLOP and ~4 MB of L2-resident traffic: ~2 us
// of GPU work at the ceilings. What remains is 6 dependent kernels per step; inside a graph a
// dependent launch costs ~2 us, each of our small kernels runs ~2-4 us (latency of the K loop), so
// ~15-25 us per step, 30-45 ms per W1 epoch: short of the 25 ms waypoint unless each kernel gets
// near 2 us. The 10 ms goal (5 us a step) needs one persistent kernel per epoch (`--launch
// persistent`, the last section). W2 at h = 8192 is bound by weight traffic: forward reads W (2 B), backward-data
// reads W (2 B), the fused update reads and writes the fp32 master and writes the fp16 copy
// (10 B): 14 B x 141 M weights = 2.0 GB a step, ~0.7 ms at ~3 TB/s, vs PyTorch's ~2.0 ms.
//
// Latest full run (H100 80GB HBM3; scripts/bench_mlp.sh with every default stage at commit a975929,
// in two device calls: logs/bench_mlp_full.log (w1 match w2) and bench_mlp_full_rest.log (gemm
// persist sweep seeds); --check and determinism at 4abec9a, gpu_check, profilers and the
// max-autotune twin at c7240b7, sanitize at a0fd89b: the same phase code). Two things changed:
//   * The timed runs run WITHOUT our CUPTI tracer; one more run with it feeds the kernel summaries
//     (trace_runs = 1, timing.traced_run_ms). Every earlier run below was timed with it on, at ~2 us
//     a launch it watches, graph nodes included: the traced run took 1.08x the timed one on the
//     graph path, 1.11x on cuBLASLt, 1.01x for the persistent kernel (one launch an epoch).
//   * The split-K workspace holds the last, shorter evaluation chunk (1,808 of 10,000 rows): at
//     h = 2048 it planned more splits than a full chunk of 2,048 rows and wrote ~350 KB past the
//     workspace. With the tracer no longer started early the address was unmapped and the
//     cuBLASLt run died (illegal address, every run: logs/w2_h2048_cublaslt_repeat.log and
//     _memcheck.log at ed45d9b); before, the write went unnoticed. finish() now refuses a product
//     the workspace cannot hold (exit 9); tests/python/test_bad_input.py has the regression case.
//   Every one of the 93 records that replaced one with a parameter checksum has the same checksum.
//   W1 (ms an epoch: the median of the repeats' totals over the 5 epochs): graph path fp32 70.2
//   (--pdl off 71.9), fp16 89.2, cuBLASLt 141.4, persistent 20.1 (blocks 16/32/64/128:
//   64.2/40.3/28.0/19.7; generic instance 23.9); eager 3861, compile 4547, max-autotune 3584, CUDA
//   graph 448: the graph path 55.0x eager, the persistent kernel 192x eager and 22.3x the graph
//   twin. Not met: 10 ms, >= 300x eager, >= 45x graph. The persistent kernel's time did not move
//   (c1ddd67: 20.0); the graph path's fell from 85.1 (tracer on) to 70.2 ms.
//   Where a persistent step goes (--breakdown, block 0; __w1-persistent-breakdown.json, us): first
//   layer 1.76, wait for h1 2.33, second layer 1.06, wait for h2 1.59, last layer 0.71, softmax and
//   dz2 1.22, dz1 0.32, W1 update 1.57 (10.6 us a step).
//   W2 (ms a step, phase 5 own): 0.0500 (h 128), 0.0542 (256), 0.0597 (512), 0.0743 (1024), 0.1226
//   (2048), 0.2602 (4096), 0.7346 (8192); --launch cluster at h = 128 0.0276: faster than every
//   twin mode at every h; 87.8x eager at h = 128 (the cluster kernel; eager 2.425 ms) and 3.1x at
//   h = 8192 (eager 2.267 ms). Own GEMM vs cuBLASLt on the h = 8192 shapes, fp16: 0.91 / 0.90 /
//   0.76.
//   Accuracy over seeds 1 2 3 (W1, dropout): graph path 97.67 / 97.65 / 97.34 (mean 97.55%),
//   persistent 97.70 / 97.63 / 97.47 (97.60%), graph twin 97.42 / 97.76 / 97.51 (97.56%).
//   Fashion-MNIST (W1's model and flags, --dataset fashion-mnist; bench_mlp.sh stage fashion at
//   8620f05, the same phase code; logs/bench_mlp_fashion.log, __w1-fashion-*.json): graph path
//   69.4 ms an epoch, persistent 19.9, cuBLASLt 139.4; eager 3750, compile 4404, CUDA graph 395:
//   the persistent kernel 188x eager and 19.8x the graph twin. Test accuracy after 5 epochs:
//   86.95 / 87.12 / 86.98% (graph path / persistent / cuBLASLt), twins 87.48 / 87.26 / 87.50%.
//
// The run before (every default stage at commit c1ddd67, tracer on while timing; its records
// replaced by the a975929 run's, same checksums). W1: graph path fp32 85.1 (--pdl off 87.0), fp16
// 101.5, cuBLASLt 160.2, persistent 20.0 (blocks 16/32/64/128: 66.9/40.6/28.5/20.5; generic 24.0);
// eager 4100, compile 5637, CUDA graph 443: the persistent kernel 205x eager and 22.2x the graph
// twin. W2 (phase 5 own, ms a step): 0.0564 (h 128) ... 0.7377 (8192); cluster at h = 128 0.0278
// (85.1x eager 2.366 ms); 2.85x eager at h = 8192. By the same measure the 3dfe5ec records gave
// persistent 20.0, graph path 80.7, eager 2846, graph twin 444.
//
// The run before (H100 80GB HBM3; scripts/bench_mlp.sh stages w1 w2 gemm at commit 3dfe5ec,
// logs/bench_mlp_pdl.log; its records replaced the W1 and W2 records of every run quoted below and
// were replaced in turn, with the same parameter checksums, by the c1ddd67 run above).
//   What changed: the GEMM's cp.async loop takes stages of 64 values of k (12 KB) instead of 32,
//   with its result tile overlaying the stages in dynamic shared memory so that 5 blocks still fit
//   an SM; kernel instances per mainloop (fp16 ones compiled for 5 blocks an SM); whole unsplit
//   tiles stored straight from the accumulators; blocks walk the output row by row; and the step's
//   kernels launched with PDL. None of it changes the arithmetic: every parameter checksum equals
//   the 211693b records' (logs/checksums_vs_committed.log), with PDL on and off.
//   Prediction: the hidden forward at h = 8192 81 -> ~68 us (half the barriers per byte, twice the
//   bytes in flight): ~0.74 ms a step; PDL ~1-2 us saved at each of the 8 kernel boundaries: h = 128
//   ~57 -> ~45 us a step, W1 ~78 -> ~65 ms an epoch.
//   Measured (W2, ms a step; __w2-h<h>-own.json, twins of the same run): 0.0573 (h 128), 0.0573
//   (256), 0.0641 (512), 0.0797 (1024), 0.1257 (2048), 0.2659 (4096), 0.7380 (8192): faster than
//   every twin mode at every h; 2.54x eager at h = 8192 (eager 1.874 ms; target 2.5x met) and
//   30.8x at h = 128 (eager 1.765 ms; target 50x not met). The hidden forward at h = 8192: 64.4 us
//   (was 81.4; __w2-h8192-own-nopdl.json, whose kernel times are the kernels' own), 2.1 TB/s.
//   PDL (same run, __w2-h<h>-own-nopdl.json, __w1-own-nopdl.json): h = 128 0.0573 vs 0.0574 ms,
//   1024 0.0797 vs 0.0816, 8192 0.7380 vs 0.7401; W1 72.7 vs 75.3 ms an epoch. The two runs before
//   on the same code path (2275dbb, 7ef83a0; records replaced) gave 0.0556 vs 0.0584 and 0.0557
//   vs 0.0600 at h = 128, 76.6 vs 77.7 and 72.1 vs 76.3 ms at W1: PDL saves 0-7%, not the ~20%
//   predicted. A graph already launches a dependent kernel within ~1 us; what a step waits for
//   is the chains of dependent memory accesses inside each small kernel (split-K fix-ups, the
//   gathered operand, the epilogue's loads), which PDL does not shorten. Under PDL a kernel's CUPTI
//   duration includes its wait for the kernel before it; per-kernel times and the report's
//   kernel figures come from the --pdl off records.
//   Own GEMM vs cuBLASLt on the h = 8192 shapes (__gemm-compare-h8192-fp16.json, now planned and
//   fixed up as the trainer runs it): forward 0.90, backward data 0.92, weight gradient 0.75 (was
//   0.65 / 0.75 / 0.64): target 0.7 met on all three; fp32 0.85 / 0.86 / 0.72. The weight gradient
//   (K = 32: one k-tile, then an 8192 x 8192 fp32 store) went 0.170 -> 0.157 ms with float4 and
//   direct stores and 64-register instances (7ef83a0), then -> 0.144 with the row-by-row block
//   order (a probe on the same machine); 0.142 ms in the run.
//   W1 (same run, median epochs, ms): graph path fp32 72.7, fp16 90.6, cuBLASLt 155.6, persistent
//   20.3; eager 2795, compile 3784, CUDA graph 448: the persistent kernel 137x eager and 22.0x
//   the graph twin (eager ran ~35% faster than in the run before, where the same kernel was 218x).
//   A regression found and fixed on the way: at 7ef83a0 the gathered first layer's split instance
//   took 100 registers (4 blocks an SM), and its 640 blocks at h = 8192 ran in two waves: 36.6 us
//   instead of 24.5; the fp16 instances are now compiled for 5 blocks an SM (24.7 us).
//
// Previous run (H100 80GB HBM3; scripts/bench_mlp.sh stages w1 w2 gemm at commit 211693b,
// logs/bench_mlp_w2_fused.log; its W1, W2 and GEMM records since replaced by the run above).
//   The fused backward (fp16, SGD, batch <= 32). Why: at h = 8192 the paired kernels moved the
//   weights at ~1.8 TB/s, the forward at ~1.1 TB/s, and read each hidden layer twice in the
//   backward pass (the fp16 copy for backward data, then the fp32 master for the update). Now one
//   kernel per layer streams the master by cp.async (4 stages, 3 blocks an SM), takes dW = dZ^T H
//   and dA += dZ W_old on tensor cores per 32-row sub-tile, updates the weights and writes the fp16
//   copy; row splits add their dA partials in a fixed order (deterministic). 10 B of traffic a
//   weight instead of 12; four backward launches, as before.
//   Prediction (before the first run): ~0.70 ms a step (the two hidden layers' passes ~240 us each
//   at ~2.8 TB/s, the hidden forwards ~60 us each with the cp.async loop, the rest ~60 us): 2.7x
//   eager.
//   Measured (W2, ms a step; __w2-h<h>-own.json, twins pytorch_mlp__w2-h<h>-*.json, same run):
//   0.0574 (h 128), 0.0644 (256), 0.0699 (512), 0.0846 (1024), 0.1296 (2048), 0.2708 (4096),
//   0.7708 (8192): faster than every twin mode at every h; 2.51x eager at h = 8192 (eager 1.933 ms;
//   target 2.5x met, with little margin: eager moves by 10-20% between runs) and 37.6x at h = 128
//   (eager 2.160 ms this run; target 50x not met). The paired kernels in the same run
//   (__w2-h<h>-own-paired.json): 1.1019 ms at h = 8192 (the fused pass is 1.43x faster), 0.0885
//   at 1024, 0.0569 at 128 (latency-bound: no gain). cuBLASLt path 1.2284 ms at 8192. The
//   prediction missed by 10%: per step at h = 8192 the two hidden passes take ~262 us each (2.54
//   TB/s; ncu: 75% of DRAM peak, 3 blocks an SM), the forwards 81.4 us each (1.66 TB/s; 0.65 of
//   cuBLASLt's speed), the first layer's update 37.3 us, the gathered first forward 24.5, the
//   softmax 12.7. Peak device memory at h = 8192: 976 MiB against 2067 (eager) / 2197 (graph).
//   Tried and not kept: 3 pipeline stages in the fused pass (4 blocks an SM): 0.793 vs 0.779 ms a
//   step; the fused pass with Adam (W1): 62.2 vs 54.5 us a step for the paired kernels (the
//   moments are plain loads, a round trip per sub-tile), so `auto` keeps the paired kernels for
//   Adam; the gathered first-layer forward planned for 16 waves: 32.2 vs 23.8 us.
//   W1 in the same run (median epochs, ms): graph path fp32 78.1, fp16 94.3 (paired backward:
//   Adam), cuBLASLt 157.3, persistent 19.9; eager 3482, compile 4211, CUDA graph 452: the graph
//   path 44.6x eager, the persistent kernel 174.8x eager and 22.7x the graph twin.
//   --validate: W2 at h = 1000 (fused backward, 3 steps, __check-w2-h1000.json) loss 1.4e-6,
//   gradients 1.4e-2, parameter change 1.4e-2 (fp16 tolerances 1e-2 / 5e-2); the same errors as
//   the paired kernels to the digits printed.
// Measured (H100 80GB HBM3). Earlier W1 run (stages w1 match persist seeds at 755291c, with the
// persistent path; logs/bench_mlp_w1_persistent.log): graph path fp32 76.6 ms an epoch, fp16 87.3,
// cuBLASLt 154.8; PyTorch eager 3083, compile 3833, CUDA graph 452 ms; seeds 1 2 3 of the graph
// path 97.67 / 97.65 / 97.34% (mean 97.55). (The run before, c160cd9, with the same parameters bit
// for bit: 81.3 / 93.0 / 159.5 ms; eager 3805.) These now fill the W1 records (__w1-own.json,
// __w1-own-fp16.json, __w1-cublaslt.json, __w1-nodrop-*.json, __w1-seed<s>-own.json).
// The paragraphs below quote the previous run (scripts/bench_mlp.sh at commit 8a592af with the
// latency trims below, bench_mlp.log), whose W1 records those overwrote; same code, same GPU model,
// within 2% on phase 5 (eager moved 4241 -> 3527 ms). Older records: the W2 twins
// (pytorch_mlp__w2-*.json) and the --validate records (__check-*.json) come from earlier device
// calls of the same scripts (records without a commit, or e091e03); the W1 twins are of this run.
//   W1 own fp32 81.1 ms per epoch (median of 5; 43.3 us a step, 6 launches;
//   phase5_batched__w1-own.json), own fp16 97.8 ms, cuBLASLt 158.2 ms; PyTorch eager 4241 ms and
//   CUDA-graph twin 464 ms in the same run: 52x eager and 5.7x the graph twin. Prediction (30-45
//   ms) missed by 1.8-2.7x, the 25 ms waypoint (3.2x away) and the 10 ms goal (>= 300x eager,
//   >= 45x graph) are not met. Before the trims (code 450cf86; records committed in e091e03, since
//   overwritten): 102.5 ms (54.7 us a step), fp16 131.5, cuBLASLt 157.6; eager 4138, graph 448:
//   40x eager and 4.4x the graph twin. Launch gaps are small; the kernels themselves take 3-12 us
//   each (update pair 12.1, forward-gather 10.0, hidden forward 6.0, update+backward-data 5.3,
//   softmax-CE 5.2, backward-data 2.8 us): each is a chain of dependent latencies (a few k-tiles,
//   the split-K fix-up through global memory, the epilogue's loads) on a grid of 1-56 blocks. What
//   stands between this and 10 ms (5 us a step): one persistent kernel per epoch that keeps W1's
//   109k weights and Adam state on chip across all SMs, with grid-wide barriers between layers
//   (~1 us each) instead of 6 kernel boundaries.
//   Accuracy with dropout, seeds 1 2 3: 97.72, 97.62, 97.34% (mean 97.56%; __w1-seed<s>-own.json).
//   Loss matching with dropout 0 (__w1-nodrop-*.json vs pytorch_mlp__w1-nodrop-eager.json): first
//   20 step losses within 2.3e-7, 100-step means of the first epoch within 3.5e-4, final accuracy
//   within 0.11 points (own), 0.02 (cuBLASLt); W2 fp16 (h 128/1024/8192, older twins): first 20
//   within 1.1e-4, 100-step means 8.6e-6.
//   W2 (fp16, SGD, ms a step; __w2-h<h>-own.json): 0.058 (h 128), 0.092 (1024), 0.166 (2048),
//   0.410 (4096), 1.254 (8192): faster than every twin mode at every h (graph twin 0.113 ... 1.739,
//   older twin records), 26.5x eager at h = 128 (target 50x) and 1.5x at h = 8192 (target 2.5x);
//   the cuBLASLt path 0.080 ... 1.233. At h = 8192 the prediction (0.7 ms) is missed by 1.8x: the
//   fused updates move their compulsory bytes at ~1.8 TB/s, the forward products at ~1.1 TB/s, and
//   our fp16 GEMM runs at 0.43 (forward) / 0.51 (backward-data) / 0.57 (weight) of cuBLASLt's
//   speed (__gemm-compare-h8192-fp16.json; fp32: 0.85 / 0.87 / 0.58); target 0.7 not met.
//   Peak device memory (sum of our allocations, MiB): W1 61 vs 135 (eager) / 265 (graph); W2 at
//   h = 8192 967 vs 2067 / 2197 (older twins). Batch sweep (W1 model, __batch-sweep-b<B>.json):
//   6.7e5 samples/s at 32, 3.7e6 at 256, 1.2e7 at 2048, 1.55e7 at 8192: batching stops paying
//   past ~2048.
//   --validate (3 steps vs float64; __check-w1-own-*.json and __check.json, older, code before
//   the trims): fp32 loss 1.6e-7, gradients 3.8e-7; fp16 gradients 3.3e-2.
//
// Latency trims (after the numbers above; same kernels, same launches, same arithmetic order):
//   * split-K fix-up (gemm_tile, for phase 5's epilogues only): the partial tiles are written and
//     read as float4 and a thread issues up to 16 loads before adding them (slice order kept, sums
//     bit-identical); before, the last block's 8 (fp32) loads per slice and per element could go
//     out nearly one L2 round trip at a time (72 for the first layer's 9 slices);
//   * one k-tile per split allowed (plan_splits_p5): first layer 13 slices of 2 k-tiles (was 9 of
//     3), hidden layer 4 of 1 (was 2 of 2); products of 2 k-tiles stay unsplit;
//   * the epilogue's prefetch runs after the first k-tile's loads are issued, and the forward
//     epilogue draws its dropout bits (Philox) there, under the load latency, not after the product;
//   * Adam's per-step constants come from a host-computed table (as phase 4 computes them, lr in
//     double) instead of two double-precision pow() by thread 0 of every update block.
//   Prediction (W1 own fp32): first-layer forward 15.9 -> ~7 us, hidden forward 9.6 -> ~5,
//   update pair 12.2 -> ~10.5, update + backward-data 6.5 -> ~5, softmax-CE 5.2 -> ~4.5, backward
//   data 2.9 unchanged: ~35 us a step (30-45), ~65 ms an epoch (55-85): still short of the 25 ms
//   waypoint, which needs fewer dependent kernels per step rather than faster ones.
//   Measured (H100; phase 5's code unchanged since 0cfaa72; re-run at 8a592af,
//   phase5_batched__w1-own.json, __w1-own-fp16.json, __w1-nodrop-own.json): fp32 81.1 ms an epoch,
//   43.3 us a step (was 102.5 / 54.7); fp16 97.8 ms (was 131.5); dropout 0 89.1 ms (was 109.4).
//   (The first run of this code, commit b5b3288, records since overwritten: 81.9 / 98.0 / 87.6.)
//   Per kernel (fp32, us, was -> now): first-layer forward 15.9 -> 10.0 (grid 26), hidden forward
//   9.6 -> 6.0 (grid 4), update pair 12.2 -> 12.1, update + backward-data 6.5 -> 5.3, softmax-CE
//   5.2 -> 5.2, backward data 2.9 -> 2.8. The prediction (~35 us, ~65 ms) is missed by 1.25x: the
//   update pair did not move, so the two double pow() were not what it waits for (not yet found:
//   the gathered B operand or the Adam epilogue's loads), and the first layer kept ~3 us more than
//   predicted. Against the twins of the same run: 52x eager, 5.7x the graph twin; the 25 ms
//   waypoint is still 3.2x away.
//   --validate (3 steps) of this code, from the b5b3288 device call's output only (its check
//   records were not committed): fp32 loss 1.6e-7, gradients 4.1e-7, parameter change 9.4e-6;
//   fp16 gradients 3.3e-2. Not bit-identical to the pre-trim records (the first layer's K now sums
//   in 13 slices, not 9; Adam's step size uses lr in double, as phase 4 and PyTorch do): accuracy
//   97.52% (was 97.63); dropout 0 vs the eager twin: first 20 step losses within 2.3e-7 and
//   first-epoch 100-step means within 3.5e-4, accuracy 97.39 vs 97.28%.
//
// --launch persistent (phase5_batched/persistent.cuh): one cooperative kernel per epoch. G blocks of
// 512 threads stay resident; each owns some first-layer units (its rows of W1, their bias and Adam
// state in shared memory, all epoch) and some second-layer units (rows of W2); the 10 x H2 last
// layer is repeated in every block. A step is: first layer for the own units -> exchange h1 ->
// second layer for the own units -> exchange h2 -> last layer, loss, backward and the updates of
// what each block owns. An exchange is a set of 64-bit words, each a float with the tag of the step
// that wrote it, polled until the tag is right: no grid barrier. The next batch's images arrive by
// cp.async during the current step.
//   Prediction (W1, written before the first run): two barriers ~1 us each plus ~2-4 us of small
//   latency-bound work: 5-8 us a step, 10-15 ms an epoch (the 25 ms waypoint met, the 10 ms goal
//   within reach).
//   First version (grid barriers; commit ccb68a9, records since replaced): 40.5 ms an epoch, 21.6
//   us a step, 87x eager, 11.2x the graph twin; blocks 16/32/64/128 -> 66.1/50.1/44.2/41.5 ms;
//   step: first layer 3.65 us, barrier 1.25, h1 read + second layer 4.70, barrier 1.19, h2 read +
//   last layer + loss 3.39, dz2 1.37, W3/W2 updates + dz1 3.23, W1 update 2.81. (Before it: 84 ms
//   with 10- to 16-way bank conflicts from row strides of 64 and 128 floats -> 53 -> 45 -> 40.5.)
//   Then, guided by ncu's per-instruction stall samples (~67k warp instructions a block a step,
//   a third of the stall samples at __syncthreads waiting for unbalanced warps), one change at a
//   time on the H100 (epoch ms): tagged exchange words instead of the two grid barriers 40.5 ->
//   ~39; the first layer with lane = batch row (a word = 4 pixels a load, weights broadcast, no
//   shuffle reduce-scatter), bytes -> floats by a byte permute and an add instead of a shared-memory
//   table, the W1 update by lane pairs, the softmax two rows a warp -> ~37; Adam skipping the
//   exactly-zero step (m == 0: 0 / x took the IEEE division's slow path for whole warps), the W3
//   update in row pairs in one round of tasks -> ~31; the second layer and dz1 as warp dot
//   products -> ~30; dense image rows with 16-byte cp.async -> ~29.
//   Tried and not kept: the off-critical-path updates (W3, own W2) hidden in the wait for h1 gave
//   nothing by themselves (kept: the wait is where they run now); a pixel-major copy of the batch
//   (transposed in shared memory each step) moved ~2 us from the first layer into the transpose;
//   odd image row strides with 4-byte cp.async (no bank conflict) cost ~1 ms more than dense rows;
//   dropout masks drawn ahead, the loss read one step later, W3's update moved to the wait for h2,
//   4-way accumulator chains, all at once: no gain (epochs 0-1: 29.6 / 31.3 ms against 28.3 / 30.1
//   for the kept code, separate runs); blocks without second-layer units skipping the h1 gather
//   (half the exchange's traffic): 27.8 / 29.8, within run-to-run noise; pollers sleeping 50 or
//   250 ns before every retry (less L2 traffic while waiting): unchanged (28.5-29.8 ms, all three
//   builds in one run). So the waits are not congestion: h1 and h2 arrive when the slowest block
//   publishes them.
//   Measured at commit 3a4b4c1 (records since replaced): 28.7 ms an epoch (15.3 us a step), 116x
//   eager, 15.4x the graph twin; step (us): first layer 2.09, h1 wait with the W3/W2 updates 3.71,
//   second layer 1.45, h2 wait 1.39, last layer + softmax + loss 2.33, dz2 1.26, dz1 0.65, W1
//   update 2.56.
//   Then (fourth session, ncu source counters again): the last layer and dz2 were 64- and 10-long
//   dot products with two shared-memory loads per FMA (~2.5k wavefronts a step); they became
//   register accumulators with lane = batch row (W3 stored transposed so one unit's 10 weights are
//   3 broadcast float4 loads), the softmax reading the partial logits and computing dz2 for its two
//   rows from shuffled dz3. First try: no gain (28.4 vs 29.0 ms): the partial logits were read with
//   a 10-way bank conflict (row stride 32 words); with an odd stride, and the block size made a
//   compile-time constant in the index arithmetic: 25.1 ms. The remaining index arithmetic (integer
//   divisions by the shape, layout offsets recomputed under register pressure, ~6k of a step's
//   ~61k warp instructions a block) went away by compiling W1's shape into its own instance of the
//   kernel (persistent.cuh, kPersistW1; --generic-kernel keeps the generic one, bit-identical
//   results, tested): 21.2 ms, 43k warp instructions a block a step, no register spills (the
//   generic NC=1 instance spills 64 bytes).
//   Tried and not kept (fourth session): the batch kept also as floats in shared memory, written by
//   the first layer and read by the W1 update (16-byte loads instead of a byte permute and an add
//   per pixel): 21.6 vs 20.2 ms in one run (the stores slowed the first layer by 0.56 us and the
//   update's 4x shared-memory traffic ate what the conversions saved: W1 update 1.73 vs 1.86 us).
//   With --dropout 0 the second layer is 0.38 us shorter (its Philox draws are on the critical
//   path) but the step only ~0.2 us: the time moves into the wait for h1.
//   Subnormals: built with -ftz=true (a probe only: it changes the arithmetic) the W1 update took
//   1.41 us instead of 1.86. Most border pixels' gradients are 0 for long stretches, so Adam's first
//   moment decays into subnormals and m / denom takes the division's slow path. adam_apply now
//   skips a subnormal m's step when it is below a quarter of the weight's ulp (the weight would
//   come out unchanged): the same bits (every parameter checksum of the W1 records identical,
//   755291c against c160cd9), W1 update 1.52 us, 19.3 ms an epoch.
//   Re-measured in the full run at a975929 (the records named below now hold its numbers; same
//   parameter checksums as the 755291c records they replaced): 20.1 ms an epoch (median of 3
//   runs' totals / 5), 192x eager (3861 ms) and 22.3x the graph twin (448 ms); generic instance
//   23.9 ms; blocks 16/32/64/128: 64.2/40.3/28.0/19.7 ms; step (us) A 1.76, X1 2.33, B 1.06, X2 1.59, C1
//   0.71, C2 1.22, C3 0.32, C4 1.57 (generic: 2.14, 3.16, 1.09, 1.54, 0.71, 1.61, 0.67, 1.78). The
//   c1ddd67 run gave 20.0 ms, 205x eager (4100 ms), 22.2x the graph twin.
//   The bullets below are the 755291c run's.
//   Measured (H100, scripts/bench_mlp.sh stages w1 match persist seeds at commit 755291c; bench log
//   profiles/nvidia-h100-80gb-hbm3/logs/bench_mlp_w1_persistent.log):
//   * 19.3 ms an epoch (median epoch of the last of 3 runs; 10.3 us a step;
//     phase5_batched__w1-persistent.json),
//     128 blocks, one first- and one second-layer unit each (blocks 64-127: none of the second),
//     125 KiB of shared memory per block. Same run: graph path 76.6 ms, cuBLASLt 154.8, PyTorch
//     eager 3082.7, compile 3833.4, CUDA graph 452.1 ms: 159x eager (median epochs; eager ran 19%
//     faster than in the c160cd9 run, where 20.9 ms made 182x) and 23.4x the graph twin. The 25 ms
//     waypoint is MET; the 10 ms goal, >= 300x eager and >= 45x graph are NOT (1.9x away); the
//     prediction (10-15 ms) missed by 1.3-1.9x.
//   * The generic instance on the same shape (--generic-kernel, __w1-persistent-generic.json):
//     24.1 ms: compiling the shape in is worth 4.8 ms an epoch (2.6 us a step).
//   * Blocks (2 epochs each, __w1-persistent-g<G>.json): 16 -> 63.8 ms, 32 -> 40.1, 64 -> 28.2,
//     128 -> 20.4 (only 128 blocks, one unit each, runs W1's compiled-in instance).
//   * Where a step goes (--breakdown, clock stamps of block 0; __w1-persistent-breakdown.json, us):
//     A first layer 1.75, X1 h1 wait with the W3/W2 updates 2.37, B second layer 1.10, X2 h2 wait
//     1.48, C1 last layer (partial logits) 0.76, C2 softmax + dz2 1.22, C3 dz1 0.32, C4 W1 update
//     1.52 (generic instance: 2.17, 3.17, 1.09, 1.41, 0.80, 1.65, 0.67, 1.76;
//     __w1-persistent-generic-breakdown.json).
//   * Correctness: --validate (3 steps vs float64) loss 6.2e-8, gradients 1.8e-6, parameter change
//     4.1e-5 (__check-w1-persistent.json); awkward shape 784-100-300-10, batch 33, SGD: 2.3e-8 /
//     1.6e-7 / 5.7e-5 (__check-odd-persistent.json); GPU tests at batch 1, 7, 20, 33, 64, every unit
//     split, 3, 10 and 12 classes, and W1's instance bit-identical to the generic one, also under
//     memcheck (tests/gpu/test_mlp_persistent.cu; logs/test_gpu_all.log: 31/31 cases,
//     logs/test_gpu_persistent_memcheck.log). Accuracy, seeds 1 2 3: 97.70, 97.63, 97.47% (mean
//     97.60; __w1-seed<s>-persistent.json). Dropout 0 vs the eager twin: first 20 step losses within
//     1.1e-7, first-epoch 100-step means within 3.5e-4, final accuracy 0.09 points apart
//     (__w1-nodrop-persistent.json). Bit-reproducible (no float atomics); memcheck, racecheck,
//     initcheck, synccheck on the W1 instance, the generic one and 16 blocks: 0 errors
//     (sanitize__all.json, a0fd89b); completes under nsys and ncu (profilers__all.json, c7240b7).
//   What stands between 19.3 ms and 10 ms (5 us a step): the two exchanges and their waits (X1 +
//   X2 ~3.9 us with B between them) and ~6.5 us of block-local chains of shared-memory and
//   shuffle latencies (each part 0.3-1.8 us). Replicating the second layer in every block would remove
//   one exchange, but on the SIMT pipes it costs ~1.4 us (262k FMA a block) plus a replicated W2
//   update of ~2.9 us (another 262k FMA and 8k Adam steps a block): more than the exchange. Both
//   want tensor cores (3xTF32 to keep fp32 accuracy); so do the last layer and the W1 update.
//   Thread-block clusters could turn part of each exchange into distributed shared memory.
//
// --launch cluster (phase5_batched/cluster.cuh): one thread-block cluster kernel per epoch for W2's
// small widths. 16 blocks of 512 threads (a non-portable cluster size; --blocks picks 1-16) on 16
// SMs; each owns 1/16 of every hidden layer's units: the rows of W into them (fp32 master + fp16
// copy) and, for the backward-data product, the columns of the layer above that leave them (a
// second copy, updated from the same operands in the same tensor-core k-steps: bit-identical, which
// the GPU tests check). The last layer is replicated. A step: each hidden layer's own units by WMMA
// (m32n8k16), pushed by 16-byte DSMEM stores into every block, then a cluster barrier (3); the last
// layer, softmax cross-entropy and dZ in every block; the backward-data products for own units,
// pushed, a split cluster barrier (2) with the layer's updates (m16n16k16 weight gradients, SGD
// from the accumulators) between arrive and wait; the first layer's update (m8n32k16 over the
// fp16 batch); the next batch's bytes, loaded into registers at the start of the step, turned into
// fp16 for the next. The model at h = 128 is ~0.8 MB: 199 KB of shared memory a block.
//   Prediction (written before the first run): ~8-10 us a step (5 barriers ~0.3-0.5 us each, the
//   rest short tensor-core products), 150-200x eager.
//   Measured (H100; bench_mlp.sh stage w2 at h = 128 at commit 4fa483d, with every path and twin of
//   that width in the same run; logs/bench_mlp_w2_h128_cluster.log): 0.0273 ms a step
//   (__w2-h128-cluster.json), against the graph path's 0.0548 (2.0x), cuBLASLt's 0.0942, PyTorch
//   eager 1.9148 (70.2x: the 50x target MET), compile 2.5762, CUDA graph 0.1136 (4.2x). The
//   prediction missed by ~3x. How it got there (the second epoch of 1875 steps, ms, one run each;
//   device-call output, records not kept): SIMT updates and 2-byte pushes 56.1; 16-byte pushes and
//   four weights a thread 54.1; batch loops unrolled over 32 rows, softmax a warp a row 51.1; split
//   backward barriers 51.9 (a --breakdown run); tensor-core updates 49.4 (--breakdown); the race fix
//   below, in the recorded run: 51.2 (0.0273 ms x 1875).
//   Re-measured in the full run at a975929 (the records named here now hold its numbers, with the
//   4fa483d records' parameter checksums): 0.0276 ms a step against the graph path's 0.0500 and
//   PyTorch eager's 2.425 (87.8x) and CUDA graph's 0.1132 (4.1x); breakdown (us) 5.42, 4.97, 3.04,
//   3.17, 3.41, 4.32, 2.21, 1.11 in the order of the paragraph below (which quotes the 4fa483d run).
//   (At c1ddd67: 0.0278 ms, 85.1x eager's 2.366.)
//   Where a step goes (--breakdown, block 0; __w2-h128-cluster-breakdown.json, us): forward
//   products 5.35, forward pushes + barriers 5.02, last layer 3.00, backward-data products 2.88,
//   backward pushes + barriers 3.44, updates of layers 1-3 4.23, first layer's update 2.14, next
//   batch 1.13. Nsight Compute on a 300-step launch (an earlier build, logs not committed: the report
//   exceeded what a device call returns): 0.40 instructions issued per scheduler cycle, ~93k warp
//   instructions per SM a step spread over index arithmetic, partial sums, fp16 conversions and
//   the WMMA loads; ~20-40% of stall samples at the cluster barriers. The step is a chain of ~15
//   short phases, each a few hundred instructions a warp plus a barrier: fewer phases (fewer
//   layers per barrier) or leaner ones (constant shapes, as W1's persistent instance) is what is left.
//   Correctness: --validate (3 steps vs float64): loss 4.9e-7, gradients 2.1e-2, parameter change
//   2.4e-2 (__check-w2-h128-cluster.json); 784-100-300-10, batch 31: 5.6e-7 / 2.2e-2 / 2.1e-2
//   (__check-odd-cluster.json); the same tolerances as the graph path's fp16. GPU tests
//   (tests/gpu/test_mlp_cluster.cu) against a float64 reference that rounds where the kernel rounds
//   (gradients within 2e-3) at batch 1-32, 1-4 hidden layers, widths 10-300, clusters of 1, 3, 4, 8,
//   16; column copies bit-identical to the rows they mirror; split launches and repeats
//   bit-identical; memcheck, synccheck, initcheck (all cluster cases) and racecheck (a short run): 0
//   errors (logs/test_gpu_cluster_*.log). The racecheck-sized case exists because the first
//   tensor-core update code had a race (a warp could pass the split barrier's wait and overwrite
//   another warp's staged tile): the GPU tests caught it under compute-sanitizer's timing, and a
//   block barrier before the wait fixed it. Loss curve vs the eager twin (same init and order):
//   first 20 step losses within 1.1e-4, 100-step means within 6.2e-6, final test accuracy 72.82%
//   (graph path 72.84%). Not bit-identical to the graph path (sums in another order); itself
//   bit-reproducible.
//   Tried and not kept: the image indices and labels loaded two steps ahead, so that no global
//   load inside a step waits on another (the step starts with perm -> image and perm -> label
//   chains): 0.0279 ms a step against 0.0278 for the kept code a call earlier, same checksum.
//   After a review (0b16a9d): the SGD step is one explicit fused multiply-add in both copies (it had
//   been `w -= lr * g`, contracted or not at each site by the compiler's choice); the W2 h = 128 run
//   gives the same parameter checksum as the 4fa483d record (logs/cluster_checksum_after_review.log).
//   Limits: fp16 with SGD and no dropout (W2's recipe), batch <= 32, input width a multiple of 16,
//   1-4 hidden layers, and a model that fits 16 blocks' shared memory (h = 256 would need ~370 KB a
//   block): other shapes are refused with exit code 2.
#define NB_WANT_CUBLAS 1  // check.cuh: CUBLAS_CHECK for the cuBLASLt path (lt.h)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.h"
#include "device_info.h"
#include "errors.h"
#include "idx.h"
#include "fused_backward.cuh"
#include "kernels.cuh"
#include "lt.h"
#include "persistent.cuh"
#include "cluster.cuh"
#include "../phase4_mlp/mlp_common.h"
#include "../phase4_mlp/mlp_record.h"
#include "nvtx.h"
#include "record.h"
#include "reference.h"
#include "stats.h"
#include "timing.cuh"

namespace nb {
namespace {

using namespace nb::mlp;

constexpr const char* kPhase = "phase5_batched";
constexpr int kEvalRows = 2048;  // a multiple of kBM: tile indices of the eval arrays stay global

template <class T>
class Trainer {
 public:
  Trainer(const MlpOptions& o, const Schedule& sc, const DeviceInfo& dev, const Dataset& ds, const HostParams& init)
      : o_(o), sc_(sc), dev_(dev), ds_(ds), init_(init), L_(o.nlayers()), B_(o.batch), cublas_(o.gemm == "cublas"),
        persistent_(o.launch == "persistent"), cluster_(o.launch == "cluster") {
    const auto& w = o.layers;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking));
    // Parameters: one flat fp32 buffer W0, b0, W1, b1, ... (the cuBLASLt path's optimizer is one launch).
    // Each tensor starts at a multiple of 8 elements: 16-byte (fp32) / 8-byte (fp16) vector access.
    size_t off = 0;
    auto round8 = [](size_t x) { return (x + 7) / 8 * 8; };
    for (int l = 0; l < L_; ++l) {
      woff_.push_back(off), off = round8(off + static_cast<size_t>(w[l + 1]) * w[l]);
      boff_.push_back(off), off = round8(off + static_cast<size_t>(w[l + 1]));
    }
    nparams_ = off;
    P_.alloc(nparams_);
    if (o.adam()) {
      M_.alloc(nparams_), V_.alloc(nparams_);
      // Adam's constants for every step t = 1 .. total_steps, formed on the host like phase 4's.
      std::vector<AdamHyper> hy(static_cast<size_t>(sc.total_steps) + 1);
      for (size_t t = 1; t < hy.size(); ++t) hy[t] = adam_hyper(o.lr, static_cast<int64_t>(t));
      hyper_.alloc(hy.size());
      hyper_.upload(hy.data(), hy.size());
    }
    if (kHalf) P16_.alloc(nparams_);
    if (cublas_) {  // zeroed: the alignment gaps between tensors are read (never written) by the flat update
      G_.alloc(nparams_);
      CUDA_CHECK(cudaMemset(G_.get(), 0, G_.bytes()));
    }
    // Data, resident as bytes.
    train_x_.alloc(ds.train_images.pixels.size());
    train_x_.upload(ds.train_images.pixels.data(), ds.train_images.pixels.size());
    train_y_.alloc(ds.train_labels.labels.size());
    train_y_.upload(ds.train_labels.labels.data(), ds.train_labels.labels.size());
    test_x_.alloc(ds.test_images.pixels.size());
    test_x_.upload(ds.test_images.pixels.data(), ds.test_images.pixels.size());
    test_y_.alloc(ds.test_labels.labels.size());
    test_y_.upload(ds.test_labels.labels.data(), ds.test_labels.labels.size());
    perm_.alloc(sc.n_train);
    base_.alloc(1);
    // Activations and gradients: H_[l] is the output of layer l (input of layer l+1), dZ_[l] the
    // gradient at layer l's output.
    for (int l = 0; l + 1 < L_; ++l) H_.emplace_back(static_cast<size_t>(B_) * w[l + 1]);
    for (int l = 0; l < L_; ++l) dZ_.emplace_back(static_cast<size_t>(B_) * w[l + 1]);
    step_loss_.alloc(sc.total_steps);
    tile_loss_.alloc((B_ + kBM - 1) / kBM);
    loss_counter_.alloc(1);
    bad_step_.alloc(1);
    CUDA_CHECK(cudaMemset(loss_counter_.get(), 0, sizeof(unsigned)));
    // Evaluation buffers.
    const int n_test = static_cast<int>(ds.test_images.count);
    eval_rows_ = std::min(kEvalRows, n_test);
    for (int l = 0; l + 1 < L_; ++l) Heval_.emplace_back(static_cast<size_t>(eval_rows_) * w[l + 1]);
    eval_tiles_ = (n_test + kBM - 1) / kBM;
    eval_correct_.alloc(eval_tiles_);
    eval_loss_.alloc(eval_tiles_);
    if (cublas_) {
      int maxw = 0;
      for (int x : w) maxw = std::max(maxw, x);
      X_.alloc(static_cast<size_t>(B_) * w[0]);
      Z_.alloc(static_cast<size_t>(B_) * maxw);
      lt_ = std::make_unique<LtHandle>();
      for (int l = 0; l < L_; ++l) {
        lt_layers_.push_back(std::make_unique<LtLayer>());
        lt_layers_.back()->template plan<T>(*lt_, B_, w[l], w[l + 1], l > 0);
      }
    }
    size_ws();
    if (persistent_) plan_persistent_kernel();
    if (cluster_) plan_cluster_kernel();
    plan_fused_backward();
    pdl_ = o_.pdl == "on" && !cublas_ && !persistent_ && !cluster_ && dev_.cc_major >= 9;  // PDL is Hopper's
    reset();
  }
  ~Trainer() {
    for (auto& g : graphs_) cudaGraphExecDestroy(g.second);
    cudaStreamDestroy(st_);
  }

  cudaStream_t stream() const { return st_; }
  size_t nparams() const { return nparams_; }

  void reset() {
    std::vector<float> flat(nparams_);
    for (int l = 0; l < L_; ++l) {
      std::copy(init_.W[l].begin(), init_.W[l].end(), flat.begin() + woff_[l]);
      std::copy(init_.b[l].begin(), init_.b[l].end(), flat.begin() + boff_[l]);
    }
    // Everything on the trainer's (non-blocking) stream: plain cudaMemset/cudaMemcpy would run on
    // the legacy default stream, which does not order with it.
    const unsigned long long none = ~0ull;
    CUDA_CHECK(cudaMemcpyAsync(P_.get(), flat.data(), flat.size() * sizeof(float), cudaMemcpyHostToDevice, st_));
    CUDA_CHECK(cudaMemcpyAsync(bad_step_.get(), &none, sizeof none, cudaMemcpyHostToDevice, st_));
    if (o_.adam()) {
      CUDA_CHECK(cudaMemsetAsync(M_.get(), 0, M_.bytes(), st_));
      CUDA_CHECK(cudaMemsetAsync(V_.get(), 0, V_.bytes(), st_));
    }
    if (kHalf) {
      to_half_kernel<<<ew_blocks(nparams_), 256, 0, st_>>>(P_.get(), P16_.get(), nparams_);
      CHECK_LAUNCH();
    }
    CUDA_CHECK(cudaDeviceSynchronize());  // also covers the constructor's default-stream memsets
  }

  // Writes step base and the permutation of the epoch that `first_step` belongs to.
  void begin(int64_t first_step) {
    const int64_t e = first_step / sc_.steps_per_epoch;
    const int n = static_cast<int>(sc_.n_train);
    epoch_begin_kernel<<<(n + 255) / 256, 256, 0, st_>>>(perm_.get(), n,
                                                         make_perm(o_.common.seed, static_cast<uint64_t>(e), n),
                                                         base_.get(), first_step);
    CHECK_LAUNCH();
  }

  // Enqueues the kernels of step base + i on the stream (captured into the graphs, or run directly).
  void enqueue_step(int i, std::map<std::string, KernelCost>* costs) {
    const StepRef sr{base_.get(), i};
    if (cublas_) enqueue_step_cublas(sr, costs);
    else enqueue_step_own(sr, costs);
  }

  // Captures the graph of `count` consecutive steps (once per count).
  void capture(int count) {
    cudaGraphExec_t& g = graphs_[count];
    if (g) return;
    cudaGraph_t graph{};
    std::map<std::string, KernelCost> costs;
    CUDA_CHECK(cudaStreamBeginCapture(st_, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < count; ++i) enqueue_step(i, &costs);
    CUDA_CHECK(cudaStreamEndCapture(st_, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&g, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    if (costs_per_step_.empty())
      for (auto& [k, c] : costs) costs_per_step_[k] = KernelCost{c.flops / count, c.bytes / count, c.calls / count};
  }

  // Runs steps [first, first + count) (all inside first's epoch): permutation kernel + graph replay.
  void run_graph(int64_t first, int count) {
    capture(count);
    begin(first);
    CUDA_CHECK(cudaGraphLaunch(graphs_[count], st_));
  }

  // A one-launch kernel's parameters for steps [first, first + count) (PersistParams, ClusterParams).
  template <class Params>
  Params launch_params(Params p, int64_t first, int count) const {
    p.s0 = first, p.i0 = static_cast<int>(first % sc_.steps_per_epoch), p.count = count;
    p.G = Gdbg_.size() ? Gdbg_.get() : nullptr;
    p.breakdown = breakdown_.size() ? breakdown_.get() : nullptr;
    return p;
  }
  // --launch persistent: permutation kernel + one cooperative launch for steps [first, first + count).
  void run_persistent(int64_t first, int count) {
    begin(first);
    launch_persistent(plan_, launch_params(persist_, first, count), st_);
  }
  // --launch cluster: permutation kernel + one cluster launch for steps [first, first + count).
  void run_cluster(int64_t first, int count) {
    begin(first);
    launch_cluster(cl_plan_, launch_params(cl_, first, count), st_);
  }

  // The timed unit: steps [first, first + count) of one epoch, in the configured launch mode.
  void run_epoch(int64_t first, int count) {
    if (persistent_) run_persistent(first, count);
    else if (cluster_) run_cluster(first, count);
    else run_graph(first, count);
  }
  // Before timing: capture the graphs (graph mode) for a full epoch and a shorter last one.
  void prepare(int full, int rem) {
    if (persistent_ || cluster_) return;
    capture(full);
    if (rem > 0 && rem != full) capture(rem);
  }
  // One step k (< steps per epoch) of the first epoch, on its own (validation, first-call work).
  void single_step(int k) {
    if (persistent_) {
      run_persistent(k, 1);
    } else if (cluster_) {
      run_cluster(k, 1);
    } else {
      begin(0);
      enqueue_step(k, nullptr);
    }
  }
  bool persistent() const { return persistent_; }
  bool cluster() const { return cluster_; }
  const ClusterPlan& cluster_plan() const { return cl_plan_; }
  bool fused_backward() const { return fused_bwd_; }
  bool pdl() const { return pdl_; }
  // --breakdown: per-part cycles of block 0 (summed over the steps run since the last call).
  static_assert(kPersistSegments == kClSegments, "one breakdown buffer serves both one-launch kernels");
  void start_breakdown() {
    breakdown_.alloc(kPersistSegments);
    CUDA_CHECK(cudaMemsetAsync(breakdown_.get(), 0, breakdown_.bytes(), st_));
  }
  std::vector<unsigned long long> take_breakdown() {
    CUDA_CHECK(cudaStreamSynchronize(st_));
    std::vector<unsigned long long> h = breakdown_.download();
    breakdown_.release();
    return h;
  }
  const PersistPlan& persist_plan() const { return plan_; }

  // Flops, compulsory bytes and launches per step, per kernel tag (counted while capturing).
  const std::map<std::string, KernelCost>& costs_per_step() const { return costs_per_step_; }

  std::vector<float> losses(int64_t first, int64_t count) const {
    std::vector<float> h(static_cast<size_t>(count));
    CUDA_CHECK(cudaStreamSynchronize(st_));
    CUDA_CHECK(cudaMemcpy(h.data(), step_loss_.get() + first, count * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
  int64_t bad_step() const {
    unsigned long long b = 0;
    CUDA_CHECK(cudaStreamSynchronize(st_));
    CUDA_CHECK(cudaMemcpy(&b, bad_step_.get(), sizeof b, cudaMemcpyDeviceToHost));
    return b == ~0ull ? -1 : static_cast<int64_t>(b);
  }

  void evaluate(double* loss, double* acc) {
    const int n = static_cast<int>(ds_.test_images.count);
    for (int c0 = 0; c0 < n; c0 += eval_rows_) {
      const int rows = std::min(eval_rows_, n - c0);
      for (int l = 0; l < L_; ++l) enqueue_eval_layer(l, c0, rows);
    }
    std::vector<int> ok(eval_tiles_);
    std::vector<float> ls(eval_tiles_);
    CUDA_CHECK(cudaMemcpyAsync(ok.data(), eval_correct_.get(), ok.size() * sizeof(int), cudaMemcpyDeviceToHost, st_));
    CUDA_CHECK(cudaMemcpyAsync(ls.data(), eval_loss_.get(), ls.size() * sizeof(float), cudaMemcpyDeviceToHost, st_));
    CUDA_CHECK(cudaStreamSynchronize(st_));
    double s = 0;
    int64_t c = 0;
    for (int i = 0; i < eval_tiles_; ++i) s += ls[i], c += ok[i];
    *loss = s / n;
    *acc = 100.0 * static_cast<double>(c) / n;
  }

  // Parameters / gradients in the reference's order (W0, b0, W1, b1, ...; no alignment gaps).
  std::vector<double> params() const { return packed(P_); }
  std::vector<double> grads() const { return packed(cublas_ ? G_ : Gdbg_); }
  // Validation: the fused update also stores the gradients it applies (never in timed runs).
  void keep_gradients(bool on) {
    if (cublas_) return;  // the cuBLASLt path stores them anyway (G_)
    if (on && !Gdbg_.size()) Gdbg_.alloc(nparams_);
    if (!on) Gdbg_.release();
  }
  const std::vector<size_t>& woff() const { return woff_; }
  const std::vector<size_t>& boff() const { return boff_; }

 private:
  static constexpr bool kHalf = std::is_same<T, __half>::value;
  using WView = MatView<T, false>;  // B(k, n) = W[n][k] (forward)
  using FwdFirst = GemmProblem<GatherView<T>, WView, FwdHiddenEpi<T>>;
  using FwdFirstLast = GemmProblem<GatherView<T>, WView, SoftmaxCEEpi<T>>;
  using FwdHidden = GemmProblem<MatView<T, true>, WView, FwdHiddenEpi<T>>;
  using FwdLast = GemmProblem<MatView<T, true>, WView, SoftmaxCEEpi<T>>;
  using Bd = GemmProblem<MatView<T, true>, MatView<T, true>, BwdReluEpi<T>>;
  using Upd = GemmProblem<MatView<T, false>, MatView<T, true>, UpdateEpi<T>>;
  using Upd0 = GemmProblem<MatView<T, false>, GatherView<T>, UpdateEpi<T>>;
  using EvalFirstLast = GemmProblem<GatherView<T>, WView, EvalEpi>;
  using EvalLast = GemmProblem<MatView<T, true>, WView, EvalEpi>;

  const T* weights(int l) const {
    if constexpr (kHalf) return P16_.get() + woff_[l];
    else return P_.get() + woff_[l];
  }
  RowMap train_rows(const StepRef& sr) const {
    RowMap r;
    r.perm = perm_.get(), r.i = sr.i, r.batch = B_;
    return r;
  }
  GatherView<T> train_view(const StepRef& sr) const {
    GatherView<T> g;
    g.data = train_x_.get(), g.ld = o_.layers[0], g.rows = train_rows(sr);
    return g;
  }
  FwdHiddenEpi<T> hidden_epi(int l, T* out, const StepRef& sr, bool dropout) const {
    FwdHiddenEpi<T> e;
    e.bias = P_.get() + boff_[l], e.out = out;
    e.dropout = dropout && o_.dropout > 0;
    e.key = dropout_key(o_.common.seed), e.layer = static_cast<uint32_t>(l);
    e.threshold = dropout_threshold(o_.dropout);
    e.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
    e.step = sr;
    return e;
  }
  SoftmaxCEEpi<T> loss_epi(const StepRef& sr) const {
    SoftmaxCEEpi<T> e;
    e.bias = P_.get() + boff_[L_ - 1], e.labels = train_y_.get(), e.rows = train_rows(sr);
    e.dz = dZ_[L_ - 1].get(), e.tile_loss = tile_loss_.get(), e.counter = loss_counter_.get();
    e.step_loss = step_loss_.get(), e.bad_step = bad_step_.get(), e.step = sr;
    return e;
  }
  UpdateEpi<T> update_epi(int l, const StepRef& sr) const {
    UpdateEpi<T> e;
    e.W = P_.get() + woff_[l], e.b = P_.get() + boff_[l];
    if (o_.adam()) {
      e.mW = M_.get() + woff_[l], e.vW = V_.get() + woff_[l], e.mb = M_.get() + boff_[l], e.vb = V_.get() + boff_[l];
    }
    if (kHalf) e.W16 = P16_.get() + woff_[l];
    e.dz = dZ_[l].get(), e.batch = B_, e.adam = o_.adam(), e.lr = static_cast<float>(o_.lr), e.step = sr;
    if (o_.adam()) e.hyper = hyper_.get(), e.hyper_n = static_cast<int64_t>(hyper_.size());
    if (Gdbg_.size()) e.grad_out = Gdbg_.get() + woff_[l], e.bgrad_out = Gdbg_.get() + boff_[l];
    return e;
  }
  // The fused backward pass of layer l (fp16 runs): its update and, for l > 0, dZ_[l-1].
  FusedBwdParams fused_params(int l, const StepRef& sr) const {
    FusedBwdParams p;
    if constexpr (kHalf) {
      const UpdateEpi<T> e = update_epi(l, sr);
      p.M = o_.layers[l + 1], p.N = o_.layers[l], p.B = B_;
      p.W = e.W, p.W16 = e.W16, p.mW = e.mW, p.vW = e.vW, p.b = e.b, p.mb = e.mb, p.vb = e.vb;
      p.grad_out = e.grad_out, p.bgrad_out = e.bgrad_out;
      p.adam = e.adam, p.lr = e.lr, p.step = sr, p.hyper = e.hyper, p.hyper_n = e.hyper_n;
      p.dz = dZ_[l].get();
      if (l == 0) {
        p.xdata = train_x_.get(), p.rows = train_rows(sr);
      } else {
        p.h = H_[l - 1].get(), p.dz_prev = dZ_[l - 1].get();
        p.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
      }
      plan_fused_bwd(p, dev_.sm_count);
      p.ws = fb_ws_.get(), p.counters = fb_counters_.get();
    }
    return p;
  }
  // Whether the fused backward pass runs (fp16 own kernels, batch <= 32, every width a multiple
  // of 8; --backward fused, or auto with SGD); sizes its workspace.
  void plan_fused_backward() {
    fused_bwd_ = false;
    if constexpr (kHalf) {
      // auto: SGD only. The fused kernel reads Adam's moments with plain loads in its optimizer
      // pass, a serial round trip per 32-row sub-tile, and W1 (Adam, small layers, grids of 1-52
      // blocks) ran slower with it: 62.2 against 54.5 us a step (H100, dev runs at 340c0c2).
      if (cublas_ || persistent_ || o_.backward == "paired") return;
      if (o_.backward == "auto" && o_.adam()) return;
      for (int l = 0; l < L_; ++l)
        if (!fused_bwd_supported(o_.layers[l], B_)) return;
      fused_bwd_setup<p5_fused_update_bwd>();
      fused_bwd_setup<p5_fused_update_first>();
      size_t ws = 1, tiles = 1;
      for (int l = 0; l < L_; ++l) {
        const FusedBwdParams p = fused_params(l, StepRef{nullptr, 0});
        ws = std::max(ws, fused_bwd_ws_floats(p));
        tiles = std::max(tiles, static_cast<size_t>(p.tiles_n()));
      }
      fb_ws_.alloc(ws);
      fb_counters_.alloc(tiles);
      CUDA_CHECK(cudaMemset(fb_counters_.get(), 0, fb_counters_.bytes()));
      fused_bwd_ = true;
    }
  }
  // Plans a product's split-K and points it at workspace slot `slot`. size_ws() sized the slots
  // for every product shape; a shape it missed would write past the workspace (as the last,
  // shorter evaluation chunk did at h = 2048 on the cuBLASLt path before size_ws counted it), so
  // refuse it here instead (exit 9).
  template <class P>
  void finish(P& p, int slot) const {
    p.ws = ws_[slot].get(), p.counters = counters_[slot].get();
    plan_splits_p5(p, dev_.sm_count);
    if (ws_[slot].size() == 0) return;  // size_ws() has not run yet (it plans shapes through here)
    if (ws_floats(p) > ws_[slot].size() || (p.splits > 1 && static_cast<size_t>(p.tiles()) > counters_[slot].size()))
      throw Error(kExitInternal, "split-K workspace " + std::to_string(slot) + " too small for a " + std::to_string(p.M) +
                                     " x " + std::to_string(p.N) + " x " + std::to_string(p.K) + " product in " +
                                     std::to_string(p.splits) + " splits (internal error: size_ws missed its shape)");
  }
  template <class P>
  void add_cost(std::map<std::string, KernelCost>* costs, const std::string& tag, const P& p, double extra_bytes,
                bool count_call) const {
    if (!costs) return;
    KernelCost& c = (*costs)[tag];
    c.flops += 2.0 * p.M * p.N * p.K;
    c.bytes += (static_cast<double>(p.M) * p.K + static_cast<double>(p.K) * p.N) * sizeof(T) + extra_bytes;
    if (count_call) c.calls += 1;
  }

  // ----- own fused kernels
  FwdHidden fwd_hidden(int l, const StepRef& sr) const {
    FwdHidden p;
    p.M = B_, p.N = o_.layers[l + 1], p.K = o_.layers[l];
    p.a = make_view<T, true>(H_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K);
    p.epi = hidden_epi(l, H_[l].get(), sr, true);
    finish(p, 0);
    return p;
  }
  FwdLast fwd_last(const StepRef& sr) const {
    const int l = L_ - 1;
    FwdLast p;
    p.M = B_, p.N = o_.layers[l + 1], p.K = o_.layers[l];
    p.a = make_view<T, true>(H_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K);
    p.epi = loss_epi(sr);
    finish(p, 0);
    return p;
  }
  Bd bwd_data(int l, int slot) const {  // dZ_[l-1] = relu'(dZ_[l] · W_l)
    Bd p;
    p.M = B_, p.N = o_.layers[l], p.K = o_.layers[l + 1];
    p.a = make_view<T, true>(dZ_[l].get(), p.K), p.b = make_view<T, true>(weights(l), p.N);
    p.epi.h = H_[l - 1].get(), p.epi.dz = dZ_[l - 1].get();
    p.epi.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
    finish(p, slot);
    return p;
  }
  Upd update(int l, const StepRef& sr, int slot) const {  // W_l -= f(dZ_[l]^T · H_[l-1])
    Upd p;
    p.M = o_.layers[l + 1], p.N = o_.layers[l], p.K = B_;
    p.a = make_view<T, false>(dZ_[l].get(), p.M), p.b = make_view<T, true>(H_[l - 1].get(), p.N);
    p.epi = update_epi(l, sr);
    finish(p, slot);
    return p;
  }
  Upd0 update0(const StepRef& sr, int slot) const {
    Upd0 p;
    p.M = o_.layers[1], p.N = o_.layers[0], p.K = B_;
    p.a = make_view<T, false>(dZ_[0].get(), p.M), p.b = train_view(sr);
    p.epi = update_epi(0, sr);
    finish(p, slot);
    return p;
  }
  double update_bytes(int l) const {  // master r/w (+ Adam m, v r/w) (+ fp16 copy write), bias alike
    const double n = static_cast<double>(o_.layers[l + 1]) * (o_.layers[l] + 1);
    return n * (8.0 + (o_.adam() ? 16.0 : 0.0) + (kHalf ? 2.0 : 0.0));
  }

  void enqueue_step_own(const StepRef& sr, std::map<std::string, KernelCost>* costs) {
    const auto& w = o_.layers;
    const double ob = sizeof(T);
    // Forward.
    if (L_ == 1) {
      FwdFirstLast p;
      p.M = B_, p.N = w[1], p.K = w[0];
      p.a = train_view(sr), p.b = make_view<T, false>(weights(0), p.K), p.epi = loss_epi(sr);
      finish(p, 0);
      launch_gemm<p5_fwd_softmax_ce, T>(p, st_, pdl_);
      add_cost(costs, "p5_fwd_softmax_ce", p, B_ * w[1] * ob, true);
    } else {
      FwdFirst p;
      p.M = B_, p.N = w[1], p.K = w[0];
      p.a = train_view(sr), p.b = make_view<T, false>(weights(0), p.K), p.epi = hidden_epi(0, H_[0].get(), sr, true);
      finish(p, 0);
      launch_gemm<p5_fwd_gather, T>(p, st_, pdl_);
      add_cost(costs, "p5_fwd_gather", p, static_cast<double>(B_) * w[1] * ob, true);
      for (int l = 1; l + 1 < L_; ++l) {
        auto q = fwd_hidden(l, sr);
        launch_gemm<p5_fwd_hidden, T>(q, st_, pdl_);
        add_cost(costs, "p5_fwd_hidden", q, static_cast<double>(B_) * w[l + 1] * ob, true);
      }
      auto q = fwd_last(sr);
      launch_gemm<p5_fwd_softmax_ce, T>(q, st_, pdl_);
      add_cost(costs, "p5_fwd_softmax_ce", q, static_cast<double>(B_) * w[L_] * ob, true);
    }
    if (fused_bwd_) {  // fp16, batch <= 32: one pass over each layer's weights (fused_backward.cuh)
      for (int l = L_ - 1; l >= 0; --l) {
        const FusedBwdParams p = fused_params(l, sr);
        if (l > 0) launch_fused_bwd<p5_fused_update_bwd>(p, st_, pdl_);
        else launch_fused_bwd<p5_fused_update_first>(p, st_, pdl_);
        if (costs) {
          KernelCost& c = (*costs)[l > 0 ? "p5_fused_update_bwd" : "p5_fused_update_first"];
          const double act = static_cast<double>(B_) * (w[l + 1] + (l > 0 ? 2.0 * w[l] : 0.0)) * ob;
          c.flops += 2.0 * w[l + 1] * w[l] * B_ * (l > 0 ? 2 : 1);
          c.bytes += update_bytes(l) + act;
          c.calls += 1;
        }
      }
      return;
    }
    // Backward: dZ_[L-2] first, then (update l, backward-data l-1) pairs, then (update 1, update 0).
    if (L_ == 1) {
      auto u = update0(sr, 0);
      launch_gemm<p5_update, T>(u, st_, pdl_);
      add_cost(costs, "p5_update", u, update_bytes(0), true);
      return;
    }
    {
      auto d = bwd_data(L_ - 1, 0);
      launch_gemm<p5_bwd_data, T>(d, st_, pdl_);
      add_cost(costs, "p5_bwd_data", d, static_cast<double>(B_) * w[L_ - 1] * 2 * ob, true);
    }
    for (int l = L_ - 1; l >= 2; --l) {
      auto u = update(l, sr, 0);
      auto d = bwd_data(l - 1, 1);
      launch_gemm_pair<p5_update_and_bwd_data, T>(u, d, st_, pdl_);
      add_cost(costs, "p5_update_and_bwd_data", u, update_bytes(l), true);
      add_cost(costs, "p5_update_and_bwd_data", d, static_cast<double>(B_) * w[l - 1] * 2 * ob, false);
    }
    auto u1 = update(1, sr, 0);
    auto u0 = update0(sr, 1);
    launch_gemm_pair<p5_update_pair, T>(u1, u0, st_, pdl_);
    add_cost(costs, "p5_update_pair", u1, update_bytes(1), true);
    add_cost(costs, "p5_update_pair", u0, update_bytes(0), false);
  }

  // ----- cuBLASLt path: the same epilogue functors, run after each cuBLASLt product.
  void enqueue_step_cublas(const StepRef& sr, std::map<std::string, KernelCost>* costs) {
    const auto& w = o_.layers;
    const int D = w[0];
    gather_kernel<T><<<ew_blocks(static_cast<size_t>(B_) * D), 256, 0, st_>>>(X_.get(), train_x_.get(), train_rows(sr), B_, D);
    CHECK_LAUNCH();
    auto input = [&](int l) -> const T* { return l == 0 ? X_.get() : H_[l - 1].get(); };
    auto lt_cost = [&](double M, double N, double K) {
      if (!costs) return;
      KernelCost& c = (*costs)["!nb::mlp::"];  // every kernel not ours: cuBLASLt's
      c.flops += 2 * M * N * K;
      c.bytes += (M * K + K * N) * sizeof(T) + M * N * 4.0;
      c.calls += 1;
    };
    for (int l = 0; l < L_; ++l) {
      lt_layers_[l]->forward(input(l), weights(l), Z_.get(), st_);
      lt_cost(B_, w[l + 1], w[l]);
      if (l + 1 < L_) launch_epilogue<p5_epi_hidden>(Z_.get(), B_, w[l + 1], hidden_epi(l, H_[l].get(), sr, true), st_);
      else launch_epilogue<p5_epi_softmax_ce>(Z_.get(), B_, w[l + 1], loss_epi(sr), st_);
    }
    for (int l = L_ - 1; l >= 0; --l) {
      lt_layers_[l]->backward_weight(dZ_[l].get(), input(l), G_.get() + woff_[l], st_);
      lt_cost(w[l + 1], w[l], B_);
      bias_grad_kernel<T><<<(w[l + 1] + 127) / 128, 128, 0, st_>>>(dZ_[l].get(), B_, w[l + 1], G_.get() + boff_[l]);
      CHECK_LAUNCH();
      if (l > 0) {
        lt_layers_[l]->backward_data(dZ_[l].get(), weights(l), Z_.get(), st_);
        lt_cost(B_, w[l], w[l + 1]);
        BwdReluEpi<T> e;
        e.h = H_[l - 1].get(), e.dz = dZ_[l - 1].get(), e.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
        launch_epilogue<p5_epi_bwd_relu>(Z_.get(), B_, w[l], e, st_);
      }
    }
    flat_update_kernel<<<ew_blocks(nparams_), 256, 0, st_>>>(P_.get(), G_.get(), o_.adam() ? M_.get() : nullptr,
                                                             o_.adam() ? V_.get() : nullptr, kHalf ? P16_.get() : nullptr,
                                                             nparams_, static_cast<float>(o_.lr), sr);
    CHECK_LAUNCH();
  }

  // ----- evaluation (own fused kernels in both modes; not timed)
  void enqueue_eval_layer(int l, int c0, int rows) {
    const auto& w = o_.layers;
    const StepRef sr{base_.get(), 0};
    GatherView<T> g;
    g.data = test_x_.get(), g.ld = w[0], g.rows.row_offset = c0;
    EvalEpi ee;
    ee.bias = P_.get() + boff_[L_ - 1], ee.labels = test_y_.get(), ee.row_offset = c0;
    ee.tile_correct = eval_correct_.get(), ee.tile_loss = eval_loss_.get();
    if (L_ == 1) {
      EvalFirstLast p;
      p.M = rows, p.N = w[1], p.K = w[0], p.a = g, p.b = make_view<T, false>(weights(0), p.K), p.epi = ee;
      finish(p, 0);
      launch_gemm<p5_eval, T>(p, st_);
    } else if (l == 0) {
      FwdFirst p;
      p.M = rows, p.N = w[1], p.K = w[0], p.a = g, p.b = make_view<T, false>(weights(0), p.K);
      p.epi = hidden_epi(0, Heval_[0].get(), sr, false);
      finish(p, 0);
      launch_gemm<p5_eval, T>(p, st_);
    } else if (l + 1 < L_) {
      FwdHidden p;
      p.M = rows, p.N = w[l + 1], p.K = w[l];
      p.a = make_view<T, true>(Heval_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K);
      p.epi = hidden_epi(l, Heval_[l].get(), sr, false);
      finish(p, 0);
      launch_gemm<p5_eval, T>(p, st_);
    } else {
      EvalLast p;
      p.M = rows, p.N = w[l + 1], p.K = w[l];
      p.a = make_view<T, true>(Heval_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K), p.epi = ee;
      finish(p, 0);
      launch_gemm<p5_eval, T>(p, st_);
    }
  }

  // Split-K workspaces: two slots (the two problems of a paired launch), each as large as the
  // largest problem placed in it.
  void size_ws() {
    size_t ws[2] = {1, 1}, tiles[2] = {1, 1};
    auto note = [&](const auto& p, int slot) {
      ws[slot] = std::max(ws[slot], ws_floats(p));
      tiles[slot] = std::max(tiles[slot], static_cast<size_t>(p.tiles()));
    };
    const StepRef sr{nullptr, 0};
    const auto& w = o_.layers;
    if (!cublas_) {
      for (int l = 1; l + 1 < L_; ++l) note(fwd_hidden(l, sr), 0);
      if (L_ > 1) note(fwd_last(sr), 0);
      {
        FwdFirst p;
        p.M = B_, p.N = w[1], p.K = w[0];
        finish(p, 0);
        note(p, 0);
      }
      for (int l = 1; l < L_; ++l) note(bwd_data(l, 0), 0), note(bwd_data(l, 1), 1);
      for (int l = 1; l < L_; ++l) note(update(l, sr, 0), 0);
      note(update0(sr, 0), 0), note(update0(sr, 1), 1);
    }
    // Evaluation shapes (slot 0): full chunks of eval_rows_ and the last, shorter one (fewer row
    // tiles can mean more splits, so it may need more workspace than a full chunk).
    const int n_test = static_cast<int>(ds_.test_images.count);
    for (int rows : {eval_rows_, n_test % eval_rows_})
      for (int l = 0; l < L_ && rows > 0; ++l) {
        GemmProblem<MatView<T, true>, WView, StoreEpi> p;
        p.M = rows, p.N = w[l + 1], p.K = w[l];
        plan_splits_p5(p, dev_.sm_count);
        note(p, 0);
      }
    for (int s = 0; s < 2; ++s) {
      ws_[s].alloc(ws[s]);
      counters_[s].alloc(tiles[s]);
      CUDA_CHECK(cudaMemset(counters_[s].get(), 0, counters_[s].bytes()));
    }
  }

  const MlpOptions& o_;
  const Schedule& sc_;
  const DeviceInfo& dev_;
  const Dataset& ds_;
  const HostParams& init_;
  const int L_, B_;
  const bool cublas_, persistent_, cluster_;
  PersistParams persist_;
  PersistPlan plan_;
  ClusterParams cl_;
  ClusterPlan cl_plan_;
  void plan_cluster_kernel() {
    if constexpr (kHalf) {
      const auto& w = o_.layers;
      ClusterParams& p = cl_;
      p.images = train_x_.get(), p.labels = train_y_.get(), p.perm = perm_.get();
      p.L = L_, p.B = B_;
      for (int l = 0; l <= L_; ++l) p.w[l] = w[l];
      for (int l = 0; l < L_; ++l) p.woff[l] = woff_[l], p.boff[l] = boff_[l];
      p.P = P_.get(), p.P16 = P16_.get();
      p.lr = static_cast<float>(o_.lr);
      p.step_loss = step_loss_.get(), p.bad_step = bad_step_.get();
      cl_plan_ = plan_cluster(p, o_.blocks, dev_.index);
      costs_per_step_["p5_cluster"] = cluster_step_cost(p, cl_plan_);
    }
  }
  void plan_persistent_kernel() {
    const auto& w = o_.layers;
    PersistParams& p = persist_;
    p.images = train_x_.get(), p.labels = train_y_.get(), p.perm = perm_.get();
    p.D = w[0], p.H1 = w[1], p.H2 = w[2], p.C = w[3], p.B = B_;
    p.P = P_.get();
    if (o_.adam()) p.M = M_.get(), p.V = V_.get(), p.hyper = hyper_.get(), p.hyper_n = static_cast<int64_t>(hyper_.size());
    p.w0 = woff_[0], p.b0 = boff_[0], p.w1 = woff_[1], p.b1 = boff_[1], p.w2 = woff_[2], p.b2 = boff_[2];
    h1x_.alloc(2 * static_cast<size_t>(B_) * w[1]);
    h2x_.alloc(2 * static_cast<size_t>(B_) * w[2]);
    w2x_.alloc(2 * static_cast<size_t>(w[2]) * w[1]);
    p.h1x = h1x_.get(), p.h2x = h2x_.get(), p.w2x = w2x_.get();
    p.adam = o_.adam(), p.lr = static_cast<float>(o_.lr);
    p.dropout = o_.dropout > 0, p.key = dropout_key(o_.common.seed), p.threshold = dropout_threshold(o_.dropout);
    p.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
    p.step_loss = step_loss_.get(), p.bad_step = bad_step_.get();
    plan_ = plan_persistent(p, o_.blocks, dev_.index, !o_.generic_kernel);
    costs_per_step_["p5_persistent"] = persist_step_cost(p, plan_);
  }
  DevBuf<xword> h1x_, h2x_, w2x_;
  DevBuf<unsigned long long> breakdown_;
  cudaStream_t st_{};
  size_t nparams_ = 0;
  std::vector<size_t> woff_, boff_;
  std::vector<double> packed(const DevBuf<float>& buf) const {
    CUDA_CHECK(cudaStreamSynchronize(st_));
    const std::vector<float> flat = buf.download();
    std::vector<double> out;
    for (int l = 0; l < L_; ++l) {
      const size_t nw = static_cast<size_t>(o_.layers[l + 1]) * o_.layers[l], nb = o_.layers[l + 1];
      out.insert(out.end(), flat.begin() + woff_[l], flat.begin() + woff_[l] + nw);
      out.insert(out.end(), flat.begin() + boff_[l], flat.begin() + boff_[l] + nb);
    }
    return out;
  }

  DevBuf<float> P_, M_, V_, G_, Gdbg_;
  DevBuf<AdamHyper> hyper_;
  DevBuf<__half> P16_;
  DevBuf<uint8_t> train_x_, train_y_, test_x_, test_y_;
  DevBuf<int> perm_;
  DevBuf<int64_t> base_;
  std::vector<DevBuf<T>> H_, dZ_, Heval_;
  DevBuf<float> step_loss_, tile_loss_, eval_loss_;
  DevBuf<unsigned> loss_counter_;
  DevBuf<unsigned long long> bad_step_;
  DevBuf<int> eval_correct_;
  int eval_rows_ = 0, eval_tiles_ = 0;
  DevBuf<float> ws_[2];
  DevBuf<unsigned> counters_[2];
  bool fused_bwd_ = false;
  bool pdl_ = false;  // own graph path: step kernels launched with PDL (--pdl)
  DevBuf<float> fb_ws_;
  DevBuf<unsigned> fb_counters_;
  DevBuf<T> X_;
  DevBuf<float> Z_;
  std::unique_ptr<LtHandle> lt_;
  std::vector<std::unique_ptr<LtLayer>> lt_layers_;
  std::map<int, cudaGraphExec_t> graphs_;
  std::map<std::string, KernelCost> costs_per_step_;
};

// --validate: the first K steps against the float64 reference on the same batches, with the same
// dropout masks (recomputed on the host from the same Philox bits): the batch loss, the gradients
// (the fused update stores them for this purpose only) and the change of every parameter.
// Tolerances and why: see phase4_mlp/main.cu (validate); the same numbers apply.
template <class T>
ValidationResult validate(Trainer<T>& tr, const MlpOptions& o, const Schedule& sc, const Dataset& ds,
                          const HostParams& init) {
  const bool half = std::is_same<T, __half>::value;
  const double tol_loss = half ? 1e-2 : 1e-5, tol_grad = half ? 5e-2 : 1e-5, tol_delta = half ? 5e-2 : 2e-4;
  const int K = static_cast<int>(std::min<int64_t>(o.validate_steps, sc.steps_per_epoch));
  std::printf("validating %d steps against the float64 reference (%s, gemm %s)\n", K, o.precision.c_str(),
              o.gemm.c_str());
  ValidationResult v;
  MlpParams ref = to_reference(init);
  AdamState adam = adam_init(o.layers);
  const std::vector<double> p0 = flatten(ref);
  const int B = o.batch, L = o.nlayers(), D = o.layers[0];
  const double scale = 1.0 / (1.0 - o.dropout);
  const uint64_t key = dropout_key(o.common.seed);
  const uint32_t thr = dropout_threshold(o.dropout);
  Perm perm;
  int64_t perm_epoch = -1;
  double e_loss = 0, e_grad = 0, e_delta = 0;
  tr.keep_gradients(true);
  tr.reset();
  for (int k = 0; k < K; ++k) {
    tr.single_step(k);
    CUDA_CHECK(cudaStreamSynchronize(tr.stream()));
    const float loss = tr.losses(k, 1)[0];
    std::vector<double> x(static_cast<size_t>(B) * D);
    std::vector<int> y(B);
    for (int r = 0; r < B; ++r) {
      const uint32_t idx = sample_index(sc, o.common.seed, k, r, &perm, &perm_epoch);
      for (int j = 0; j < D; ++j) {
        const float f = static_cast<float>(ds.train_images.pixels[static_cast<size_t>(idx) * D + j]) / 255.0f;
        x[static_cast<size_t>(r) * D + j] = half ? static_cast<double>(__half2float(__float2half_rn(f))) : f;
      }
      y[r] = ds.train_labels.labels[idx];
    }
    std::vector<std::vector<double>> masks;
    for (int l = 0; l + 1 < L && o.dropout > 0; ++l) {
      const int N = o.layers[l + 1];
      std::vector<double> m(static_cast<size_t>(B) * N);
      for (size_t i = 0; i < m.size(); ++i)
        m[i] = dropout_bits_host(key, static_cast<uint32_t>(l), static_cast<uint64_t>(k), static_cast<uint32_t>(i)) >= thr
                   ? scale
                   : 0.0;
      masks.push_back(std::move(m));
    }
    const auto* mp = o.dropout > 0 ? &masks : nullptr;
    MlpForward f = mlp_forward(ref, x.data(), y.data(), B, mp);
    MlpParams g = mlp_backward(ref, f, y.data(), B, mp);
    if (o.adam()) mlp_adam_step(ref, g, adam, o.lr);
    else mlp_sgd_step(ref, g, o.lr);
    const std::vector<double> ours = tr.params(), ours_g = tr.grads();
    const std::vector<double> rp = flatten(ref);
    std::vector<double> d_ours(ours.size()), d_ref(rp.size());
    for (size_t i = 0; i < ours.size(); ++i) d_ours[i] = ours[i] - p0[i], d_ref[i] = rp[i] - p0[i];
    const double el = rel_scalar(loss, f.loss), eg = rel_error(ours_g, flatten(g)), ed = rel_error(d_ours, d_ref);
    std::printf("  step %d: loss %.7f (ref %.7f)  rel.err loss %.2e grad %.2e param-change %.2e\n", k, loss, f.loss, el,
                eg, ed);
    auto worse = [](double a, double b) { return (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b); };
    e_loss = worse(e_loss, el), e_grad = worse(e_grad, eg), e_delta = worse(e_delta, ed);
  }
  v.check("loss", e_loss, tol_loss);
  v.check("gradients", e_grad, tol_grad);
  v.check("parameter_change", e_delta, tol_delta);
  tr.keep_gradients(false);
  tr.reset();
  return v;
}

template <class T>
int train(const MlpOptions& o, const Cli& cli, const DeviceInfo& dev, const Dataset& ds, const Schedule& sc,
          const HostParams& init) {
  const bool cublas = o.gemm == "cublas";
  nlohmann::json rec = new_record(kPhase, o.workload, cublas ? "cuda-cublaslt" : "cuda", cli);
  rec["device"] = to_json(dev);
  rec["software"] = software_json(dev);
  rec["notes"].push_back(std::string("precision ") + o.precision +
                         (cublas ? "; products by cuBLASLt (compute 32F, no TF32), epilogues/optimizer our kernels"
                                 : "; own fused GEMM kernels"));
  rec["notes"].push_back(o.launch == "persistent"
                             ? "data resident on the GPU as bytes; per-epoch permutation generated on the device; "
                               "every epoch one cooperative persistent kernel (parameters in shared memory, two "
                               "tagged exchanges between blocks a step, no grid barrier); losses read once per epoch"
                         : o.launch == "cluster"
                             ? "data resident on the GPU as bytes; per-epoch permutation generated on the device; "
                               "every epoch one thread-block cluster kernel (parameters in the blocks' shared memory, "
                               "activations exchanged through distributed shared memory, a cluster barrier per "
                               "dependency between blocks); losses read once per epoch"
                             : "data resident on the GPU as bytes; per-epoch permutation generated on the device; "
                               "every step of an epoch replayed as one CUDA graph; losses read once per epoch");
  if (o.common.deterministic) rec["notes"].push_back("--deterministic: no float atomics are used in any case");

  size_t free0 = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  Trainer<T> tr(o, sc, dev, ds, init);

  Peaks peaks;
  if (o.common.measure_peaks) {
    peaks = measure_peaks();
    rec["peaks"] = to_json(peaks);
  }

  int rc = kExitOk;
  if (o.common.validate) {
    ValidationResult v = validate(tr, o, sc, ds, init);
    rec["validation"] = v.to_json();
    if (!cublas) rec["notes"].push_back("peak_device_memory_bytes includes the validation-only gradient buffer");
    if (!v.passed) rec["status"] = "validation_failed", rc = kExitValidation;
  } else {
    rec["validation"] = {{"performed", false}, {"passed", nullptr}};
  }

  // Capture the graphs (a full epoch, and the shorter last one of a --steps run) before timing.
  const int full = static_cast<int>(std::min<int64_t>(sc.steps_per_epoch, sc.total_steps));
  const int rem = static_cast<int>(sc.total_steps % sc.steps_per_epoch);
  // One step first: modules load and cuBLASLt does its first-call work outside the capture.
  tr.single_step(0);
  CUDA_CHECK(cudaStreamSynchronize(tr.stream()));
  tr.reset();
  HostTimer cap_timer;
  tr.prepare(full, rem);
  const double capture_ms = cap_timer.elapsed_ms();
  // Warm-up: `warmup` runs of the first epoch from the initial state, then back to it.
  for (int w = 0; w < o.common.warmup; ++w) {
    tr.run_epoch(0, full);
    CUDA_CHECK(cudaStreamSynchronize(tr.stream()));
    tr.reset();
  }
  size_t free1 = 0;
  CUDA_CHECK(cudaMemGetInfo(&free1, &total));
  if (o.breakdown && (tr.persistent() || tr.cluster())) tr.start_breakdown();
  const bool one_launch = tr.persistent() || tr.cluster();  // one kernel launch per epoch

  // One training run from the initial state: every epoch timed with events, its losses read back
  // once, then evaluated.
  struct Run {
    double total_ms = 0;
    std::vector<double> per_epoch_ms, epoch_loss, test_loss, test_acc;
    std::vector<float> step_losses;
    std::string diverged;
    int64_t steps = 0, launches = 0;
  };
  EventTimer timer(tr.stream());
  auto one_run = [&](bool first) {
    Run run;
    if (!first) tr.reset();
    for (int e = 0; e < sc.epochs && run.diverged.empty(); ++e) {
      throw_if_interrupted("training");
      const int64_t s0 = e * sc.steps_per_epoch;
      const int n = static_cast<int>(std::min(sc.steps_per_epoch, sc.total_steps - s0));
      timer.start();
      tr.run_epoch(s0, n);
      timer.stop();
      const double ms = timer.elapsed_ms();
      run.per_epoch_ms.push_back(ms);
      run.total_ms += ms;
      run.steps += n;
      run.launches += 1;
      const std::vector<float> ls = tr.losses(s0, n);  // the once-per-epoch read-back
      const int64_t bad = tr.bad_step();
      double sum = 0;
      for (float l : ls) sum += l;
      if (bad >= 0) {
        const int64_t upto = std::max<int64_t>(0, bad - s0 + 1);
        run.step_losses.insert(run.step_losses.end(), ls.begin(), ls.begin() + std::min<int64_t>(upto, n));
        run.diverged = "training diverged: non-finite loss at epoch " + std::to_string(bad / sc.steps_per_epoch) +
                       ", step " + std::to_string(bad % sc.steps_per_epoch) + " (global step " + std::to_string(bad) + ")";
        run.epoch_loss.push_back(NAN);
        break;
      }
      run.step_losses.insert(run.step_losses.end(), ls.begin(), ls.end());
      run.epoch_loss.push_back(sum / n);
      NvtxRange r(Cat::Eval, "evaluate");
      double tl = 0, ta = 0;
      tr.evaluate(&tl, &ta);
      run.test_loss.push_back(tl), run.test_acc.push_back(ta);
      std::printf("epoch %d: %.2f ms (%d steps)  train loss %.4f  test loss %.4f  test acc %.2f%%\n", e, ms, n,
                  run.epoch_loss.back(), tl, ta);
    }
    return run;
  };

  // The timed runs, without our CUPTI tracer (it adds ~2 us to every launch it watches, graph
  // nodes included: tracer_overhead record).
  std::vector<double> totals;
  Run last;
  int64_t measured_steps = 0;
  for (int rep = 0; rep < o.common.repeats && last.diverged.empty(); ++rep) {
    last = one_run(rep == 0);
    totals.push_back(last.total_ms);
    measured_steps += last.steps;
  }
  const std::vector<double> final_params = tr.params();  // the timed runs' result
  // --breakdown: the cycles of the timed runs only (the buffer is released here, so the traced run
  // below does not stamp).
  const std::vector<unsigned long long> breakdown_cycles =
      o.breakdown && one_launch ? tr.take_breakdown() : std::vector<unsigned long long>{};
  // Then one more run, untimed, with the tracer on: the kernel/memcpy/range summaries and the
  // efficiency table.
  Run traced;
  const std::optional<double> traced_ms = traced_run(rec, !last.diverged.empty(), o.common.no_cupti, [&] {
    traced = one_run(false);
    return traced.total_ms;
  });
  const std::string& diverged = last.diverged;
  const std::vector<float>& step_losses = last.step_losses;

  const Stats st = summarize(totals);
  rec["timing"] = timing_json("cuda-events",
                              tr.persistent()
                                  ? "per epoch: the permutation kernel and one cooperative launch of the persistent kernel"
                              : tr.cluster()
                                  ? "per epoch: the permutation kernel and one launch of the cluster kernel"
                                  : "per epoch: the permutation kernel and one CUDA-graph replay of all the epoch's steps",
                              one_launch
                                  ? std::string("data upload, validation, warm-up, the per-epoch loss read-back, "
                                                "evaluation")
                                  : "data upload, graph capture (" + std::to_string(capture_ms) +
                                        " ms host time), validation, warm-up, the per-epoch loss read-back, evaluation",
                              o.common.warmup, st, last.per_epoch_ms);
  rec["timing"]["per_step_ms"] = {{"median", step_losses.empty() ? 0.0 : st.median / static_cast<double>(step_losses.size())}};
  traced_run_fields(rec, traced_ms, o.common.trace);
  rec["loss"] = {{"per_epoch", finite_array(last.epoch_loss)}, {"test_per_epoch", finite_array(last.test_loss)},
                 {"per_step", per_step_json(step_losses)}};
  const double samples = static_cast<double>(step_losses.size()) * o.batch;
  rec["metrics"] = {{"test_accuracy", last.test_acc.empty() ? nlohmann::json(nullptr) : nlohmann::json(last.test_acc.back())},
                    {"test_accuracy_per_epoch", last.test_acc},
                    {"train_loss", last.epoch_loss.empty() ? nlohmann::json(nullptr) : finite_or_null(last.epoch_loss.back())},
                    {"peak_device_memory_bytes", DeviceMemoryCounter::get().peak},
                    {"device_memory_delta_bytes", free0 > free1 ? free0 - free1 : 0},
                    {"samples_per_s", st.median > 0 ? samples / (st.median / 1e3) : 0.0},
                    {"steps", static_cast<int64_t>(step_losses.size())},
                    {"launches_per_step", 0}};
  int64_t launches = 0;
  for (const auto& [k, c] : tr.costs_per_step()) launches += c.calls;
  rec["metrics"]["launches_per_step"] = launches;  // GEMM launches (cuBLASLt path: products only)
  rec["metrics"]["backward"] = tr.fused_backward() ? "fused" : "paired";  // own graph path's backward kernels
  rec["metrics"]["pdl"] = tr.pdl();  // own graph path: kernels launched with programmatic dependent launch
  // --breakdown of a one-launch kernel: block 0's cycles per part, as shares of the median step
  auto breakdown_parts = [&](const char* (*name)(int), int n) {
    nlohmann::json parts = nlohmann::json::array();
    const std::vector<unsigned long long>& cyc = breakdown_cycles;
    double sum = 0;
    for (unsigned long long c : cyc) sum += static_cast<double>(c);
    const double per_step_ms = step_losses.empty() ? 0.0 : st.median / static_cast<double>(step_losses.size());
    std::printf("%s step breakdown (block 0, thread 0; share of its cycles):\n", o.launch.c_str());
    for (int i = 0; i < n; ++i) {
      const double share = sum > 0 ? cyc[i] / sum : 0.0;
      parts.push_back({{"part", name(i)},
                       {"cycles_per_step", measured_steps > 0 ? cyc[i] / static_cast<double>(measured_steps) : 0.0},
                       {"share", share},
                       {"us_per_step", share * per_step_ms * 1e3}});
      std::printf("  %5.1f%%  %6.2f us  %s\n", 100 * share, share * per_step_ms * 1e3, name(i));
    }
    return parts;
  };
  if (tr.persistent()) {
    const PersistPlan& pl = tr.persist_plan();
    rec["metrics"]["launches_per_step"] = nullptr;  // one launch per epoch, whatever the step count
    nlohmann::json parts;
    if (o.breakdown) parts = breakdown_parts(persist_segment_name, kPersistSegments);
    rec["metrics"]["persistent"] = {{"blocks", pl.blocks},
                                    {"threads_per_block", kPersistThreads},
                                    {"first_layer_units_per_block", pl.nc},
                                    {"second_layer_units_per_block", pl.nj},
                                    {"shared_memory_bytes_per_block", pl.smem},
                                    {"exchanges_per_step", 2},
                                    {"grid_barriers_per_step", 0},
                                    {"shape_compiled_in", pl.specialized}};
    if (o.breakdown) rec["metrics"]["persistent"]["step_breakdown"] = parts;
  }
  if (tr.cluster()) {
    const ClusterPlan& pl = tr.cluster_plan();
    rec["metrics"]["launches_per_step"] = nullptr;  // one launch per epoch, whatever the step count
    rec["metrics"]["cluster"] = {{"blocks", pl.blocks},
                                 {"threads_per_block", kClThreads},
                                 {"shared_memory_bytes_per_block", pl.smem},
                                 {"cluster_barriers_per_step", 2 * o.nlayers() - 3}};
    if (o.breakdown) rec["metrics"]["cluster"]["step_breakdown"] = breakdown_parts(cluster_segment_name, kClSegments);
  }
  // fingerprint of the final parameters: --deterministic runs must reproduce it bit for bit
  // (float32 values widened exactly; narrowing is exact)
  rec["metrics"]["param_checksum"] = float_checksum(std::vector<float>(final_params.begin(), final_params.end()));
  if (traced_ms) {
    std::map<std::string, KernelCost> costs;  // over the traced run, as the tracer's totals are
    for (const auto& [k, c] : tr.costs_per_step())
      costs[k] = KernelCost{c.flops * traced.steps, c.bytes * traced.steps,
                            one_launch ? traced.launches : c.calls * traced.steps};
    rec["efficiency"] = efficiency_json(rec["kernels"], costs, o.common.measure_peaks ? &peaks : nullptr);
  }
  if (!diverged.empty()) rec["status"] = "diverged", rec["notes"].push_back(diverged);
  const std::string path = write_record(rec, o.common.out, dev.slug, kPhase, o.common.tag);
  std::printf("record: %s\n", path.c_str());
  if (!diverged.empty()) throw Error(kExitDiverged, diverged);
  if (rc == kExitValidation) throw Error(kExitValidation, "validation failed (see the errors above and in " + path + ")");
  return rc;
}

// --gemm-compare: our plain GEMM (fp32 tile stored, no fused epilogue; phase 5's split planning and
// fix-up) against cuBLASLt on the three products of the configured model's largest layer, fresh
// random operands, outputs poisoned, 5 warm-ups and 30 timed launches each (median).
template <class Dummy = void>
__global__ void fill_random_kernel(float* x, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = static_cast<float>(static_cast<double>(splitmix64(seed ^ splitmix64(i)) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

// The plain fp32 store, with phase 5's split-K fix-up (float4 partials; see kernels.cuh), which is
// how the trainer's own GEMMs sum their slices.
struct CompareStoreEpi : StoreEpi {
  static constexpr bool kVecFixup = true;
};

template <class T>
int gemm_compare(const MlpOptions& o, const Cli& cli, const DeviceInfo& dev) {
  const auto& w = o.layers;
  int l = 0;
  for (int i = 1; i < o.nlayers(); ++i)
    if (static_cast<double>(w[i]) * w[i + 1] > static_cast<double>(w[l]) * w[l + 1]) l = i;
  const int B = o.batch, in = w[l], out = w[l + 1];
  std::printf("GEMM comparison on layer %d (%d -> %d), batch %d, %s\n", l, in, out, B, o.precision.c_str());
  cudaStream_t st{};
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  auto rnd = [&](size_t n, uint64_t seed) {
    DevBuf<float> f(n);
    DevBuf<T> t(n);
    fill_random_kernel<<<ew_blocks(n), 256, 0, st>>>(f.get(), n, seed);
    CHECK_LAUNCH();
    if constexpr (std::is_same<T, __half>::value) {
      to_half_kernel<<<ew_blocks(n), 256, 0, st>>>(f.get(), t.get(), n);
      CHECK_LAUNCH();
    } else {
      CUDA_CHECK(cudaMemcpyAsync(t.get(), f.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, st));
    }
    CUDA_CHECK(cudaStreamSynchronize(st));
    return t;
  };
  DevBuf<T> X = rnd(static_cast<size_t>(B) * in, 1), W = rnd(static_cast<size_t>(out) * in, 2),
            dZ = rnd(static_cast<size_t>(B) * out, 3);
  DevBuf<float> c_own(static_cast<size_t>(out) * in), c_lt(static_cast<size_t>(out) * in);
  LtHandle lt;
  LtLayer lay;
  lay.plan<T>(lt, B, in, out, true);

  GemmProblem<MatView<T, true>, MatView<T, false>, CompareStoreEpi> fwd;
  fwd.M = B, fwd.N = out, fwd.K = in, fwd.a = make_view<T, true>(X.get(), in), fwd.b = make_view<T, false>(W.get(), in);
  fwd.epi.c = c_own.get(), fwd.epi.ldc = out;
  GemmProblem<MatView<T, true>, MatView<T, true>, CompareStoreEpi> dgr;
  dgr.M = B, dgr.N = in, dgr.K = out, dgr.a = make_view<T, true>(dZ.get(), out), dgr.b = make_view<T, true>(W.get(), in);
  dgr.epi.c = c_own.get(), dgr.epi.ldc = in;
  GemmProblem<MatView<T, false>, MatView<T, true>, CompareStoreEpi> wgr;
  wgr.M = out, wgr.N = in, wgr.K = B, wgr.a = make_view<T, false>(dZ.get(), out), wgr.b = make_view<T, true>(X.get(), in);
  wgr.epi.c = c_own.get(), wgr.epi.ldc = in;
  plan_splits_p5(fwd, dev.sm_count), plan_splits_p5(dgr, dev.sm_count), plan_splits_p5(wgr, dev.sm_count);
  size_t wsn = std::max({ws_floats(fwd), ws_floats(dgr), ws_floats(wgr), size_t{1}});
  size_t tiles = std::max({fwd.tiles(), dgr.tiles(), wgr.tiles()});
  DevBuf<float> ws(wsn);
  DevBuf<unsigned> counters(tiles);
  CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());
  fwd.ws = dgr.ws = wgr.ws = ws.get();
  fwd.counters = dgr.counters = wgr.counters = counters.get();

  auto time_it = [&](auto&& launch) {
    EventTimer t(st);
    for (int i = 0; i < 5; ++i) launch();
    std::vector<double> ms;
    for (int i = 0; i < 30; ++i) {
      t.start();
      launch();
      t.stop();
      ms.push_back(t.elapsed_ms());
    }
    return summarize(ms).median;
  };
  auto poison = [&](DevBuf<float>& b) { CUDA_CHECK(cudaMemsetAsync(b.get(), 0xFF, b.bytes(), st)); };
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> own_total;
  auto one = [&](const char* name, double M, double N, double K, auto&& own, auto&& ltf) {
    poison(c_own), poison(c_lt);
    own();
    ltf();
    CUDA_CHECK(cudaStreamSynchronize(st));
    const size_t n = static_cast<size_t>(M * N);
    std::vector<float> a(n), b(n);
    CUDA_CHECK(cudaMemcpy(a.data(), c_own.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(b.data(), c_lt.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
    const double err = rel_error(a.data(), std::vector<double>(b.begin(), b.end()).data(), n);
    const double t_own = time_it(own), t_lt = time_it(ltf);
    const double flops = 2 * M * N * K, bytes = (M * K + K * N) * sizeof(T) + M * N * 4.0;
    rows.push_back({{"product", name}, {"M", M}, {"N", N}, {"K", K}, {"own_ms", t_own}, {"cublaslt_ms", t_lt},
                    {"own_over_cublaslt_speed", t_lt / t_own}, {"own_tflops", flops / t_own / 1e9},
                    {"cublaslt_tflops", flops / t_lt / 1e9}, {"own_gbps", bytes / t_own / 1e6},
                    {"cublaslt_gbps", bytes / t_lt / 1e6}, {"rel_diff_vs_cublaslt", finite_or_null(err)}});
    own_total.push_back(t_own);
    std::printf("  %-8s %6.0fx%6.0fx%6.0f  own %.4f ms  cuBLASLt %.4f ms  own/cuBLASLt speed %.2f  rel.diff %.1e\n",
                name, M, N, K, t_own, t_lt, t_lt / t_own, err);
  };
  one("forward", B, out, in, [&] { launch_gemm<p4_gemm_fwd, T>(fwd, st); },
      [&] { lay.forward(X.get(), W.get(), c_lt.get(), st); });
  one("dgrad", B, in, out, [&] { launch_gemm<p4_gemm_bwd_data, T>(dgr, st); },
      [&] { lay.backward_data(dZ.get(), W.get(), c_lt.get(), st); });
  one("wgrad", out, in, B, [&] { launch_gemm<p4_gemm_bwd_weight, T>(wgr, st); },
      [&] { lay.backward_weight(dZ.get(), X.get(), c_lt.get(), st); });
  CUDA_CHECK(cudaStreamDestroy(st));

  nlohmann::json rec = new_record(kPhase, o.workload, "cuda-vs-cublaslt", cli);
  rec["device"] = to_json(dev);
  rec["software"] = software_json(dev);
  rec["timing"] = timing_json("cuda-events", "one launch of each product (median of 30 after 5 warm-ups)",
                              "operand generation, planning", 5, summarize(own_total));
  rec["metrics"] = {{"gemm_compare", rows}, {"layer", l}, {"in", in}, {"out", out}, {"batch", B}};
  rec["notes"].push_back("own = the phase 4/5 GEMM mainloop, planned and with the split-K fix-up as phase 5's trainer runs it, "
                         "and a plain fp32 store epilogue (no fusion); timing.total_ms "
                         "samples are the own medians of forward, dgrad, wgrad");
  rec["validation"] = {{"performed", false}, {"passed", nullptr}};
  const std::string path = write_record(rec, o.common.out, dev.slug, kPhase, o.common.tag);
  std::printf("record: %s\n", path.c_str());
  return kExitOk;
}

int run(int argc, char** argv) {
  MlpOptions o;
  bool compare = false;
  Cli cli(kPhase, "MNIST MLP, batched: data on the GPU, fused kernels, one CUDA graph per epoch.");
  add_mlp_flags(cli, o, true);
  cli.add_string("--launch", &o.launch,
                 "how an epoch is launched: one CUDA graph of fused kernels, one persistent cooperative kernel "
                 "(fp32, two hidden layers, own GEMMs), or one thread-block cluster kernel (fp16, SGD, no dropout, "
                 "batch <= 32, a model that fits the cluster's shared memory: W2 at h = 128)",
                 {"graph", "persistent", "cluster"});
  cli.add_int("--blocks", &o.blocks,
              "blocks of the persistent kernel (0 = one per first-layer unit, at most one per SM) or of the cluster "
              "(0 = the largest that fits, at most 16)",
              0, 4096);
  cli.add_flag("--generic-kernel", &o.generic_kernel,
               "persistent kernel: its generic instance even for W1's shape (measures what compiling the shape in "
               "buys)");
  cli.add_string("--backward", &o.backward,
                 "fp16 graph path: each layer's update and backward-data product in one pass over its weights "
                 "(fused; batch <= 32, widths multiples of 8), or the paired GEMM kernels; auto = fused with SGD",
                 {"auto", "fused", "paired"});
  cli.add_string("--pdl", &o.pdl,
                 "own graph path: launch each step kernel with programmatic dependent launch, so that it starts (and "
                 "fetches its weights) while the kernel before it finishes (compute capability 9.0 and up; off below)",
                 {"on", "off"});
  cli.add_flag("--breakdown", &o.breakdown,
               "persistent and cluster kernels: time the parts of a step (clock stamps of block 0) into the record");
  cli.add_flag("--gemm-compare", &compare,
               "only time our GEMM against cuBLASLt on the largest layer's three products (no training)");
  if (!cli.parse(argc, argv)) return 0;
  check_mlp_options(o);
  if (o.layers.back() > kBN) throw Error(kExitUsage, "--layers: the last width must fit one tile");
  if (o.launch == "persistent" && (o.nlayers() != 3 || o.fp16() || o.gemm != "own"))
    throw Error(kExitUsage, "--launch persistent: needs two hidden layers (--layers 784,H1,H2,10), --precision fp32 "
                            "and --gemm own");
  if (o.launch == "cluster" && (!o.fp16() || o.adam() || o.dropout > 0 || o.gemm != "own"))
    throw Error(kExitUsage, "--launch cluster: needs --precision fp16, --optimizer sgd, --dropout 0 and --gemm own");
  check_output_dir(o.common.out);  // a bad --out fails now (exit 6), not after training
  if (compare) {
    const DeviceInfo dev = require_device();
    return o.fp16() ? gemm_compare<__half>(o, cli, dev) : gemm_compare<float>(o, cli, dev);
  }
  const MlpSetup s = prepare_mlp_run(o);
  const DeviceInfo dev = require_device();
  return o.fp16() ? train<__half>(o, cli, dev, s.ds, s.sc, s.init) : train<float>(o, cli, dev, s.ds, s.sc, s.init);
}

}  // namespace
}  // namespace nb

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, nb::run); }
