// phase5_batched/5b_fused_backward.cuh — one pass over a layer's weights for its whole backward step
// (fp16 runs, batch <= 32): the weight update AND the backward-data product through the same
// weights, reading each fp32 master weight once.
//
// Why: at W2's h = 8192 a step is bound by weight traffic. The paired kernels of 5a_graph_step.cuh read a
// layer's fp16 copy for its backward-data product (dZ_prev = dZ · W, 2 B a weight) in one launch and
// read + write its fp32 master and write the fp16 copy in its update (10 B) in the next. The update
// reads the master anyway, and the fp16 copy is by construction the master rounded to fp16, so the
// backward-data product can take its operand from the master as it streams past: 10 B a weight
// instead of 12, and one launch per layer instead of a pair that mixes two layers.
//
// A block owns a 64-column tile of W (columns n0 .. n0+63 of the layer's inputs) and a range of
// rows (output units) cut into 32-row sub-tiles. Per sub-tile:
//   1. dW (32 x 64) = dZ^T · H    WMMA, K = batch (<= 32, zero-padded), fp32 accumulators -> smem
//   2. each thread takes 16 of the tile's weights (8 in an 8-warp block): old w from the staged fp32
//      tile, written as fp16 into a second tile (the backward-data operand; equal to the fp16 copy's value), then the
//      optimizer step (SGD, or Adam with its moments read and written here) and the stores of the
//      new master weight and its fp16 copy
//   3. dA (batch x 64) += dZ (batch x 32 rows) · W_old (32 rows x 64)   WMMA, accumulated in
//      registers over all the block's sub-tiles
// The fp32 weight tiles and dZ's columns arrive by cp.async, kStages sub-tiles ahead, so the
// block always has ~24 KB of weight reads in flight while it computes; three blocks fit an SM.
// The row ranges are split over `splits` blocks per column tile: their dA partials are added by the
// GEMM's split-K fix-up (splitk_fixup: the last block to finish adds them in split order, so the
// result is deterministic), which then applies ReLU'/dropout backward (BwdReluEpi) for dZ_prev; a
// one-wave plan's slices (--handover cluster) run as one cluster and add them through its shared
// memory in the same order (fb::cluster_handover). Blocks of the
// first column tile also sum each staged dZ sub-tile over the batch for the bias and update it.
// The first layer's update (no backward-data product) uses the same kernel with H gathered from
// the byte data set (xdata + RowMap instead of h).
// Any M, N works; N % 8 == 0 and 16-byte aligned buffers are required (the trainer checks, and
// keeps the paired kernels otherwise); rows/columns past the edge are zero-filled.
// The row split fills whole waves of resident blocks (plan_fused_bwd): split for about 8 blocks an
// SM, the grid ended in a partial wave at most widths, its last blocks running alone. Measured (H200,
// W2, fdd6d02, profiles/nvidia-h200/phase5_batched__w2-h<h>-own.json): 96.77 / 211.98 / 575.85 us a
// step at h = 2,048 / 4,096 / 8,192, where the old split gave 112.0 / 224.5 / 576.9 in the same call
// as the new one's 95.8 / 210.2 / 572.0 (logs/fbwaves_5f18f30/). At 8,192 a pass moves 670 MB in
// ~200 us (3.3 TB/s): memory holds it there (30% fewer instructions made it no faster at full clocks).
// A pass without backward-data product (the first layer) runs 8-warp blocks, and every pass sums its
// bias from the dZ staged for each sub-tile. Why: the first layer's one wave (13 column tiles x 29
// row slices at h = 8,192, 3 blocks an SM) left 12 warps an SM to issue the update: Nsight Compute
// (logs/next_c3c7d16/c/ncu-w2-first.txt) 0.54 eligible warps a scheduler, DRAM 25% busy, 29.8 us for
// its 64 MB (2.1 TB/s, logs/stream_rows/kernels-s4.txt); and the first column tile's blocks summed the
// bias after their loop, 32 strided global reads a row, running on past the others. Prediction,
// before measuring: twice the warps to issue the same work take the pass to about the hidden passes'
// share of the copy ceiling, 29.8 -> ~19 us at 8,192 (12.5 -> ~8 at 2,048); with the bias tails gone
// too, W2's step ~12 us shorter at 8,192 and ~5 at 2,048. Measured (H100, 2 rounds alternating,
// nvidia-h100-80gb-hbm3/logs/fbfirst_g16_9901412/): W2's step at 8,192 716.7 -> 708.7 us, the same
// checksums; the pass's own time and the other widths are still to be taken.
// 8-warp blocks with the backward-data product too (p.warps, phase 5's --fused-warps): at W2's
// h = 2,048 a hidden layer's 42 MB sit in L2 from one step to the next, so its pass waits on issue,
// not on memory: Nsight Compute on one step at full clocks (H100, nvidia-h100-80gb-hbm3/logs/
// lastpass_2728530/ncu_eef8414/) has each hidden pass 21.9 us with DRAM 12-14% busy, 0.33 warps
// issued a scheduler a cycle, 8.2 warps an SM resident (256 blocks of 4 warps). An 8-warp block with
// the product needs more registers than three an SM allow (80: it spilled), so two an SM, which holds
// a one-wave plan of clusters (h = 1,024 and 2,048: 256 blocks) at once. The same sums in the same
// order: the same bits (the GPU tests compare them). Prediction, before measuring: ~16 warps an SM
// issue the same work, the pass ~30% shorter (~15 us), W2's step ~10 us shorter at 2,048 (two hidden
// passes) and ~5 at 1,024; at 4,096 and 8,192 (two and three waves, DRAM-bound) 4-warp blocks stay.
// Measured (H100, nvidia-h100-80gb-hbm3/logs/lastpass_2728530/warps_89ef1fc/, one build, --fused-warps
// 4 -> 8 at every width, 2 rounds alternating): W2's step 48.75 -> 47.80 us at h = 1,024 (48.83 ->
// 47.56 in a second call, ab2/), 84.11 -> 86.55 at 2,048, 214.39 -> 206.81 at 4,096, 681.76 -> 687.89
// at 8,192; the same checksums at 4,096 and 8,192, new ones at 1,024 and 2,048, where the clusters
// that fit two blocks an SM take fewer slices (7 for 8 at 2,048: alone, PDL off, a hidden pass 22.94
// -> 22.77 us on 224 blocks where 256 ran: what the warps gained, the slices gave back). Neither wins
// at every width, so 4-warp blocks stay the default (--fused-warps 8 the variant). Where 8 won
// (4,096: 768 blocks, 2.9 waves of two an SM) and lost (8,192: 4.4 waves; 2,048: fewer slices)
// points at planning the row split for two blocks an SM before trying it again.
// The next step's first forward in the first layer's pass (FusedBwdParams::next_fwd, phase 5's
// --next-forward). Within a graph of consecutive steps the first layer's pass of step i is the last
// reader and writer of W_0 before step i + 1's gathered forward, a GEMM step 8 kernel of its own
// that reads the same rows of W_0 the pass has just written. Each block of the pass holds a 32-row
// x 64-column sub-tile's new weights in shared memory anyway: it multiplies them by the next
// batch's bytes of its 64 columns (a 32 x 32 x 64 WMMA product) and stores the partial; after its
// last sub-tile the row slice's 13 column tiles hand over once, as one cluster (the slice's sums
// dealt to its ranks' threads, a float4 each, added in tile order) or by a counter (the last to
// arrive adds them all), and apply the forward's epilogue (the bias this pass updated, ReLU,
// dropout). Prediction, before measuring (H100, W2, h = 2,048; the gathered forward 8.04 us alone
// with PDL off, the first layer's pass 11.57, lastpass_2728530/checks_2728530/k/): the pass grows
// by its products and one hand-over, ~2 us; the step loses the forward's launch and its ~7 us of
// fixed cost, ~5 us with PDL (83.10 -> ~78 us, ~1.58x JAX's 123.40); ~5 us at 4,096 and 8,192 too.
// A first form handed over after every sub-tile (a fence, a counter and the last tile's 52 KB of
// partials read back each time): the pass took 23.96 us where it took 11.80 (PDL off, h = 2,048),
// 37.29 where 17.84 at 4,096, and the step grew, 84.53 -> 89.58 us at 2,048
// (logs/nextfwd_0a968ad/first/). Measured, one hand-over a slice (H100,
// nvidia-h100-80gb-hbm3/logs/nextfwd_0a968ad/once_fa6d7e3/, one build, 2 rounds alternating): W2's
// step 49.14 -> 47.06 us at h = 1,024, 84.66 -> 84.77 at 2,048, 215.14 -> 221.18 and 680.16 ->
// 687.08 at 4,096 and 8,192; alone with PDL off the pass 11.71 -> 17.15 us at 2,048: ~1.8 us a
// sub-tile, where PDL had hidden most of the forward's kernel. Phase 5's --next-forward auto takes
// it where a slice holds at most two sub-tiles and every cluster fits at once (h <= 1,024); W2's
// graph step at 1,024 46.54 us against JAX jit-run's 54.12 (phase5_batched__w2-h1024-own.json,
// H100).
// The masters evict-first in L2 (FusedBwdParams::evict_masters, phase 5's --l2-evict). A step reads
// each layer's fp16 copy in its forward and streams the layer's fp32 master through its pass (read
// and written), in the reverse order. Where masters and copies together overflow L2 (50 MB on an
// H100: W2 from h = 2,048), LRU keeps what the passes touched last, masters among it, and the next
// forwards find part of their copies gone. With the masters' copies and stores marked evict-first
// the copies outlast them. Prediction, before measuring (H100): at h = 2,048 the forwards' ~20 MB
// of copies from L2 instead of DRAM, up to ~3 us a step; at 4,096, where one hidden layer's copy
// (34 MB) fits, ~5; nothing at 1,024 (all of it fits) or 8,192 (one copy is 134 MB). Measured (H100,
// nvidia-h100-80gb-hbm3/logs/l2evict_3ce0cb0/, a probe build, 2 rounds alternating, the same
// checksums): 88.38 -> 84.41 us a step at 2,048, 218.88 -> 213.75 at 4,096, 49.20 -> 49.14 at 1,024,
// 681.26 -> 687.56 at 8,192 (there the copies' stores marked evict-last instead won 0.9%, and lost
// 2.9% at 2,048). --l2-evict auto: on where masters and copies overflow L2 and the widest layer's
// copy fits in it (l2_policy.h). Kept (5abc708, off -> auto on another H100, kept_5abc708/): 86.03 ->
// 80.83 us at 2,048, 217.74 -> 212.58 at 4,096; as a kernel instance of its own (31e617a) 79.41 where
// 5abc708 took 81.41 in one call (instance_31e617a/); with the policy made once a thread, not at every
// copy and store (0b39573 against 65ee289, one call, w2onerun_65ee289/): 79.25 -> 77.06 at 2,048,
// 210.72 -> 206.01 at 4,096. In the width sweep (65ee289, every width in one run) W2's graph step is
// 1.57x JAX at 2,048, 1.55x at 4,096, 1.62x at 8,192 (phase5_batched__w2-h<h>-own.json, H100).
#pragma once
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <cstdio>

#include "5a_graph_step.cuh"
#include "mlp/gemm/8_stream_rows.cuh"  // l2_policy_evict_first, cp_async16_hint

namespace nb {
namespace mlp {

constexpr int kFbThreads = 128;        // a pass with a backward-data product
constexpr int kFbThreadsUpdate = 256;  // a pass without one (the first layer): 8 warps, at most 80 registers
constexpr int kFbStages = 4;
constexpr int kFbRows = 32;        // rows (output units) per sub-tile
constexpr int kFbLdZ = kFbRows + 8;  // dZ stage [batch][rows] (fp16)
constexpr int kFbLdH = kBN + 8;      // H [batch][cols], W_old [rows][cols] (fp16)

struct FusedBwdParams {
  int M = 0, N = 0, B = 0;         // W is [M][N] (out x in), batch B <= kBM
  int splits = 1, rows_per_split = kFbRows;
  float* W = nullptr;              // fp32 master
  __half* W16 = nullptr;           // its fp16 copy
  float* mW = nullptr;             // Adam moments (null: SGD)
  float* vW = nullptr;
  float* b = nullptr;
  float* mb = nullptr;
  float* vb = nullptr;
  float* grad_out = nullptr;       // validation only: the gradients applied
  float* bgrad_out = nullptr;
  const __half* dz = nullptr;      // [B][M] this layer's output gradient
  const __half* h = nullptr;       // [B][N] this layer's input (after ReLU/dropout); or:
  const uint8_t* xdata = nullptr;  // first layer: images as bytes, rows chosen by `rows`
  RowMap rows;
  __half* dz_prev = nullptr;       // [B][N] gradient at the input layer's output; null: no dgrad
  float scale = 1.f;               // 1 / (1 - dropout) of the input layer
  bool adam = false;
  float lr = 0.f;
  StepRef step;
  const AdamHyper* hyper = nullptr;
  int64_t hyper_n = 0;
  float* ws = nullptr;             // tiles_n * splits * kBM * kBN floats (splits > 1)
  unsigned* counters = nullptr;    // one per column tile, zero between launches
  // A column tile's row slices as one thread-block cluster, their dA partials added through its
  // shared memory instead of ws and counters (plan_fused_bwd; fb::cluster_handover).
  bool cluster = false;
  // Warps a block of a pass with a backward-data product: 4, or 8 (the card's 8-warp paragraph; a pass without one: 8).
  int warps = 4;
  // The fp32 masters' copies into shared memory and their stores carry an L2 evict-first hint (phase
  // 5's --l2-evict; the card's L2 paragraph): the fp16 copies, which the next step's forwards read,
  // then outlast them in L2.
  bool evict_masters = false;
  // The first layer's pass may run the next step's first forward too (phase 5's --next-forward;
  // fb::next_forward_part, _finish): the next batch's bytes (next_rows of xdata) times each sub-tile's
  // new fp16 weights, a 32 x 32 partial over the block's 64 columns into fws; after its last sub-tile
  // the row slice's column tiles add the partials in tile order (as one cluster, or the last to
  // arrive on fcnt, zero between launches) and apply `next` (the next step's epilogue: this pass's
  // bias, ReLU, dropout, into H_0).
  bool next_fwd = false;
  bool next_cluster = false;  // the column tiles of a row slice as one cluster (launch_fused_bwd's fit)
  RowMap next_rows;
  FwdHiddenEpi<__half> next;
  float* fws = nullptr;      // [tiles_n][kBM][fws_ld()]
  unsigned* fcnt = nullptr;  // one a row slice (the global hand-over)
  __host__ __device__ int tiles_n() const { return (N + kBN - 1) / kBN; }
  __host__ __device__ int fws_ld() const { return (M + kFbRows - 1) / kFbRows * kFbRows; }
  __host__ __device__ int blocks() const { return tiles_n() * splits; }
};

// Shared memory of one block (dynamic; ~60 KB).
struct FbSmem {
  float w[kFbStages][kFbRows][kBN];   // staged fp32 master rows
  __half z[kFbStages][kBM][kFbLdZ];   // staged dZ columns of the same rows
  __half hs[kBM][kFbLdH];             // H tile (B operand of dW), loaded once
  __half wo[kFbRows][kFbLdH];         // old weights in fp16 (B operand of dA)
  float c[kBM * kLdc];                // dW tile, later the dA partial
};
// Blocks resident on an SM: its shared memory holds three (the row split plans whole waves of them).
constexpr int kFbBlocksPerSm = 3;
static_assert(kFbBlocksPerSm * (sizeof(FbSmem) + 1024) <= 228 * 1024 &&
                  (kFbBlocksPerSm + 1) * (sizeof(FbSmem) + 1024) > 228 * 1024,
              "an H100/H200 SM's 228 KB of shared memory (1 KB a block reserved) holds kFbBlocksPerSm blocks");

// The next batch's bytes of a first-layer pass's tile (fb::next_forward_part), after FbSmem: fp16 integers, exact.
struct FbNextSmem {
  __half xs[kBM][kFbLdH];
};
static_assert(sizeof(FbSmem) % 128 == 0, "FbNextSmem starts 128-byte aligned");
static_assert(kFbBlocksPerSm * (sizeof(FbSmem) + sizeof(FbNextSmem) + 1024) <= 228 * 1024,
              "a first-layer pass with the next forward keeps three blocks an SM");
inline size_t fused_bwd_smem(const FusedBwdParams& p) { return sizeof(FbSmem) + (p.next_fwd ? sizeof(FbNextSmem) : 0); }
inline size_t fused_next_ws_floats(const FusedBwdParams& p) {
  return static_cast<size_t>(p.tiles_n()) * kBM * p.fws_ld();
}

inline size_t fused_bwd_ws_floats(const FusedBwdParams& p) {
  return p.splits > 1 && p.dz_prev != nullptr ? static_cast<size_t>(p.tiles_n()) * p.splits * kBM * kBN : 0;
}

// Rows split into whole waves of resident blocks (kFbBlocksPerSm an SM), each split a whole number
// of sub-tiles. With a backward-data product the fix-up's partials cap the splits at 16: the most
// waves (3, 2 or 1) that stay within it, else 16 (a small layer: fewer blocks than one wave). The
// first layer (no backward-data product, no fix-up; 784 columns are only 13 tiles): one wave.
// (About 8 blocks an SM, the split before, left a partial wave: 1.29 waves at h = 2,048, 2.59 at
// 4,096, 2.1 waves of one-sub-tile blocks for the first layer at 2,048; what the change bought: the
// card above. One wave at 8,192, 3 slices of 86 sub-tiles, was 8% slower than three.) Set dz_prev
// before planning.
// cluster (sm_90; phase 5's --handover cluster): a column tile's 2 ... 16 slices of a pass with a
// backward-data product as one cluster (launch_fused_bwd takes fewer, longer slices where the GPU
// cannot hold every cluster at once), where the plan is one wave. A plan of two or three waves keeps
// the global hand-over: re-planned until its clusters fit, its blocks fell to part of a wave and the
// pass slowed (H100, W2's step 218.01 -> 227.66 us at h = 4,096 with 5 slices for 12, 678.24 ->
// 812.45 at 8,192 with 2 for 9; nvidia-h100-80gb-hbm3/logs/handover_30c7108/fused_ac5c4f9/).
constexpr int kFbMaxCluster = 16;  // (a non-portable cluster size: H100 and H200 allow it)
inline void plan_fused_bwd(FusedBwdParams& p, int sm_count, bool cluster = false) {
  const int subs = (p.M + kFbRows - 1) / kFbRows;
  const int slots = kFbBlocksPerSm * sm_count, tiles = p.tiles_n();
  int s = slots / tiles;
  if (p.dz_prev != nullptr) {
    s = 16;
    for (int w = 3; w >= 1; --w) {
      if (w * slots / tiles <= 16) {
        s = w * slots / tiles;
        break;
      }
    }
  }
  s = s < subs ? s : subs;
  if (s < 1) s = 1;
  const int per = (subs + s - 1) / s;
  p.splits = (subs + per - 1) / per;
  p.rows_per_split = per * kFbRows;
  p.cluster = cluster && p.dz_prev != nullptr && p.splits > 1 && p.splits <= kFbMaxCluster && p.blocks() <= slots;
}

// Whether the fused kernel can run this layer (else the trainer keeps the paired kernels).
inline bool fused_bwd_supported(int N, int B) { return B >= 1 && B <= kBM && N % 8 == 0; }

namespace fb {

// A column tile's dA partials, one 32 x 64 tile in each slice's sm.c, as one cluster (p.cluster):
// after one cluster barrier the blocks of rank r < 4 each add 8 of the tile's rows over every
// slice, read through distributed shared memory in slice order (splitk_fixup's order: the same
// sums, bit for bit), and store those rows' dZ_prev (BwdReluEpi's ReLU' and dropout scale). The
// global hand-over (splitk_fixup) stores every partial, fences, counts on an atomic, and the last
// block reads them all back from L2 and stores all 32 rows. Prediction, before measuring (H100; GEMM
// step 8's cluster hand-over took 2.7 us off its staged hidden forward at h = 2,048, the step 8
// slices' global hand-over ~3 us from the loop's end to the partials summed in its stamps): ~2 us
// off each hidden layer's pass, W2's step ~4 us shorter at h = 2,048, 4,096 and 8,192.
// Measured (H100, nvidia-h100-80gb-hbm3/logs/handover_30c7108/fused_ac5c4f9/, 2 rounds alternating,
// both hand-overs of GEMM step 8 in cluster form): W2's step 58.91 -> 49.34 us at h = 1,024 (16
// slices) and 97.55 -> 86.78 at 2,048 (8 slices for 11: 32 clusters of 11 do not fit), where step
// 8's clusters alone had taken 4.5 and 7.8 off; but 218.01 -> 227.66 at 4,096 and 678.24 -> 812.45
// at 8,192, where the plan's two or three waves re-planned into clusters that fit (5 slices for 12, 2
// for 9) leave part of a wave idle: plan_fused_bwd asks for clusters only where its plan is one wave.
template <int kThreads, class P, class Smem>
__device__ __forceinline__ void cluster_handover(const P& p, Smem& sm, int n0, int rank) {
  constexpr int kRowsRank = kThreads * 4 / kBN;  // 8 (4 warps) or 16 (8 warps): one float4 a thread a slice
  static_assert(kRowsRank * kBN == 4 * kThreads && kBM % kRowsRank == 0, "whole rows a rank");
  const int ranks = min(p.splits, kBM / kRowsRank);
  float* sum = &sm.w[0][0][0];  // (the stages are dead: the loop waited for every copy)
  const int r = threadIdx.x / (kBN / 4), c = (threadIdx.x % (kBN / 4)) * 4;
  sr_cluster_arrive_release();  // this slice's partial is in sm.c ...
  sr_cluster_wait();            // ... and every other slice's
  if (rank < ranks) {
    const float* src = sm.c + (rank * kRowsRank + r) * kLdc + c;
    float4 v[kFbMaxCluster];
#pragma unroll
    for (int z = 0; z < kFbMaxCluster; ++z) v[z] = z < p.splits ? sr_dsmem_f4(src, z) : make_float4(0.f, 0.f, 0.f, 0.f);
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int z = 0; z < kFbMaxCluster; ++z)
      if (z < p.splits) s.x += v[z].x, s.y += v[z].y, s.z += v[z].z, s.w += v[z].w;
    *reinterpret_cast<float4*>(&sum[r * kLdc + c]) = s;
  }
  sr_cluster_arrive_relaxed();  // done reading the other blocks' shared memory
  if (rank < ranks) {
    __syncthreads();
    BwdReluEpi<__half> e;
    e.h = p.h, e.dz = p.dz_prev, e.scale = p.scale;
    e.store_relu<kThreads>(sum, rank * kRowsRank, n0, min(p.B, (rank + 1) * kRowsRank), p.N);
  }
  sr_cluster_wait();  // no block leaves while another may still read its partial
}

__device__ __forceinline__ bool al16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The masters' L2 hint (FusedBwdParams::evict_masters): step 8's evict-first policy
// (l2_policy_evict_first, made once a thread) on their 16-byte cp.async copies (cp_async16_hint) and
// on a 16-byte store.
__device__ __forceinline__ void st_f4_l2(float* p, const float (&v)[4], uint64_t pol) {
  asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "f"(v[0]), "f"(v[1]), "f"(v[2]),
               "f"(v[3]), "l"(pol)
               : "memory");
}

// Sub-tile i of the block's rows into stage s: 32 rows x 64 fp32 weights (load_stage_w), dZ[0..B)
// [those rows] (load_stage_z). Chunks wholly inside the matrix go by 16-byte cp.async, edge chunks
// element by element (zeros outside): both are visible after the consumer's wait + barrier.
template <int kThreads, bool kEvict = false>
__device__ __forceinline__ void load_stage_w(const FusedBwdParams& p, FbSmem& sm, int s, int m0, int mend, int n0,
                                             bool vec_w, uint64_t pol = 0) {
  const int t = threadIdx.x;
#pragma unroll
  for (int j = 0; j < kFbRows * kBN / 4 / kThreads; ++j) {
    const int c = t + j * kThreads, r = c / (kBN / 4), q = (c % (kBN / 4)) * 4;
    const int m = m0 + r, n = n0 + q;
    float* dst = &sm.w[s][r][q];
    const float* src = p.W + static_cast<size_t>(m) * p.N + n;
    if (vec_w && m < mend && n + 4 <= p.N) {
      if constexpr (kEvict) cp_async16_hint(dst, src, pol);
      else __pipeline_memcpy_async(dst, src, 16);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) dst[e] = (m < mend && n + e < p.N) ? src[e] : 0.f;
    }
  }
}
__device__ __forceinline__ void load_stage_z(const FusedBwdParams& p, FbSmem& sm, int s, int m0, int mend, bool vec_z) {
  const int t = threadIdx.x;
  if (t < kBM * (kFbRows / 8)) {  // kBM x 32 halves: one 8-half chunk for each of the first 128 threads
    const int b = t / (kFbRows / 8), q = (t % (kFbRows / 8)) * 8, m = m0 + q;
    __half* dst = &sm.z[s][b][q];
    const __half* src = p.dz + static_cast<size_t>(b) * p.M + m;
    if (vec_z && b < p.B && m + 8 <= mend) {
      __pipeline_memcpy_async(dst, src, 16);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = (b < p.B && m + e < mend) ? src[e] : __float2half_rn(0.f);
    }
  }
}

// H tile [kBM][64] (fp16): from the previous layer's output, or gathered from the byte images.
template <int kThreads>
__device__ __forceinline__ void load_h(const FusedBwdParams& p, FbSmem& sm, int n0) {
  for (int c = threadIdx.x; c < kBM * (kBN / 8); c += kThreads) {
    const int b = c / (kBN / 8), q = (c % (kBN / 8)) * 8, n = n0 + q;
    __half* dst = &sm.hs[b][q];
    if (p.xdata != nullptr) {
      const uint8_t* src = p.xdata + static_cast<size_t>(b < p.B ? p.rows.image(b) : 0) * p.N + n;
      uint8_t px[8];
      if (b < p.B && n + 8 <= p.N) {  // N % 8 == 0: 8 aligned bytes
        *reinterpret_cast<uint2*>(px) = __ldg(reinterpret_cast<const uint2*>(src));
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) px[e] = (b < p.B && n + e < p.N) ? src[e] : 0;
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = __float2half_rn(static_cast<float>(px[e]) / 255.0f);
    } else {
      const __half* src = p.h + static_cast<size_t>(b) * p.N + n;
      if (b < p.B && n + 8 <= p.N && al16(src)) {
        __pipeline_memcpy_async(dst, src, 16);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) dst[e] = (b < p.B && n + e < p.N) ? src[e] : __float2half_rn(0.f);
      }
    }
  }
}

// The next batch's bytes of the tile's 64 columns into xs as fp16 integers (exact below 2^11; the
// sums are divided by 255 once, as GEMM step 8's gathered forward divides them); rows past the batch zero.
template <int kThreads>
__device__ __forceinline__ void load_next_x(const FusedBwdParams& p, FbNextSmem& nx, int n0) {
  for (int c = threadIdx.x; c < kBM * (kBN / 8); c += kThreads) {
    const int b = c / (kBN / 8), q = (c % (kBN / 8)) * 8, n = n0 + q;
    uint8_t px[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (b < p.B) {
      const uint8_t* src = p.xdata + static_cast<size_t>(p.next_rows.image(b)) * p.N + n;
      if (n + 8 <= p.N) {  // N % 8 == 0: 8 aligned bytes
        *reinterpret_cast<uint2*>(px) = __ldg(reinterpret_cast<const uint2*>(src));
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) px[e] = n + e < p.N ? src[e] : 0;
      }
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) nx.xs[b][q + e] = __ushort2half_rn(px[e]);
  }
}

// Sub-tile m0's share of the next step's first forward (p.next_fwd): Z'(b, m) over the tile's 64
// columns = the next batch's bytes (nx.xs) times the sub-tile's new weights (sm.wo, fp16 as W16 holds
// them), one 16 x 16 WMMA tile on each of warps 0-3, stored to the column tile's slot of fws (no
// fence here: the slice hands its sub-tiles over once, next_forward_finish).
__device__ __forceinline__ void next_forward_part(const FusedBwdParams& p, const FbSmem& sm, const FbNextSmem& nx,
                                                  int tn, int m0) {
  namespace w = nvcuda::wmma;
  const int warp = threadIdx.x / 32, ld = p.fws_ld();
  __syncthreads();  // every thread's new weights in sm.wo
  if (warp >= 4) return;
  const int bi = warp >> 1, mj = warp & 1;
  w::fragment<w::accumulator, 16, 16, 16, float> acc;
  w::fill_fragment(acc, 0.f);
#pragma unroll
  for (int kk = 0; kk < kBN; kk += 16) {
    w::fragment<w::matrix_a, 16, 16, 16, __half, w::row_major> a;  // A(b, k) = xs[b][k]
    w::load_matrix_sync(a, &nx.xs[16 * bi][kk], kFbLdH);
    w::fragment<w::matrix_b, 16, 16, 16, __half, w::col_major> bf;  // B(k, m) = wo[m][k]
    w::load_matrix_sync(bf, &sm.wo[16 * mj][kk], kFbLdH);
    w::mma_sync(acc, a, bf, acc);
  }
  w::store_matrix_sync(p.fws + (static_cast<size_t>(tn) * kBM + 16 * bi) * ld + m0 + 16 * mj, acc, ld, w::mem_row_major);
}

// The slice's hand-over (rows mbeg .. mend), after its last sub-tile: the column tiles' partials of
// every sub-tile added in tile order (the same sums whoever adds them), divided by 255, and the next
// step's epilogue applied (the bias this pass updated, by column tile 0 before the hand-over; ReLU;
// dropout). p.next_cluster: the slice's column tiles are one cluster (rank = column tile); after one
// cluster barrier the slice's float4 outputs are dealt to the ranks' threads in rank order (float4 i
// to rank i / kThreads mod tiles_n: at h = 2,048, 768 of them to ranks 0-2, one each). Else one fence
// and a counter a slice: the last column tile to arrive adds them all.
template <int kThreads>
__device__ void next_forward_finish(const FusedBwdParams& p, int tn, int split, int mbeg, int mend) {
  const int ld = p.fws_ld(), tiles = p.tiles_n();
  int part = 0, parts = 1;
  if (p.next_cluster) {
    sr_cluster_arrive_release();  // this column tile's partials are stored ...
    sr_cluster_wait();            // ... and every other's
    part = tn, parts = tiles;
  } else if (!splitk_arrive_last(p.fcnt + split, tiles)) {
    return;
  }
  const FwdHiddenEpi<__half>& e = p.next;
  const uint64_t st = e.dropout ? static_cast<uint64_t>(e.step.get()) : 0;
  constexpr int kSub4 = kBM * kFbRows / 4;  // float4 outputs of a sub-tile
  const int n4 = (mend - mbeg + kFbRows - 1) / kFbRows * kSub4;
  for (int i = part * kThreads + threadIdx.x; i < n4; i += parts * kThreads) {
    const int e4 = i % kSub4, b = e4 / (kFbRows / 4), c = (e4 % (kFbRows / 4)) * 4;
    const int m0 = mbeg + (i / kSub4) * kFbRows;
    if (b >= p.B) continue;
    const float* src = p.fws + static_cast<size_t>(b) * ld + m0 + c;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int z0 = 0; z0 < tiles; z0 += kFbMaxCluster) {  // (16 loads in flight, added in tile order)
      float4 v[kFbMaxCluster];
#pragma unroll
      for (int z = 0; z < kFbMaxCluster; ++z)
        v[z] = z0 + z < tiles ? __ldcg(reinterpret_cast<const float4*>(src + static_cast<size_t>(z0 + z) * kBM * ld))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int z = 0; z < kFbMaxCluster; ++z)
        if (z0 + z < tiles) s.x += v[z].x, s.y += v[z].y, s.z += v[z].z, s.w += v[z].w;
    }
    const float sv[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int m = m0 + c + j;
      if (m >= mend) break;
      float v = fmaxf(over_255(sv[j]) + __ldcg(e.bias + m), 0.f);
      if (e.dropout)
        v = dropout_bits_dev(e.key, e.layer, st, static_cast<uint32_t>(b * p.M + m)) >= e.threshold ? v * e.scale : 0.f;
      e.out[static_cast<size_t>(b) * p.M + m] = __float2half_rn(v);
    }
  }
  if (!p.next_cluster && threadIdx.x == 0) p.fcnt[split] = 0u;  // ready for the next launch
}

}  // namespace fb

// kDgrad: the instance has the backward-data product (an 8-warp block with it needs more than the 80
// registers three blocks an SM allow: two an SM; the card). kEvict: the masters' L2 hint
// (FusedBwdParams::evict_masters) compiled in; an instance of its own, so that the kernel without it
// stays the code it was (with a run-time test, W2's step at h = 128 and 1,024 ran ~3% slower).
template <class Tag, int kThreads, bool kDgrad = kThreads == kFbThreads, bool kEvict = false>
__global__ void __launch_bounds__(kThreads, kThreads == kFbThreads ? 1 : kDgrad ? 2 : kFbBlocksPerSm)
    fused_update_bwd_kernel(FusedBwdParams p) {
  // kThreads == kFbThreads: 4 warps, each 16 rows x 32 columns of the tile (dW and dA); kFbThreadsUpdate:
  // 8 warps, 16 x 16 each, twice the warps an SM to issue the update (a pass without backward-data
  // product always; with one where p.warps == 8).
  constexpr int kWarpsN = kThreads / 32 / 2, kTpw = kBN / 16 / kWarpsN;  // warps along n, 16-col tiles a warp
  constexpr int kRowsPerPass = kThreads / kQuads;                          // optimizer rows a pass of threads
  static_assert(kThreads == kFbThreads || kThreads == kFbThreadsUpdate, "the two block sizes");
  namespace w = nvcuda::wmma;
  extern __shared__ __align__(128) unsigned char fb_raw[];
  FbSmem& sm = *reinterpret_cast<FbSmem*>(fb_raw);
  FbNextSmem& nx = *reinterpret_cast<FbNextSmem*>(fb_raw + sizeof(FbSmem));  // (p.next_fwd only)
  const int tiles_n = p.tiles_n();
  // (p.cluster: a tile's slices are consecutive blocks, one cluster, slice = the block's rank in it)
  const int tn = p.cluster ? blockIdx.x / p.splits : blockIdx.x % tiles_n;
  const int split = p.cluster ? blockIdx.x % p.splits : blockIdx.x / tiles_n;
  const int n0 = tn * kBN;
  const int mbeg = split * p.rows_per_split, mend = min(p.M, mbeg + p.rows_per_split);
  const int nsub = (mend - mbeg + kFbRows - 1) / kFbRows;
  const int t = threadIdx.x, warp = t / 32, wm = warp / kWarpsN, wn = warp % kWarpsN;
  const bool vec_w = (p.N % 4 == 0) && fb::al16(p.W);
  const bool vec_z = (p.M % 8 == 0) && fb::al16(p.dz);
  const bool vec_o = (p.N % 4 == 0) && fb::al16(p.W) && (p.W16 == nullptr || fb::al16(p.W16)) &&
                     (p.mW == nullptr || (fb::al16(p.mW) && fb::al16(p.vW)));
  const bool dgrad = kDgrad && p.dz_prev != nullptr;
  uint64_t pol = 0;  // the hinted instance's L2 policy, made once a thread
  if constexpr (kEvict) pol = l2_policy_evict_first();

  // The first weight sub-tiles go out before the PDL wait (see pdl_wait): only this kernel
  // writes this layer's master weights, one step earlier. dZ comes from the kernel just before.
#pragma unroll
  for (int i = 0; i < kFbStages - 1; ++i)
    if (i < nsub) fb::load_stage_w<kThreads, kEvict>(p, sm, i, mbeg + i * kFbRows, mend, n0, vec_w, pol);
  pdl_wait();
  pdl_launch_dependents();
  if (p.adam && t == 0) {
    const int64_t st = p.step.get() + 1;
    smem_adam() = (p.hyper != nullptr && st < p.hyper_n) ? p.hyper[st] : adam_hyper(p.lr, st);
  }
  fb::load_h<kThreads>(p, sm, n0);  // in the first cp.async group
  if (!kDgrad && p.next_fwd) fb::load_next_x<kThreads>(p, nx, n0);
#pragma unroll
  for (int i = 0; i < kFbStages - 1; ++i) {
    if (i < nsub) fb::load_stage_z(p, sm, i, mbeg + i * kFbRows, mend, vec_z);
    __pipeline_commit();  // group i: sub-tile i's dZ (group 0 also H and every prologue weight tile)
  }

  w::fragment<w::accumulator, 16, 16, 16, float> da[kTpw];
#pragma unroll
  for (int j = 0; j < kTpw; ++j) w::fill_fragment(da[j], 0.f);
  const int q = (t % kQuads) * 4, n = n0 + q, valid = min(4, p.N - n);

  // The bias (blocks of the first column tile, the last warp): db[m] = the sum over the batch of the
  // sub-tile's staged dZ column m, in batch order, read where it waits in shared memory anyway; the
  // bias and its moments are loaded at the top of the sub-tile, their latency behind the dW product.
  const int br = t - (kThreads - kFbRows);
  const bool bias_lane = tn == 0 && br >= 0;
  for (int i = 0; i < nsub; ++i) {
    const int s = i % kFbStages, m0 = mbeg + i * kFbRows;
    const bool bias_row = bias_lane && m0 + br < mend;
    float pb = 0.f, mbi = 0.f, vbi = 0.f;
    if (bias_row) {
      pb = p.b[m0 + br];
      if (p.adam) mbi = p.mb[m0 + br], vbi = p.vb[m0 + br];
    }
    __pipeline_wait_prior(kFbStages - 2);
    __syncthreads();
    if (i + kFbStages - 1 < nsub) {
      const int sn = (i + kFbStages - 1) % kFbStages, mn = m0 + (kFbStages - 1) * kFbRows;
      fb::load_stage_w<kThreads, kEvict>(p, sm, sn, mn, mend, n0, vec_w, pol);
      fb::load_stage_z(p, sm, sn, mn, mend, vec_z);
    }
    __pipeline_commit();

    // 1. dW = dZ^T · H: warp (wm, wn) -> rows 16wm.., columns 16 kTpw wn..
    {
      w::fragment<w::accumulator, 16, 16, 16, float> g[kTpw];
#pragma unroll
      for (int j = 0; j < kTpw; ++j) w::fill_fragment(g[j], 0.f);
#pragma unroll
      for (int kk = 0; kk < kBM; kk += 16) {
        w::fragment<w::matrix_a, 16, 16, 16, __half, w::col_major> a;  // A(m, b) = z[b][m]
        w::load_matrix_sync(a, &sm.z[s][kk][16 * wm], kFbLdZ);
#pragma unroll
        for (int j = 0; j < kTpw; ++j) {
          w::fragment<w::matrix_b, 16, 16, 16, __half, w::row_major> bf;
          w::load_matrix_sync(bf, &sm.hs[kk][16 * (kTpw * wn + j)], kFbLdH);
          w::mma_sync(g[j], a, bf, g[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < kTpw; ++j)
        w::store_matrix_sync(&sm.c[(16 * wm) * kLdc + 16 * (kTpw * wn + j)], g[j], kLdc, w::mem_row_major);
    }
    if (bias_row) {
      const int m = m0 + br;
      float g = 0.f;
      for (int b = 0; b < p.B; ++b) g += __half2float(sm.z[s][b][br]);
      if (p.adam) {
        adam_apply(pb, g, mbi, vbi, smem_adam());
        p.mb[m] = mbi, p.vb[m] = vbi;
      } else {
        pb -= p.lr * g;
      }
      p.b[m] = pb;
      if (p.bgrad_out) p.bgrad_out[m] = g;
    }
    __syncthreads();

    // 2. The optimizer on 4 rows (2 in an 8-warp block) x 4 columns per thread; the old weights into sm.wo
    // as fp16.
    const AdamHyper hy = p.adam ? smem_adam() : AdamHyper{};
#pragma unroll
    for (int k = 0; k < kFbRows / kRowsPerPass; ++k) {
      const int r = t / kQuads + k * kRowsPerPass, m = m0 + r;
      const float4 wv = *reinterpret_cast<const float4*>(&sm.w[s][r][q]);
      float wf[4] = {wv.x, wv.y, wv.z, wv.w};
      if (dgrad) {
        __half2* wo = reinterpret_cast<__half2*>(&sm.wo[r][q]);
        wo[0] = __floats2half2_rn(wf[0], wf[1]);
        wo[1] = __floats2half2_rn(wf[2], wf[3]);
      }
      if (m >= mend || valid <= 0) {
        if (!kDgrad && p.next_fwd) {  // (no weight there: zeros for the next forward)
          __half2* wn = reinterpret_cast<__half2*>(&sm.wo[r][q]);
          wn[0] = wn[1] = __floats2half2_rn(0.f, 0.f);
        }
        continue;
      }
      const size_t idx = static_cast<size_t>(m) * p.N + n;
      float g[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) g[j] = sm.c[r * kLdc + q + j];
      if (p.adam) {
        float mm[4], vv[4];
        load4(p.mW + idx, vec_o, valid, mm);
        load4(p.vW + idx, vec_o, valid, vv);
#pragma unroll
        for (int j = 0; j < 4; ++j) adam_apply(wf[j], g[j], mm[j], vv[j], hy);
        store4(p.mW + idx, vec_o, valid, mm);
        store4(p.vW + idx, vec_o, valid, vv);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) wf[j] -= p.lr * g[j];
      }
      if (kEvict && vec_o && valid == 4) fb::st_f4_l2(p.W + idx, wf, pol);
      else store4(p.W + idx, vec_o, valid, wf);
      if (p.W16) store4(p.W16 + idx, vec_o, valid, wf);
      if (p.grad_out) store4(p.grad_out + idx, false, valid, g);
      if (!kDgrad && p.next_fwd) {  // the new weights as W16 holds them, for the next forward
        __half2* wn = reinterpret_cast<__half2*>(&sm.wo[r][q]);
        wn[0] = __floats2half2_rn(wf[0], valid > 1 ? wf[1] : 0.f);
        wn[1] = __floats2half2_rn(valid > 2 ? wf[2] : 0.f, valid > 3 ? wf[3] : 0.f);
      }
    }
    if (!kDgrad && p.next_fwd) fb::next_forward_part(p, sm, nx, tn, m0);
    if (!dgrad) continue;
    __syncthreads();

    // 3. dA += dZ · W_old: warp (wm, wn) -> batch rows 16wm.., columns 16 kTpw wn.. (as dW's)
#pragma unroll
    for (int kk = 0; kk < kFbRows; kk += 16) {
      w::fragment<w::matrix_a, 16, 16, 16, __half, w::row_major> a;  // A(b, m) = z[b][m]
      w::load_matrix_sync(a, &sm.z[s][16 * wm][kk], kFbLdZ);
#pragma unroll
      for (int j = 0; j < kTpw; ++j) {
        w::fragment<w::matrix_b, 16, 16, 16, __half, w::row_major> bf;
        w::load_matrix_sync(bf, &sm.wo[kk][16 * (kTpw * wn + j)], kFbLdH);
        w::mma_sync(da[j], a, bf, da[j]);
      }
    }
  }
  __pipeline_wait_prior(0);
  if (!kDgrad && p.next_fwd) fb::next_forward_finish<kThreads>(p, tn, split, mbeg, mend);

  if (!dgrad) return;

  // dA partial -> sm.c (free: the last sub-tile's optimizer pass is behind a barrier).
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kTpw; ++j)
    w::store_matrix_sync(&sm.c[(16 * wm) * kLdc + 16 * (kTpw * wn + j)], da[j], kLdc, w::mem_row_major);
  __syncthreads();
  if (p.cluster) {
    fb::cluster_handover<kThreads>(p, sm, n0, split);
    return;
  }
  if (p.splits > 1 && !splitk_fixup<kThreads, true>(sm.c, p.ws, p.counters, tn, split, p.splits)) return;
  BwdReluEpi<__half> e;
  e.h = p.h, e.dz = p.dz_prev, e.scale = p.scale;
  e.run<kThreads>(sm.c, 0, n0, p.B, p.N);
}

// Once per process, before any launch (and before graph capture): the kernel's ~60 KB of
// dynamic shared memory needs the opt-in.
template <class Tag>
inline void fused_bwd_setup() {
  CUDA_CHECK(cudaFuncSetAttribute(fused_update_bwd_kernel<Tag, kFbThreads>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sizeof(FbSmem))));
  CUDA_CHECK(cudaFuncSetAttribute(fused_update_bwd_kernel<Tag, kFbThreadsUpdate>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(sizeof(FbSmem) + sizeof(FbNextSmem))));
  CUDA_CHECK(cudaFuncSetAttribute(fused_update_bwd_kernel<Tag, kFbThreadsUpdate, true>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sizeof(FbSmem))));
  CUDA_CHECK(cudaFuncSetAttribute(fused_update_bwd_kernel<Tag, kFbThreads, true, true>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sizeof(FbSmem))));
  CUDA_CHECK(cudaFuncSetAttribute(fused_update_bwd_kernel<Tag, kFbThreadsUpdate, false, true>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(sizeof(FbSmem) + sizeof(FbNextSmem))));
  CUDA_CHECK(cudaFuncSetAttribute(fused_update_bwd_kernel<Tag, kFbThreadsUpdate, true, true>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sizeof(FbSmem))));
}

namespace fb {
// Clusters of `cluster` blocks of kernel k (grid `blocks` x `threads`, `smem` bytes) the GPU holds
// at once (sizes above 8 allowed first); 0 where it refuses the size or none fits.
inline int clusters_held(void (*k)(FusedBwdParams), int cluster, int blocks, int threads, size_t smem) {
  if (cluster > 8) CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
  cfg.gridDim = dim3(static_cast<unsigned>(blocks)), cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem, cfg.attrs = &attr, cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, k, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();  // (a cluster size the GPU refuses: none of it fits)
    n = 0;
  }
  return n;
}
}  // namespace fb

// The plan launch_fused_bwd launches for p: p, or where p's clusters do not all fit the GPU at once
// (clusters of 11 slices of blocks that fill an SM three at a time, at h = 2,048, depend on how the
// SMs fall into GPCs), fewer, longer slices (whole sub-tiles) until they do; none fits: the global
// hand-over. Noted once on stderr.
template <class Tag>
inline FusedBwdParams fused_bwd_launched(const FusedBwdParams& p) {
  if (!p.cluster) return p;
  const auto k = p.warps == 8 ? fused_update_bwd_kernel<Tag, kFbThreadsUpdate, true> : fused_update_bwd_kernel<Tag, kFbThreads>;
  static int held[2][kFbMaxCluster + 1] = {};  // clusters the GPU holds at once, + 1 (0: not asked yet), by block size
  static bool noted = false;
  auto fits = [&](const FusedBwdParams& q) {
    int& h = held[q.warps == 8][q.splits];
    if (h == 0) h = fb::clusters_held(k, q.splits, q.blocks(), 32 * q.warps, sizeof(FbSmem)) + 1;
    return h - 1 >= q.tiles_n();
  };
  FusedBwdParams q = p;
  const int subs = (p.M + kFbRows - 1) / kFbRows;
  while (q.splits > 1 && !fits(q)) {
    const int per = (subs + q.splits - 2) / (q.splits - 1);  // at most splits - 1 slices, whole sub-tiles
    q.splits = (subs + per - 1) / per;
    q.rows_per_split = per * kFbRows;
  }
  if (q.splits != p.splits && !noted) {
    noted = true;
    if (q.splits > 1)
      std::fprintf(stderr, "note: fused backward pass (%d x %d): %d clusters of %d slices do not fit this GPU at once; %d slices a tile\n",
                   p.M, p.N, p.tiles_n(), p.splits, q.splits);
    else
      std::fprintf(stderr, "note: fused backward pass (%d x %d): no cluster of its slices fits this GPU; they hand over through global memory\n",
                   p.M, p.N);
  }
  if (q.splits < 2) {
    q = p;
    q.cluster = false;
  }
  return q;
}

// How many clusters of a first-layer pass's column tiles (p with next_fwd; 2 ... 16 tiles, sm_90)
// the GPU holds at once: 0 where none fits (the next forward then hands over by a counter a slice).
template <class Tag>
inline int fused_next_clusters(const FusedBwdParams& p) {
  const int tiles = p.tiles_n();
  if (tiles < 2 || tiles > kFbMaxCluster) return 0;
  return fb::clusters_held(fused_update_bwd_kernel<Tag, kFbThreadsUpdate>, tiles, p.blocks(), kFbThreadsUpdate,
                           fused_bwd_smem(p));
}

// A pass without backward-data product runs 8-warp blocks; one with it, p.warps (4 or 8); each the
// instance with the masters' L2 hint where p.evict_masters.
template <class Tag, int kThreads, bool kDgrad>
inline void launch_fused_instance(const FusedBwdParams& q, size_t smem, cudaStream_t st, const LaunchOpts& o) {
  if (q.evict_masters)
    launch_kernel(fused_update_bwd_kernel<Tag, kThreads, kDgrad, true>, q.blocks(), kThreads, smem, st, o, q);
  else
    launch_kernel(fused_update_bwd_kernel<Tag, kThreads, kDgrad>, q.blocks(), kThreads, smem, st, o, q);
}
template <class Tag>
inline void launch_fused_bwd(const FusedBwdParams& p, cudaStream_t st, bool pdl = false) {
  if (p.M <= 0 || p.N <= 0) return;
  if (p.dz_prev == nullptr) {  // (the next forward's cluster: a row slice's column tiles, consecutive blocks)
    const LaunchOpts o{pdl, nullptr, p.next_fwd && p.next_cluster ? static_cast<unsigned>(p.tiles_n()) : 0u};
    launch_fused_instance<Tag, kFbThreadsUpdate, false>(p, fused_bwd_smem(p), st, o);
    return;
  }
  const FusedBwdParams q = fused_bwd_launched<Tag>(p);
  const LaunchOpts o{pdl, nullptr, q.cluster ? static_cast<unsigned>(q.splits) : 0u};
  if (q.warps == 8) launch_fused_instance<Tag, kFbThreadsUpdate, true>(q, sizeof(FbSmem), st, o);
  else launch_fused_instance<Tag, kFbThreads, true>(q, sizeof(FbSmem), st, o);
}

// ------------------------------------------------------------------ the last layer's pass in softmax-CE's cluster
// The last layer (C <= 16 classes over K = the last hidden width) is the step's smallest pass, 10 x K
// weights, yet a kernel of its own: a launch, its first loads, and dZ_last read back from memory.
// Where softmax-CE runs on step 8's narrow kernel with its K slices as one cluster, the pass becomes
// that kernel's cluster tail (SrClusterTail, 8_stream_rows.cuh): once the slice of rank 0 has the
// logits summed and dZ_last = (softmax - onehot) / B stored, every slice copies dZ_last (32 x C) from
// it and runs the pass over its own K range, the columns of the last layer's W whose products it
// has just computed:
//   dW (C x its columns) = dZ^T · H        mma.sync m16n8k16, k = the batch in two steps of 16
//   W -= lr dW (or Adam), its fp16 copy, the bias (the slice of rank 0)
//   dA (B x its columns) = dZ · W_old      mma.sync m16n8k16, k = the classes
//   dZ_prev = dA * (H > 0) * scale         as BwdReluEpi
// in the same arithmetic as fused_update_bwd_kernel's pass over that layer (a single row slice there:
// the same MMAs over the same k positions, the same update expressions): the same bits, which
// tests/gpu/test_mlp_fused_backward.cu compares. The slice's H columns and fp32 master weights,
// 128 columns at a time, come by cp.async, the first 128 issued before the slice's own loads.
// Prediction, before measuring (H100, W2; the last layer's pass took ~8.8 us alone at h = 4,096 under
// Nsight Compute, nvidia-h100-80gb-hbm3/logs/sweep_d9fc1ae/b/ncu/fb-h4096.txt, and softmax-CE's global
// hand-over ~1.5 us from a slice's partial stored to the last block found, stamped at h = 2,048):
// a launch and ~4 us of the pass leave the step, the tail adds ~1 us to softmax-CE, its DSMEM
// hand-over takes ~1 us off: W2's step ~3-5 us shorter at every width from 1,024 (where softmax-CE
// runs on step 8) to 8,192, h = 2,048 86.05 -> ~82 us.
// Measured (H100, nvidia-h100-80gb-hbm3/logs/lastpass_2728530/checks_2728530/, one build, --last-pass
// kernel -> tail, 2 rounds alternating, the same checksums): W2's step 49.46 -> 48.41 / 85.69 ->
// 83.46 us at h = 1,024 / 2,048, but 212.77 -> 214.05 / 673.86 -> 677.63 at 4,096 / 8,192. Alone
// (PDL off, h = 2,048) the tail costs softmax-CE 3.1 us (6.14 -> 9.28) where the pass of its own
// took ~6.7: a third of the prediction's ~1 us was the tail, the rest its chain of dependent steps
// (the softmax rows, the two products, a barrier between them, the stores drained at the end).
// Where a slice's columns are two or four rounds (4,096, 8,192) the later rounds wait for their
// loads: --last-pass auto runs the tail only where they are one (K <= 2,048). A first form, in which
// the slice of rank 0 finished the tile and a second cluster barrier carried it to the others, was
// slower (tried and dropped, phase 5 notes).
constexpr int kLtCols = 128;  // columns of the last layer a tail round (one stage of step 8's slices)
constexpr int kLtLdH = kLtCols + 8;
static_assert(kSrNarrowN == 16 && kSrBM == kBM && kSrThreads == 256, "the tail's warps: 8 x 16 columns, 16 classes, 32 rows");

__device__ __forceinline__ __half* lt_hs() {  // H [kBM][kLtLdH]: the slice's columns of the layer's input
  __shared__ __align__(16) __half s[kBM * kLtLdH];
  return s;
}
__device__ __forceinline__ float* lt_wm() {  // W [kSrNarrowN][kLtCols]: the fp32 master weights
  __shared__ __align__(16) float s[kSrNarrowN * kLtCols];
  return s;
}
__device__ __forceinline__ __half* lt_wo() {  // W_old [kSrNarrowN][kLtLdH] in fp16 (the B operand of dA)
  __shared__ __align__(16) __half s[kSrNarrowN * kLtLdH];
  return s;
}
__device__ __forceinline__ __half* lt_scratch() {  // dZ_last of the slices other than rank 0's (not stored)
  __shared__ __align__(16) __half s[kBM * kSrNarrowN];
  return s;
}
__device__ __forceinline__ float2* lt_bias_moments() {  // Adam's m, v of the bias (the slice of k = 0)
  __shared__ float2 s[kSrNarrowN];
  return s;
}
__device__ __forceinline__ uint32_t lt_pack(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

struct SoftmaxCELastBwdEpi : SoftmaxCEEpi<__half> {
  static constexpr bool kClusterTail = true;
  int K = 0;                       // the last hidden width (W is [N][K])
  float* W = nullptr;              // fp32 master, [N][K], 16-byte aligned (as its fp16 copy, H, dZ_prev)
  __half* W16 = nullptr;
  float* mW = nullptr;             // Adam moments (null: SGD)
  float* vW = nullptr;
  float* b = nullptr;              // the bias the update writes (SoftmaxCEEpi::bias, the one it read)
  float* mb = nullptr;
  float* vb = nullptr;
  float* grad_out = nullptr;       // validation only: the gradients applied
  float* bgrad_out = nullptr;
  const __half* h = nullptr;       // [B][K] the layer's input (after ReLU/dropout)
  __half* dz_prev = nullptr;       // [B][K]
  float scale = 1.f;               // 1 / (1 - dropout) of the input layer
  bool adam = false;
  float lr = 0.f;
  const AdamHyper* hyper = nullptr;
  int64_t hyper_n = 0;

  // Columns c0 .. c0 + 127 (those before kend) of H's B rows and W's N rows into lt_hs / lt_wm, a
  // cp.async group; rows and columns outside as zeros.
  __device__ void stage(int c0, int kend, int B, int N) const {
    const int cols = min(kLtCols, kend - c0);
#pragma unroll
    for (int i = 0; i < kBM * (kLtCols / 8) / kSrThreads; ++i) {
      const int e = threadIdx.x + i * kSrThreads, r = e / (kLtCols / 8), c = (e % (kLtCols / 8)) * 8;
      __half* d = lt_hs() + r * kLtLdH + c;
      if (r < B && c < cols) __pipeline_memcpy_async(d, h + static_cast<size_t>(r) * K + c0 + c, 16);
      else *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int i = 0; i < kSrNarrowN * (kLtCols / 4) / kSrThreads; ++i) {
      const int e = threadIdx.x + i * kSrThreads, r = e / (kLtCols / 4), c = (e % (kLtCols / 4)) * 4;
      float* d = lt_wm() + r * kLtCols + c;
      if (r < N && c < cols) __pipeline_memcpy_async(d, W + static_cast<size_t>(r) * K + c0 + c, 16);
      else *reinterpret_cast<float4*>(d) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    __pipeline_commit();
  }
  // The first round's copies; the later rounds' lines asked into L2 (H's are there: the slice has
  // just read them as its A operand); the bias's Adam moments (the slice of k = 0).
  __device__ void tail_prefetch(int kbeg, int kend, int B, int N) const {
    if (kbeg >= kend) return;
    stage(kbeg, kend, B, N);
    const int t = static_cast<int>(threadIdx.x);
    for (int c0 = kbeg + kLtCols; c0 < kend; c0 += kLtCols) {
      const int lines = (min(kLtCols, kend - c0) * 4 + 127) / 128;  // a W row's 128-byte lines this round
      if (t < N * lines)
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(W + static_cast<size_t>(t / lines) * K + c0 + (t % lines) * 32));
    }
    if (kbeg == 0 && adam && t < N) lt_bias_moments()[t] = make_float2(mb[t], vb[t]);
  }

  // cs: softmax-CE's logits without the bias, the whole product's sums (every slice has the same
  // bits); rank 0's slice stores dZ_last and the loss, the others finish the same rows into scratch.
  __device__ void tail(float* cs, int kbeg, int kend, int B, int N, int rank) const {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    if (rank == 0) {
      SoftmaxCEEpi<__half>::operator()(cs, 0, 0, B, N);
    } else {
      const int r = static_cast<int>(threadIdx.x);
      if (r < kBM && r < B)
        softmax_ce_row(cs + r * kLdc, smem_bias(), N, smem_label()[r], 1.f / static_cast<float>(B), lt_scratch() + r * kSrNarrowN);
      __syncthreads();
    }
    const bool first = rank == 0;
    const float* dz = cs;  // dZ_last as stored, row stride kLdc
    auto z = [&](int r, int c) { return (r < B && c < N) ? dz[r * kLdc + c] : 0.f; };
    // A fragments. dW: A(c, b) = dZ[b][c], k-steps b = 0..15, 16..31. dA: A(b, c) = dZ[b][c], m16 tiles
    // b = 0..15, 16..31, k = the classes 0..15.
    uint32_t aw[2][4], ad[2][4];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int k = 16 * s + 2 * t;
      aw[s][0] = lt_pack(z(k, g), z(k + 1, g)), aw[s][1] = lt_pack(z(k, g + 8), z(k + 1, g + 8));
      aw[s][2] = lt_pack(z(k + 8, g), z(k + 9, g)), aw[s][3] = lt_pack(z(k + 8, g + 8), z(k + 9, g + 8));
      const int r = 16 * s + g;
      ad[s][0] = lt_pack(z(r, 2 * t), z(r, 2 * t + 1)), ad[s][1] = lt_pack(z(r + 8, 2 * t), z(r + 8, 2 * t + 1));
      ad[s][2] = lt_pack(z(r, 2 * t + 8), z(r, 2 * t + 9)), ad[s][3] = lt_pack(z(r + 8, 2 * t + 8), z(r + 8, 2 * t + 9));
    }
    const uint32_t a0[4] = {0u, 0u, 0u, 0u};  // (fused_update_bwd's second k-step of dA: rows 16 .. 31, none)
    AdamHyper hy{};
    if (adam) {
      const int64_t st = smem_step() + 1;
      hy = (hyper != nullptr && st < hyper_n) ? hyper[st] : adam_hyper(lr, st);
    }
    if (first) {  // the bias: its gradient summed over the batch in batch order, as the pass does
      const int c = static_cast<int>(threadIdx.x);
      if (c < N) {
        float gb = 0.f;
        for (int r = 0; r < B; ++r) gb += dz[r * kLdc + c];
        float pb = smem_bias()[c];  // (softmax-CE's prefetch loaded it)
        if (adam) {
          const float2 mv = lt_bias_moments()[c];
          float mbi = mv.x, vbi = mv.y;
          adam_apply(pb, gb, mbi, vbi, hy);
          mb[c] = mbi, vb[c] = vbi;
        } else {
          pb -= lr * gb;
        }
        b[c] = pb;
        if (bgrad_out) bgrad_out[c] = gb;
      }
    }
    const __half* hs = lt_hs();
    const float* wm = lt_wm();
    __half* wo = lt_wo();
    auto hpair = [&](int r, int n) {  // H[r][n], H[r + 1][n]
      const __half2 v = __halves2half2(hs[r * kLtLdH + n], hs[(r + 1) * kLtLdH + n]);
      return *reinterpret_cast<const uint32_t*>(&v);
    };
    auto wpair = [&](int c, int n) {
      const __half2 v = __halves2half2(wo[c * kLtLdH + n], wo[(c + 1) * kLtLdH + n]);
      return *reinterpret_cast<const uint32_t*>(&v);
    };
    for (int c0 = kbeg; c0 < kend; c0 += kLtCols) {
      if (c0 > kbeg) {
        __syncthreads();  // every warp is done with the previous round's tiles
        stage(c0, kend, B, N);
      }
      __pipeline_wait_prior(0);
      __syncthreads();
      const int cols = min(kLtCols, kend - c0);
      // Warp w: columns 16 w + 8 j + (2t, 2t + 1) of dW and dA (n8 tiles j = 0, 1).
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int nc = 16 * warp + 8 * j;
        if (nc >= cols) continue;  // (cols is a multiple of 8)
        float d[4] = {0.f, 0.f, 0.f, 0.f};
        mma_f16(d, aw[0], hpair(2 * t, nc + g), hpair(2 * t + 8, nc + g));
        mma_f16(d, aw[1], hpair(16 + 2 * t, nc + g), hpair(16 + 2 * t + 8, nc + g));
        // d[0], d[1]: class g, columns nc + 2t, + 1; d[2], d[3]: class g + 8.
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int c = g + 8 * hh, n = nc + 2 * t;
          const float2 wv = *reinterpret_cast<const float2*>(wm + c * kLtCols + n);
          float wf[2] = {wv.x, wv.y};
          *reinterpret_cast<__half2*>(wo + c * kLtLdH + n) = __floats2half2_rn(wf[0], wf[1]);
          if (c >= N) continue;
          const float gr[2] = {d[2 * hh], d[2 * hh + 1]};
          const size_t idx = static_cast<size_t>(c) * K + c0 + n;
          if (adam) {
            const float2 mv = *reinterpret_cast<const float2*>(mW + idx), vv = *reinterpret_cast<const float2*>(vW + idx);
            float mm[2] = {mv.x, mv.y}, vq[2] = {vv.x, vv.y};
#pragma unroll
            for (int e = 0; e < 2; ++e) adam_apply(wf[e], gr[e], mm[e], vq[e], hy);
            *reinterpret_cast<float2*>(mW + idx) = make_float2(mm[0], mm[1]);
            *reinterpret_cast<float2*>(vW + idx) = make_float2(vq[0], vq[1]);
          } else {
#pragma unroll
            for (int e = 0; e < 2; ++e) wf[e] -= lr * gr[e];
          }
          *reinterpret_cast<float2*>(W + idx) = make_float2(wf[0], wf[1]);
          if (W16) *reinterpret_cast<__half2*>(W16 + idx) = __floats2half2_rn(wf[0], wf[1]);
          if (grad_out) *reinterpret_cast<float2*>(grad_out + idx) = make_float2(gr[0], gr[1]);
        }
      }
      __syncthreads();  // W_old in fp16 is whole
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int nc = 16 * warp + 8 * j;
        if (nc >= cols) continue;
        const uint32_t b0 = wpair(2 * t, nc + g), b1 = wpair(2 * t + 8, nc + g);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          float d[4] = {0.f, 0.f, 0.f, 0.f};
          mma_f16(d, ad[i], b0, b1);
          mma_f16(d, a0, 0u, 0u);
          // d[0], d[1]: row 16 i + g, columns nc + 2t, + 1; d[2], d[3]: row 16 i + g + 8.
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int r = 16 * i + g + 8 * hh, n = nc + 2 * t;
            if (r >= B) continue;
            const float h0 = __half2float(hs[r * kLtLdH + n]), h1 = __half2float(hs[r * kLtLdH + n + 1]);
            const float v0 = h0 > 0.f ? d[2 * hh] * scale : 0.f, v1 = h1 > 0.f ? d[2 * hh + 1] * scale : 0.f;
            *reinterpret_cast<__half2*>(dz_prev + static_cast<size_t>(r) * K + c0 + n) = __floats2half2_rn(v0, v1);
          }
        }
      }
    }
  }
};
// Where the tail can run: fp16 own kernels on sm_90 and up, softmax-CE on step 8's narrow kernel,
// at most kSrNarrowN classes and a batch of at most 32, K a multiple of 8 and the buffers 16-byte
// aligned (checked by the trainer, which otherwise launches the pass of its own).
inline bool last_bwd_tail_aligned(const SoftmaxCELastBwdEpi& e) {
  const auto a = [](const void* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return e.K % 8 == 0 && a(e.W) && a(e.W16) && a(e.mW) && a(e.vW) && a(e.h) && a(e.dz_prev) && a(e.grad_out);
}

struct p5_fwd_softmax_ce_bwd {};
struct p5_fused_update_bwd {};
struct p5_fused_update_first {};

}  // namespace mlp
}  // namespace nb
