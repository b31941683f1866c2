// phase5_batched/5g_grid.cuh — rung 5g, `--launch grid`: a whole epoch of W2's MLP (fp16 operands, fp32
// accumulation and master weights, plain SGD, no dropout) as ONE cooperative launch over up to every SM,
// each block holding 16 or more units of every hidden layer; activations and output gradients travel
// through L2 between grid barriers.
// BUILDS ON 5d (W2's arithmetic, a layer's rows split by units, the batch gathered in the kernel, the
// model in shared memory across launches of one epoch). WHAT IT CHANGES, so the model may span 132 SMs
// instead of a 16-block cluster's:
//   * exchanges through global memory (L2) and a grid barrier each, instead of DSMEM pushes: a hidden
//     layer's owners write their columns of H (batch-major, and unit-major for the weight gradients)
//     or of dZ; every block reads them back with L2-only loads after the barrier;
//   * no column copies: the backward-data product reads a transposed fp16 copy of each inner weight
//     matrix from global memory, written by the rows' owners in their update, two copies by step
//     parity (step t reads what step t-1 wrote);
//   * no replicated last layer: it is split by its inputs; each block's partial logits (its own units'
//     share) go to global memory, one barrier, and every block sums them in block order;
//   * mma.sync m16n8k16 with both operands K-contiguous, read as 16-byte words: lane t's registers hold
//     k = 8t .. 8t+7 of a 32-value chunk, two k-steps' slots, in A and in B alike (a permutation of the
//     k-slots, the same sum; tools/exchange_product: a phase 2.35 -> 1.72 us at h = 1,024 on an H100
//     against 8-byte words; W2's step at h = 1,024 48.3 -> 47.6 us on an H100, predicted ~2.5 us off:
//     nvidia-h100-80gb-hbm3/logs/fbfirst_g16_9901412/);
//   * the fp16 rows and the fp32 masters stay in shared memory where they fit; past that they are read
//     from global memory (the masters in place in the trainer's buffer);
//   * two teams of warps a block: 8 run the chain (products, exchanges, softmax, the first layer's
//     update, which the next forward waits for), 8 update the inner layers' rows and the last layer's
//     columns as soon as their dZ is known, beside the chain; hardware barriers by name hand dZ over
//     and the updated rows back (the chain waits for layer l's rows before its next forward through l).
// THE DESIGN DECISION: spread the model over the whole GPU and pay 2L-3 grid barriers a step (5 for
// W2) with every block reading each exchanged activation whole, rather than replicate or mirror weights
// (5d's column copies and replicated last layer would not fit beside h = 1,024's rows).
// PREDICTION, before measuring (H200, W2 at batch 32): at h = 1,024, 64 blocks of 16 units: 5 grid
// barriers at ~1.5 us, ~0.5 MB read from L2 per block a step (34 MB over the grid, ~5 us at ~7 TB/s),
// masters of the two inner layers in global memory (~16 MB read and written), ~4 M MACs a block on
// tensor cores (~1 us): about 20 us a step against JAX's ~56. At h = 128 (8 blocks): ~10 us.
// MEASURED, the first version (H200, 7d20915): 54.72 us a step at h = 1,024, 2.7x the prediction, 0.98x
// JAX jit-run: every phase a few L2 round trips and block barriers, not arithmetic; the row updates
// 13.9 us of it (logs/grid_7d20915/).
// THE TWO TEAMS, PREDICTED before measuring: the chain sheds the inner rows' updates and the last
// layer's columns, keeps the first layer's update, and runs its products on half the warps (a second
// round of L2 loads where K is long, ~0.5 us a product): ~42 us a step at 1,024, ~34 at 256, ~85 at
// 2,048, if the team's updates fit in the chain's ~20 us between a layer's dZ and its next forward.
// MEASURED (H200, f620a8f, bench_frameworks.sh w2; w2-h<h>-grid.json): 33.21 / 38.65 / 48.75 / 107.5 us
// a step at h = 256 / 512 / 1,024 / 2,048, 1.12 / 1.06 / 1.09 / 0.993x JAX jit-run. The updates fit
// (the chain waits 0.15 us a step for them), but the chain's other parts grew: at 1,024 barrier waits
// 6.8 -> 10.3 us, backward-data 9.4 -> 11.8, last layer 3.6 -> 5.0 (logs/teams_ab/). Stamped in every
// block (logs/grid_probe_90f4663/): up to h = 1,024 a barrier costs what a bare one does (the blocks
// arrive within 0.2-0.9 us), at 2,048 they arrive up to 6 us apart; the update team is busy all but
// ~0.5 us of every step, so the step is what both teams issue on one SM.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "check.cuh"
#include "errors.h"
#include "mlp/gemm/6_f16_mma.cuh"  // mma_f16
#include "mlp/mlp_common.h"
#include "5g_grid.h"
#include "onchip_optimizer.cuh"  // sgd_fma
#include "onchip_pixels.cuh"
#include "onchip_segment_clock.cuh"
#include "onchip_smem_carve.cuh"
#include "onchip_softmax_loss.cuh"

namespace nb {
namespace mlp {

__host__ __device__ inline int gr_round(int x, int m) { return (x + m - 1) / m * m; }

// The block's two teams: warps [0, kGrChainWarps) run the step's dependent chain (the products, the
// exchanges, the softmax, the first layer's update); the others, the update team, update the inner
// layers' rows and the last layer's columns beside it, each as soon as its output gradient is ready.
constexpr int kGrChainWarps = 8;
constexpr int kGrChainThreads = 32 * kGrChainWarps;
constexpr int kGrUpdWarps = kGrWarps - kGrChainWarps;
constexpr int kGrUpdThreads = 32 * kGrUpdWarps;
static_assert(kGrUpdWarps >= 1, "both teams need warps");
static_assert(kGrChainThreads >= 256, "the chain's threads write the byte table (zero_and_load) that store_x reads");
// Hardware barriers (0 is __syncthreads): 1 the chain's own, then per inner layer l (1 <= l <=
// kClMaxLayers - 2) "dZ_l is ready" (the chain arrives, the team waits) and "layer l's rows are
// updated" (the team arrives, the chain waits before its next forward through layer l). The team needs
// none of its own: each of its threads writes the same elements every step.
constexpr int kGrBarChain = 1;
__device__ __forceinline__ int gr_bar_dz(int l) { return 2 + l; }
__device__ __forceinline__ int gr_bar_rows(int l) { return 1 + kClMaxLayers + l; }
static_assert(1 + kClMaxLayers + kClMaxLayers - 2 <= 15, "16 hardware barriers a block");
__device__ __forceinline__ void gr_bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void gr_bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

// Units of hidden layer y that block r owns.
__host__ __device__ inline int gr_own(const GridLayer& y, int r) {
  const int left = y.out - r * y.U;
  return left < 0 ? 0 : left < y.U ? left : y.U;
}

// The layout for NB blocks within `budget` bytes of shared memory a block: fills g, returns the
// shared bytes a block needs (more than budget when even the mandatory buffers do not fit).
inline size_t grid_layout(GridLayout& g, const ClusterParams& p, int NB, size_t budget) {
  g = GridLayout{};
  const int L = p.L;
  g.NB = NB, g.L = L, g.C = p.w[L];
  g.ldx = p.w[0] + 8;
  SmemCarve<16> carve;
  const auto take = [&](size_t bytes) { return carve.take(bytes); };
  g.x16 = take(sizeof(__half) * kGrRows * g.ldx);
  g.xb = take(static_cast<size_t>(kGrRows) * p.w[0]);
  g.xtab = take(sizeof(__half) * 256);
  g.scratch = take(sizeof(float) * (kGrWarps * 16 * kGrRows + kGrRows * kGrMaxClasses));  // + the logits
  for (int l = 0; l < L; ++l) {
    GridLayer& y = g.ly[l];
    y.in = p.w[l], y.out = p.w[l + 1];
    y.Kp = gr_round(y.in, 16), y.ldw = y.Kp + 8, y.Np = gr_round(y.out, 16);
    if (l == L - 1) continue;
    y.U = gr_round((y.out + NB - 1) / NB, 16);
    y.bias = take(sizeof(float) * y.U);
    y.hto = take(sizeof(__half) * y.U * kGrLdT);
    y.dzt = take(sizeof(__half) * y.U * kGrLdT);
  }
  const int Ul = g.ly[L - 2].U;
  g.lw16 = take(sizeof(__half) * g.C * Ul);
  g.lw32 = take(sizeof(float) * g.C * Ul);
  g.lb = take(sizeof(float) * g.C);
  g.dzl = take(sizeof(float) * kGrRows * kGrMaxClasses);
  g.lab = take(sizeof(int) * kGrRows);
  g.rloss = take(sizeof(float) * kGrRows);
  // The weights where they fit: first every fp16 row block, then the masters.
  for (int l = 0; l + 1 < L; ++l) {
    GridLayer& y = g.ly[l];
    const size_t bytes = sizeof(__half) * y.U * y.ldw;
    if (carve.off + bytes <= budget) y.w16_smem = true, y.w16 = take(bytes);
  }
  for (int l = 0; l + 1 < L; ++l) {
    GridLayer& y = g.ly[l];
    const size_t bytes = sizeof(float) * y.U * y.in;
    if (carve.off + bytes <= budget) y.m32_smem = true, y.m32 = take(bytes);
  }
  g.smem = carve.off;
  // The arena (global memory, zeroed once: pads are never written).
  SmemCarve<256> arena;
  g.bar = arena.take(sizeof(unsigned));  // zeroed before every launch (launch_grid)
  for (int l = 0; l + 1 < L; ++l) {
    GridLayer& y = g.ly[l];
    const size_t rows = static_cast<size_t>(NB) * y.U;
    if (!y.w16_smem) y.w16g = arena.take(sizeof(__half) * rows * y.ldw);
    if (l + 2 < L) {
      y.hb = arena.take(sizeof(__half) * kGrRows * y.Np);
      y.ht = arena.take(sizeof(__half) * 2 * rows * kGrRows);
    }
    if (l >= 1) {
      y.dzb = arena.take(sizeof(__half) * kGrRows * y.Np);
      y.wt = arena.take(sizeof(__half) * 2 * static_cast<size_t>(NB) * g.ly[l - 1].U * y.Np);
    }
  }
  g.part = arena.take(sizeof(float) * 2 * NB * kGrRows * g.C);  // two, by step parity
  g.arena_bytes = arena.off;
  return g.smem;
}

namespace gr {

__device__ __forceinline__ uint2 ld8(const __half* q) { return *reinterpret_cast<const uint2*>(q); }
// Written by other blocks during the launch: from L2, never a stale L1 line.
__device__ __forceinline__ uint2 ld8_l2(const __half* q) { return __ldcg(reinterpret_cast<const uint2*>(q)); }
template <bool kL2>
__device__ __forceinline__ uint2 ld8_at(const __half* q) {
  if constexpr (kL2) return ld8_l2(q);
  else return ld8(q);
}
template <bool kL2>
__device__ __forceinline__ uint4 ld16_at(const __half* q) {
  if constexpr (kL2) return __ldcg(reinterpret_cast<const uint4*>(q));
  else return *reinterpret_cast<const uint4*>(q);
}
__device__ __forceinline__ uint32_t ld4(const __half* q) { return *reinterpret_cast<const uint32_t*>(q); }
__device__ __forceinline__ float h2f(__half h) { return __half2float(h); }

// out[m][b] (m < 16 mtiles, b < 32) = sum_k A[m][k] Bm[b][k]: both operands K-contiguous (rows of A at
// stride lda, batch rows of Bm at stride ldb, K = 16 ksteps, zero past the data), 8-byte fragment reads
// in the permuted k order (the card). The chain's warps split the row tiles and chunks of K; each stores
// its fp32 partial to scratch[kc][m][32]. Returns the chunks (part_sum adds them in order). Ends with the
// chain's barrier.
template <bool kAL2, bool kBL2>
__device__ __forceinline__ int rows_product(const __half* A, int lda, const __half* Bm, int ldb, int mtiles, int ksteps,
                                            float* scratch) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  // 16-byte fragment reads: a lane's 8 consecutive values of k of a row feed two k-steps (k 8t .. 8t+3
  // in the first MMA, 8t+4 .. 8t+7 in the second: the 32-value chunk's k-slots permuted alike in A
  // and B), half the loads of 8-byte reads with twice the bytes each in flight (tools/exchange_product:
  // the product phase 2.35 -> 1.72 us at K = 1,024 on an H100); an odd last k-step on 8-byte reads.
  const int chunks = ksteps / 2;
  const int kcn = max(1, min(kGrChainWarps / mtiles, chunks));
  const int per = (chunks + kcn - 1) / kcn;
  for (int task = wid; task < mtiles * kcn; task += kGrChainWarps) {
    const int mt = task % mtiles, kc = task / mtiles;
    float acc[4][4] = {};
    const __half* a0 = A + static_cast<size_t>(mt * 16 + g) * lda + 8 * t;
    const __half* a1 = a0 + 8 * static_cast<size_t>(lda);
    const __half* b0 = Bm + static_cast<size_t>(g) * ldb + 8 * t;
    const int c1 = min(chunks, (kc + 1) * per);
#pragma unroll 2
    for (int c = kc * per; c < c1; ++c) {
      const int k = c * 32;
      const uint4 x = ld16_at<kAL2>(a0 + k), y = ld16_at<kAL2>(a1 + k);
      const uint32_t lo[4] = {x.x, y.x, x.y, y.y}, hi[4] = {x.z, y.z, x.w, y.w};
      uint4 b[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = ld16_at<kBL2>(b0 + 8 * j * static_cast<size_t>(ldb) + k);
#pragma unroll
      for (int j = 0; j < 4; ++j) mma_f16(acc[j], lo, b[j].x, b[j].y), mma_f16(acc[j], hi, b[j].z, b[j].w);
    }
    if ((ksteps & 1) && kc == kcn - 1) {  // the last k-step alone, 8-byte reads: lane t's k = 4t .. 4t+3
      const int k = (ksteps - 1) * 16;
      const uint2 x = ld8_at<kAL2>(a0 - 4 * t + k), y = ld8_at<kAL2>(a1 - 4 * t + k);
      const uint32_t a[4] = {x.x, y.x, x.y, y.y};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint2 bb = ld8_at<kBL2>(b0 - 4 * t + 8 * j * static_cast<size_t>(ldb) + k);
        mma_f16(acc[j], a, bb.x, bb.y);
      }
    }
    float* s = scratch + (static_cast<size_t>(kc) * mtiles * 16 + mt * 16 + g) * kGrRows + 2 * t;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      s[8 * j] = acc[j][0], s[8 * j + 1] = acc[j][1];
      s[8 * kGrRows + 8 * j] = acc[j][2], s[8 * kGrRows + 8 * j + 1] = acc[j][3];
    }
  }
  gr_bar_sync(kGrBarChain, kGrChainThreads);
  return kcn;
}

// The sum of the kcn partials of out[m][b], in chunk order.
__device__ __forceinline__ float part_sum(const float* scratch, int kcn, int rows, int m, int b) {
  float v[kGrWarps];
#pragma unroll
  for (int kc = 0; kc < kGrWarps; ++kc) v[kc] = kc < kcn ? scratch[(kc * rows + m) * kGrRows + b] : 0.f;
  float z = v[0];
#pragma unroll
  for (int kc = 1; kc < kGrWarps; ++kc) z += v[kc];  // + 0 past kcn: the same value
  return z;
}

// Weight gradients of a hidden layer's own rows: G[m][n] = sum_b dZt[m][b] In[b][n] (m < 16 mtiles, n < 8
// ntiles, K = the 32 batch rows), handed to epi(m, n0, acc) a warp's 16 x 32 tile at a time: lane (g, t)
// holds acc[j] = G[m][n0 + 8j + 2t], G[m][n0 + 8j + 2t + 1], G[m + 8][..], G[m + 8][.. + 1], m = tile row + g
// (column groups past the last tile are 0). dZt is the block's own
// [U][kGrLdT]. The input In: a layer's unit-major copy [n][32] in global memory (kX = false: permuted
// 8-byte reads on both sides), or X [32][ldx] in shared memory (kX: ldmatrix.trans for B and the
// standard k order for A). The tiles are split over nw warps; w is the caller's warp among them.
template <bool kX, class Epi>
__device__ __forceinline__ void wgrad(const __half* dzt, const __half* in, int ldx, int mtiles, int ntiles, int w, int nw,
                                      Epi epi) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int groups = (ntiles + 3) / 4;
  for (int task = w; task < mtiles * groups; task += nw) {
    const int mt = task % mtiles, grp = task / mtiles;
    uint32_t a[2][4];
    const __half* ar = dzt + (mt * 16 + g) * kGrLdT;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      if constexpr (kX) {
        a[ks][0] = ld4(ar + ks * 16 + 2 * t), a[ks][1] = ld4(ar + 8 * kGrLdT + ks * 16 + 2 * t);
        a[ks][2] = ld4(ar + ks * 16 + 2 * t + 8), a[ks][3] = ld4(ar + 8 * kGrLdT + ks * 16 + 2 * t + 8);
      } else {
        const uint2 x = ld8(ar + ks * 16 + 4 * t), y = ld8(ar + 8 * kGrLdT + ks * 16 + 4 * t);
        a[ks][0] = x.x, a[ks][1] = y.x, a[ks][2] = x.y, a[ks][3] = y.y;
      }
    }
    float acc[4][4] = {};
    uint32_t b[4][2][2];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n0 = (grp * 4 + j) * 8;
      if (n0 >= ntiles * 8) continue;
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        if constexpr (kX) {
          const __half* row = in + (ks * 16 + (lane & 15)) * ldx + n0;
          const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
          asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                       : "=r"(b[j][ks][0]), "=r"(b[j][ks][1])
                       : "r"(addr));
        } else {
          const uint2 v = ld8_l2(in + static_cast<size_t>(n0 + g) * kGrRows + ks * 16 + 4 * t);
          b[j][ks][0] = v.x, b[j][ks][1] = v.y;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if ((grp * 4 + j) * 8 >= ntiles * 8) continue;
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) mma_f16(acc[j], a[ks], b[j][ks][0], b[j][ks][1]);
    }
    epi(mt * 16 + g, grp * 32, acc);
  }
}

// ------------------------------------------------------------------ the kernel, stage by stage
// One block of the grid as one of its threads sees it; the stages of a step as member functions.
struct GridBlock {
  const ClusterParams& p;
  const GridLayout& g;
  unsigned* const bar;  // the grid barrier's counter (zero at the launch's start)
  unsigned bars = 0;    // barriers this block has arrived at in this launch
  unsigned char* const sm;
  const int r, tid, lane, wid, L, B, D, NB, C;
  // the caller's team (the chain: warps [0, kGrChainWarps); the update team: the rest), its thread and
  // warp in it, and the team's threads and warps
  const bool in_chain;
  const int gt, gw, gn, gnw;
  const bool keep_grads;
  const int cpr, nchunks;  // the batch as 16-byte chunks: chunk q is row q / cpr, bytes 16 (q % cpr)
  SegmentClock<kGrSegments>& clock;

  __device__ __forceinline__ GridBlock(const ClusterParams& params, const GridLayout& layout, unsigned char* s,
                                       SegmentClock<kGrSegments>& c)
      : p(params), g(layout), bar(reinterpret_cast<unsigned*>(layout.arena + layout.bar)), sm(s), r(static_cast<int>(blockIdx.x)), tid(threadIdx.x),
        lane(threadIdx.x & 31), wid(threadIdx.x >> 5), L(params.L), B(params.B), D(params.w[0]), NB(layout.NB),
        C(layout.C), in_chain(wid < kGrChainWarps), gt(in_chain ? tid : tid - kGrChainThreads),
        gw(in_chain ? wid : wid - kGrChainWarps), gn(in_chain ? kGrChainThreads : kGrUpdThreads),
        gnw(in_chain ? kGrChainWarps : kGrUpdWarps), keep_grads(params.grads_out != nullptr), cpr(params.w[0] / 16), nchunks(params.B * (params.w[0] / 16)),
        clock(c) {}

  __device__ __forceinline__ void chain_sync() const { gr_bar_sync(kGrBarChain, kGrChainThreads); }

  __device__ __forceinline__ __half* hs(size_t off) const { return reinterpret_cast<__half*>(sm + off); }
  __device__ __forceinline__ float* fs(size_t off) const { return reinterpret_cast<float*>(sm + off); }
  __device__ __forceinline__ __half* ha(size_t off) const { return reinterpret_cast<__half*>(g.arena + off); }
  __device__ __forceinline__ float* fa(size_t off) const { return reinterpret_cast<float*>(g.arena + off); }
  // hidden layer l's rows: fp16 [U][ldw] and fp32 masters [U][in] (shared memory or global)
  __device__ __forceinline__ __half* rows16(int l) const {
    const GridLayer& y = g.ly[l];
    return y.w16_smem ? hs(y.w16) : ha(y.w16g) + static_cast<size_t>(r) * y.U * y.ldw;
  }
  __device__ __forceinline__ float* rows32(int l) const {
    const GridLayer& y = g.ly[l];
    return y.m32_smem ? fs(y.m32) : p.params + p.woff[l] + static_cast<size_t>(r) * y.U * y.in;
  }
  // W_l transposed (1 <= l <= L-2) in parity par: [NB U_{l-1}][Np]
  __device__ __forceinline__ __half* wt(int l, int par) const {
    const GridLayer& y = g.ly[l];
    return ha(y.wt) + static_cast<size_t>(par) * NB * g.ly[l - 1].U * y.Np;
  }

  // ---- zero the shared memory, load what this block holds, the transposed copies' first parity
  __device__ __forceinline__ void zero_and_load() {
    for (size_t o = static_cast<size_t>(tid) * 16; o < g.smem; o += 16 * kGrThreads)
      *reinterpret_cast<uint4*>(sm + o) = make_uint4(0, 0, 0, 0);
    __syncthreads();
    if (tid < 256) hs(g.xtab)[tid] = __float2half_rn(static_cast<float>(tid) / 255.0f);
    for (int l = 0; l + 1 < L; ++l) {
      const GridLayer& y = g.ly[l];
      const int own = gr_own(y, r), u0 = r * y.U;
      __half* w16 = rows16(l);
      float* w32 = rows32(l);
      for (int e = tid; e < own * y.in; e += kGrThreads) {
        const int u = e / y.in, k = e - u * y.in;
        const float v = p.params[p.woff[l] + static_cast<size_t>(u0 + u) * y.in + k];
        if (y.m32_smem) w32[e] = v;
        const __half h = __float2half_rn(v);
        w16[u * y.ldw + k] = h;
        if (l >= 1) wt(l, 0)[static_cast<size_t>(k) * y.Np + u0 + u] = h;
      }
      for (int u = tid; u < own; u += kGrThreads) fs(y.bias)[u] = p.params[p.boff[l] + u0 + u];
    }
    const GridLayer& yh = g.ly[L - 2];
    const GridLayer& yl = g.ly[L - 1];
    const int own = gr_own(yh, r), u0 = r * yh.U;
    for (int e = tid; e < C * own; e += kGrThreads) {
      const int c = e / own, u = e - c * own;
      const float v = p.params[p.woff[L - 1] + static_cast<size_t>(c) * yl.in + u0 + u];
      fs(g.lw32)[c * yh.U + u] = v, hs(g.lw16)[c * yh.U + u] = __float2half_rn(v);
    }
    for (int c = tid; c < C; c += kGrThreads) fs(g.lb)[c] = p.params[p.boff[L - 1] + c];
  }

  // ---- the batch: its rows' bytes by cp.async into xb (issued early, waited for at the end of the
  // step) ...
  __device__ __forceinline__ void fetch_batch(int batch) const {
    for (int q = tid; q < nchunks; q += kGrChainThreads) {
      const int row = q / cpr, c = q - row * cpr;
      const int img = __ldg(p.perm + static_cast<size_t>(batch) * B + row);
      const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(sm + g.xb + row * D + 16 * c));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(p.images + static_cast<size_t>(img) * D + 16 * c));
    }
    asm volatile("cp.async.commit_group;\n" ::);
  }
  // ... and from xb to the fp16 X through the table (x / 255 in fp32, rounded: 5d's values)
  __device__ __forceinline__ void store_x() const {
    asm volatile("cp.async.wait_all;\n" ::);
    chain_sync();
    const __half* xtab = hs(g.xtab);
    for (int q = tid; q < nchunks; q += kGrChainThreads) {
      const int row = q / cpr, c = q - row * cpr;
      const uint4 v = *reinterpret_cast<const uint4*>(sm + g.xb + row * D + 16 * c);
      const uint32_t w4[4] = {v.x, v.y, v.z, v.w};
      uint32_t o[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const uint32_t word = w4[e >> 1], sh = 16 * (e & 1);
        o[e] = static_cast<uint32_t>(__half_as_ushort(xtab[(word >> sh) & 0xFFu])) |
               (static_cast<uint32_t>(__half_as_ushort(xtab[(word >> (sh + 8)) & 0xFFu])) << 16);
      }
      uint4* dst = reinterpret_cast<uint4*>(hs(g.x16) + row * g.ldx + 16 * c);
      dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
      dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
    }
  }
  __device__ __forceinline__ void load_labels(int i) const {
    if (tid < B) reinterpret_cast<int*>(sm + g.lab)[tid] = __ldg(p.labels + __ldg(p.perm + static_cast<size_t>(i) * B + tid));
  }
  // The grid barrier, split: arrive once this block's writes of an exchange are done; wait until every
  // block has arrived (the stage before each stamped its own segment). The chain's thread 0 orders the
  // chain's writes before its arrival (the chain's barrier, then a fence: cooperative groups' grid sync
  // does the same for a whole block) and every later read after the others' arrivals. The update
  // team's writes that other blocks read (the transposed copies) are fenced by their writers before
  // the team signals the chain, which waits for that signal before its next arrival.
  __device__ __forceinline__ void arrive() {
    chain_sync();
    if (tid == 0) {
      __threadfence();
      atomicAdd(bar, 1u);
    }
    ++bars;
  }
  __device__ __forceinline__ void wait() {
    if (tid == 0) {
      const unsigned target = bars * static_cast<unsigned>(NB);
      unsigned seen;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(bar) : "memory");
      } while (seen < target);
      __threadfence();
    }
    chain_sync();
    clock.stamp(1);
  }
  __device__ __forceinline__ void barrier() { arrive(), wait(); }
  // the unit-major copy of hidden layer l's output in step parity par: [NB U][32]
  __device__ __forceinline__ __half* ht(int l, int par) const {
    return ha(g.ly[l].ht) + static_cast<size_t>(par) * NB * g.ly[l].U * kGrRows;
  }

  // ---- forward, hidden layer l: own units' H = ReLU(W[own] X^T + b), kept transposed; exchanged
  // (batch-major and unit-major) unless it is the last hidden layer
  __device__ __forceinline__ void forward_hidden(int l, int par) {
    const GridLayer& y = g.ly[l];
    const int own = gr_own(y, r), u0 = r * y.U, mt = y.U / 16, ks = y.Kp / 16;
    float* scratch = fs(g.scratch);
    int kcn;
    const bool first = l == 0;
    const __half* in = first ? hs(g.x16) : ha(g.ly[l - 1].hb);
    const int ldb = first ? g.ldx : y.Kp;
    if (y.w16_smem) kcn = first ? rows_product<false, false>(rows16(l), y.ldw, in, ldb, mt, ks, scratch)
                                : rows_product<false, true>(rows16(l), y.ldw, in, ldb, mt, ks, scratch);
    else kcn = first ? rows_product<true, false>(rows16(l), y.ldw, in, ldb, mt, ks, scratch)
                     : rows_product<true, true>(rows16(l), y.ldw, in, ldb, mt, ks, scratch);
    const float* bias = fs(y.bias);
    __half* hto = hs(y.hto);
    const bool exch = l + 2 < L;
    for (int e = tid; e < y.U * kGrRows; e += kGrChainThreads) {
      const int u = e / kGrRows, b = e - u * kGrRows;
      const float z = part_sum(scratch, kcn, y.U, u, b) + bias[u < own ? u : 0];
      const __half a = __float2half_rn(u < own && b < B ? fmaxf(z, 0.f) : 0.f);
      hto[u * kGrLdT + b] = a;
      if (exch && u < own) {
        ha(y.hb)[b * y.Np + u0 + u] = a;
        ht(l, par)[static_cast<size_t>(u0 + u) * kGrRows + b] = a;
      }
    }
    chain_sync();
    clock.stamp(0);
  }

  // ---- the last layer: partial logits of the own units, one barrier, their sum in block order,
  // softmax cross-entropy, dZ (fp16 values) and the step's loss
  __device__ __forceinline__ void last_layer(int64_t s, int par) {
    const GridLayer& yh = g.ly[L - 2];
    const int own = gr_own(yh, r), Ul = yh.U;
    const __half* hto = hs(yh.hto);
    const __half* lw16 = hs(g.lw16);
    float* part = fa(g.part) + static_cast<size_t>(par) * NB * kGrRows * C;  // by step parity: one barrier a step when L = 2
    for (int e = tid; e < kGrRows * C; e += kGrChainThreads) {
      const int b = e / C, c = e - b * C;
      float z = 0.f;
      for (int u = 0; u < own; ++u) z = fmaf(h2f(hto[u * kGrLdT + b]), h2f(lw16[c * Ul + u]), z);
      part[(static_cast<size_t>(r) * kGrRows + b) * C + c] = z;
    }
    clock.stamp(2);
    barrier();
    // chain warp w sums blocks w, w + kGrChainWarps, ... (lane o of every 32 outputs), then the sums in
    // warp order
    float* scratch = fs(g.scratch);
    const int n = kGrRows * C;  // <= 32 * 16
    float acc[kGrMaxClasses] = {};
#pragma unroll 2
    for (int q = wid; q < NB; q += kGrChainWarps) {
      float v[kGrMaxClasses];
#pragma unroll
      for (int i = 0; i < kGrMaxClasses; ++i) v[i] = 32 * i + lane < n ? __ldcg(part + static_cast<size_t>(q) * n + 32 * i + lane) : 0.f;
#pragma unroll
      for (int i = 0; i < kGrMaxClasses; ++i) acc[i] += v[i];
    }
#pragma unroll
    for (int i = 0; i < kGrMaxClasses; ++i)
      if (32 * i + lane < n) scratch[wid * n + 32 * i + lane] = acc[i];
    chain_sync();
    float* logits = scratch + kGrChainWarps * n;
    for (int o = tid; o < n; o += kGrChainThreads) {
      float z = scratch[o];
      for (int w = 1; w < kGrChainWarps; ++w) z += scratch[w * n + o];
      logits[o] = z;
    }
    chain_sync();
    // a half-warp a row (each chain warp two rows at a time), a lane a class
    const int half = lane >> 4, j = lane & 15;
    const int* lab = reinterpret_cast<const int*>(sm + g.lab);
    float* rloss = fs(g.rloss);
    for (int b0 = 2 * wid; b0 < kGrRows; b0 += 2 * kGrChainWarps) {
      const int b = b0 + half;
      const bool row = b < B, on = row && j < C;
      const float z = on ? logits[b * C + j] + fs(g.lb)[j] : -INFINITY;
      const SoftmaxRow sr = softmax_xent_half_warp(z, on, half, j, [&] { return row ? lab[b] : 0; }, 1.f / static_cast<float>(B));
      if (j < C) fs(g.dzl)[b * kGrMaxClasses + j] = __half2float(__float2half_rn(sr.dz));
      if (j == 0) rloss[b] = row ? sr.lse - sr.zy : 0.f;
    }
    chain_sync();
    if (r == 0 && wid == 0) batch_mean_loss(rloss, B, lane, p.step_loss, p.bad_step, s);
    clock.stamp(2);
  }

  // ---- backward through the last layer (every block, its own columns): dZ of the last hidden layer
  // (own units, gated by its fp16 activation), exchanged ...
  __device__ __forceinline__ void backward_last() {
    const GridLayer& yh = g.ly[L - 2];
    const int own = gr_own(yh, r), Ul = yh.U, u0 = r * Ul;
    const __half* hto = hs(yh.hto);
    const __half* lw16 = hs(g.lw16);
    const float* dzl = fs(g.dzl);
    __half* dzt = hs(yh.dzt);
    const bool exch = L - 2 >= 1;
    for (int e = tid; e < Ul * kGrRows; e += kGrChainThreads) {
      const int u = e / kGrRows, b = e - u * kGrRows;
      float v = 0.f;
      if (u < own)
        for (int c = 0; c < C; ++c) v = fmaf(dzl[b * kGrMaxClasses + c], h2f(lw16[c * Ul + u]), v);
      const bool gate = u < own && b < B && h2f(hto[u * kGrLdT + b]) > 0.f;
      const __half d = __float2half_rn(gate ? v : 0.f);
      dzt[u * kGrLdT + b] = d;
      if (exch && u < own) ha(yh.dzb)[b * yh.Np + u0 + u] = d;
    }
    clock.stamp(5);
  }
  // ... then the columns' and the biases' updates (by the update team once the chain has signalled dZ of
  // the last hidden layer, or by the chain after its barrier where there is no inner layer: lw16 is
  // read above)
  __device__ __forceinline__ void update_last() {
    const GridLayer& yh = g.ly[L - 2];
    const GridLayer& yl = g.ly[L - 1];
    const int own = gr_own(yh, r), Ul = yh.U, u0 = r * Ul;
    const __half* hto = hs(yh.hto);
    __half* lw16 = hs(g.lw16);
    float* lw32 = fs(g.lw32);
    const float* dzl = fs(g.dzl);
    for (int e = gt; e < C * own; e += gn) {
      const int c = e / own, u = e - c * own;
      float gsum = 0.f;
      for (int b = 0; b < kGrRows; ++b) gsum = fmaf(dzl[b * kGrMaxClasses + c], h2f(hto[u * kGrLdT + b]), gsum);
      if (keep_grads) p.grads_out[p.woff[L - 1] + static_cast<size_t>(c) * yl.in + u0 + u] = gsum;
      const float w = sgd_fma(lw32[c * Ul + u], gsum, p.lr);
      lw32[c * Ul + u] = w, lw16[c * Ul + u] = __float2half_rn(w);
    }
    for (int c = gt; c < C; c += gn) {
      float gsum = 0.f;
      for (int b = 0; b < kGrRows; ++b) gsum += dzl[b * kGrMaxClasses + c];
      if (keep_grads && r == 0) p.grads_out[p.boff[L - 1] + c] = gsum;
      fs(g.lb)[c] = sgd_fma(fs(g.lb)[c], gsum, p.lr);
    }
  }

  // ---- hidden layer l's own rows: dW = dZt · In (tensor cores), SGD into the master and the fp16 row,
  // and (l >= 1) into the transposed copy of the next parity; the biases from dZ's column sums
  __device__ __forceinline__ void update_rows(int l, int par) {
    const GridLayer& y = g.ly[l];
    const int own = gr_own(y, r), u0 = r * y.U, in = y.in;
    const __half* dzt = hs(y.dzt);
    float* w32 = rows32(l);
    __half* w16 = rows16(l);
    __half* wtn = l >= 1 ? wt(l, par ^ 1) : nullptr;
    float* gout = keep_grads ? p.grads_out + p.woff[l] + static_cast<size_t>(u0) * in : nullptr;
    const float lr = p.lr;
    const int ldw = y.ldw, Np = y.Np, t2 = 2 * (lane & 3);
    // A tile's 16 masters are loaded before any is stored: one round trip to memory a tile (where the
    // masters live in global memory), not one an element. A lane's two columns are side by side: with
    // an even input width they are one 8-byte master load and store and one 4-byte fp16 store (the
    // epilogue's instructions bound the update: about 80% of the step's, in its first version).
    const auto epi = [&](int m, int n0, const float (&acc)[4][4]) {
      if ((in & 1) == 0) {
        float2 old[2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int mm = m + 8 * i, nn = n0 + 8 * j + t2;
            old[i][j] = mm < own && nn < in ? *reinterpret_cast<const float2*>(w32 + mm * in + nn) : make_float2(0.f, 0.f);
          }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int mm = m + 8 * i;
          if (mm >= own) continue;
          float* mrow = w32 + mm * in;
          __half* hrow = w16 + mm * ldw;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int nn = n0 + 8 * j + t2;
            if (nn >= in) continue;
            const float g0 = acc[j][2 * i], g1 = acc[j][2 * i + 1];
            const float2 w = make_float2(sgd_fma(old[i][j].x, g0, lr), sgd_fma(old[i][j].y, g1, lr));
            *reinterpret_cast<float2*>(mrow + nn) = w;
            const __half2 h = __floats2half2_rn(w.x, w.y);
            *reinterpret_cast<__half2*>(hrow + nn) = h;
            if (wtn) wtn[nn * Np + u0 + mm] = __low2half(h), wtn[(nn + 1) * Np + u0 + mm] = __high2half(h);
            if (gout) gout[mm * in + nn] = g0, gout[mm * in + nn + 1] = g1;
          }
        }
        return;
      }
      float old[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int mm = m + 8 * (e >> 1), nn = n0 + 8 * j + t2 + (e & 1);
          old[j][e] = mm < own && nn < in ? w32[mm * in + nn] : 0.f;
        }
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int mm = m + 8 * (e >> 1), nn = n0 + 8 * j + t2 + (e & 1);
          if (mm >= own || nn >= in) continue;
          const float gv = acc[j][e];
          if (gout) gout[mm * in + nn] = gv;
          const float w = sgd_fma(old[j][e], gv, lr);
          w32[mm * in + nn] = w;
          const __half h = __float2half_rn(w);
          w16[mm * ldw + nn] = h;
          if (wtn) wtn[nn * Np + u0 + mm] = h;
        }
    };
    if (l == 0) wgrad<true>(dzt, hs(g.x16), g.ldx, y.U / 16, y.Kp / 8, gw, gnw, epi);
    else wgrad<false>(dzt, ht(l - 1, par), 0, y.U / 16, y.Kp / 8, gw, gnw, epi);
    float* bias = fs(y.bias);
    for (int u = gt; u < own; u += gn) {
      float gsum = 0.f;
      for (int b = 0; b < kGrRows; ++b) gsum += h2f(dzt[u * kGrLdT + b]);
      if (keep_grads) p.grads_out[p.boff[l] + u0 + u] = gsum;
      bias[u] = sgd_fma(bias[u], gsum, lr);
    }
  }

  // ---- backward-data through layer l >= 1: dZ_{l-1} of the own units of layer l-1 from W_l's
  // transposed copy (this step's parity) and the exchanged dZ_l, gated by H_l's own fp16 values
  __device__ __forceinline__ void backward_data(int l, int par) {
    const GridLayer& y = g.ly[l];
    const GridLayer& yp = g.ly[l - 1];
    const int ownp = gr_own(yp, r), c0 = r * yp.U;
    float* scratch = fs(g.scratch);
    const int kcn = rows_product<true, true>(wt(l, par) + static_cast<size_t>(c0) * y.Np, y.Np, ha(y.dzb), y.Np,
                                             yp.U / 16, y.Np / 16, scratch);
    const __half* hto = hs(yp.hto);
    __half* dzt = hs(yp.dzt);
    const bool exch = l - 1 >= 1;
    for (int e = tid; e < yp.U * kGrRows; e += kGrChainThreads) {
      const int u = e / kGrRows, b = e - u * kGrRows;
      const float v = part_sum(scratch, kcn, yp.U, u, b);
      const bool gate = u < ownp && b < B && h2f(hto[u * kGrLdT + b]) > 0.f;
      const __half d = __float2half_rn(gate ? v : 0.f);
      dzt[u * kGrLdT + b] = d;
      if (exch && u < ownp) ha(yp.dzb)[b * yp.Np + c0 + u] = d;
    }
    chain_sync();
    clock.stamp(3);
  }

  // ---- write back what this block owns (block 0 also the last layer's biases)
  __device__ __forceinline__ void write_back() {
    for (int l = 0; l + 1 < L; ++l) {
      const GridLayer& y = g.ly[l];
      const int own = gr_own(y, r), u0 = r * y.U;
      const float* w32 = rows32(l);
      for (int e = tid; e < own * y.in; e += kGrThreads) {
        const size_t at = p.woff[l] + static_cast<size_t>(u0) * y.in + e;
        const float v = w32[e];
        p.params[at] = v, p.params16[at] = __float2half_rn(v);
      }
      for (int u = tid; u < own; u += kGrThreads) {
        const float v = fs(y.bias)[u];
        p.params[p.boff[l] + u0 + u] = v, p.params16[p.boff[l] + u0 + u] = __float2half_rn(v);
      }
    }
    const GridLayer& yh = g.ly[L - 2];
    const int own = gr_own(yh, r), u0 = r * yh.U, in = g.ly[L - 1].in;
    for (int e = tid; e < C * own; e += kGrThreads) {
      const int c = e / own, u = e - c * own;
      const size_t at = p.woff[L - 1] + static_cast<size_t>(c) * in + u0 + u;
      const float v = fs(g.lw32)[c * yh.U + u];
      p.params[at] = v, p.params16[at] = __float2half_rn(v);
    }
    if (r == 0)
      for (int c = tid; c < C; c += kGrThreads) {
        const float v = fs(g.lb)[c];
        p.params[p.boff[L - 1] + c] = v, p.params16[p.boff[L - 1] + c] = __float2half_rn(v);
      }
  }
};

}  // namespace gr

__global__ void __launch_bounds__(kGrThreads, 1)
    p5_grid_epoch(const __grid_constant__ ClusterParams p, const __grid_constant__ GridLayout g) {
  extern __shared__ __align__(128) unsigned char sm[];
  SegmentClock<kGrSegments> clock;
  gr::GridBlock blk(p, g, sm, clock);
  blk.zero_and_load();
  if (p.count > 0 && blk.in_chain) {
    blk.fetch_batch(p.i0);
    blk.store_x();  // (waits for its bytes; xtab is set: the chain's barrier inside)
  }
  __syncthreads();
  clock.start(p.breakdown != nullptr && blk.r == 0 && threadIdx.x == 0);
  const int L = p.L;
  // (the barrier's counter was zeroed before the launch: launch_grid)
  if (!blk.in_chain) {
    // The update team, where there are inner layers (else it idles until the write-back): layer l's
    // rows once the chain signals dZ_l (the last hidden layer's after the last layer's columns), then
    // its writes fenced (other blocks read the transposed copy a step later) and the chain signalled.
    if (L >= 3)
      for (int t = 0; t < p.count; ++t) {
        const int par = t & 1;
        for (int l = L - 2; l >= 1; --l) {
          gr_bar_sync(gr_bar_dz(l), kGrThreads);
          if (l == L - 2) blk.update_last();
          blk.update_rows(l, par);
          __threadfence();
          gr_bar_arrive(gr_bar_rows(l), kGrThreads);
        }
      }
  } else {
    for (int t = 0; t < p.count; ++t) {
      const int64_t s = p.s0 + t;
      const int i = p.i0 + t, par = t & 1;
      const bool more = t + 1 < p.count;
      blk.load_labels(i);
      if (more) blk.fetch_batch(i + 1);  // into xb: X (x16) is read until the first layer's update
      for (int l = 0; l + 1 < L; ++l) {
        if (l >= 1 && t > 0) {  // layer l's rows as the update team left them a step ago
          gr_bar_sync(gr_bar_rows(l), kGrThreads);
          clock.stamp(4);
        }
        blk.forward_hidden(l, par);
        if (l + 2 < L) blk.barrier();
      }
      blk.last_layer(s, par);
      blk.backward_last();
      // dZ of each inner layer goes to the update team as it is known (its rows are updated beside the
      // rest of the chain) and to the other blocks through the exchange.
      if (L >= 3) gr_bar_arrive(gr_bar_dz(L - 2), kGrThreads);
      for (int l = L - 2; l >= 1; --l) {
        blk.barrier();
        blk.backward_data(l, par);
        if (l - 1 >= 1) gr_bar_arrive(gr_bar_dz(l - 1), kGrThreads);
      }
      if (L == 2) {
        blk.chain_sync();
        blk.update_last();
      }
      blk.update_rows(0, par);
      clock.stamp(5);
      blk.chain_sync();  // X of this step is consumed
      if (more) blk.store_x();
      blk.chain_sync();
      clock.stamp(6);
    }
    if (p.count > 0)  // the last step's updates of the inner layers
      for (int l = 1; l + 1 < L; ++l) gr_bar_sync(gr_bar_rows(l), kGrThreads);
  }
  __syncthreads();
  clock.add_to(p.breakdown);
  blk.write_back();
}

// ------------------------------------------------------------------ host side

// Checks what the kernel can run (exit 2 otherwise), picks the blocks (requested_blocks, or 0 = one per
// 16 units of the widest hidden layer, at most one per SM, then as few as the units' split needs) and
// lays the model out for them (g); returns the shared memory a block needs.
inline size_t grid_fit(const ClusterParams& p, int requested_blocks, int device, GridLayout& g) {
  const auto refuse = [](const std::string& why) { throw Error(kExitUsage, "--launch grid: " + why + " (use --launch graph)"); };
  int cc = 0, sms = 0, smem_optin = 0, coop = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
  if (cc < 8) refuse("fp16 mma.sync needs compute capability 8.0");
  if (!coop) refuse("the GPU cannot launch cooperative kernels");
  if (p.L < 2 || p.L > kClMaxLayers) refuse("needs 1 to " + std::to_string(kClMaxLayers - 1) + " hidden layers");
  if (p.B < 1 || p.B > kGrRows) refuse("--batch at most " + std::to_string(kGrRows));
  if (p.w[0] % 16 != 0) refuse("the input width must be a multiple of 16 (it is " + std::to_string(p.w[0]) + ")");
  if (p.w[p.L] > kGrMaxClasses) refuse("at most " + std::to_string(kGrMaxClasses) + " classes");
  if (requested_blocks < 0 || requested_blocks > sms) refuse("--blocks between 1 and " + std::to_string(sms) + " (one per SM)");
  int widest = 0;
  for (int l = 1; l < p.L; ++l) widest = std::max(widest, p.w[l]);
  int NB = requested_blocks > 0 ? requested_blocks : std::min(sms, (widest + 15) / 16);
  if (requested_blocks == 0) {  // as few blocks as the split into multiples of 16 units needs
    int need = 1;
    for (int l = 1; l < p.L; ++l) {
      const int U = gr_round((p.w[l] + NB - 1) / NB, 16);
      need = std::max(need, (p.w[l] + U - 1) / U);
    }
    NB = need;
  }
  for (int l = 1; l < p.L; ++l)
    if (gr_round((p.w[l] + NB - 1) / NB, 16) > 16 * kGrWarps)
      refuse("at most " + std::to_string(16 * kGrWarps) + " units of a hidden layer a block (more --blocks)");
  const size_t smem = grid_layout(g, p, NB, static_cast<size_t>(smem_optin));
  if (smem > static_cast<size_t>(smem_optin))
    refuse("needs " + std::to_string(smem) + " bytes of shared memory per block, the GPU offers " + std::to_string(smem_optin));
  return smem;
}

// The most units of a hidden layer a block holds in the plan (grid_fit's refusals thrown); blocks,
// when given, receives the plan's block count.
inline int grid_units(const ClusterParams& p, int requested_blocks, int device, int* blocks = nullptr) {
  GridLayout g;
  grid_fit(p, requested_blocks, device, g);
  if (blocks) *blocks = g.NB;
  int most = 0;
  for (int l = 0; l + 1 < p.L; ++l) most = std::max(most, g.ly[l].U);
  return most;
}

// The plan: grid_fit, the co-residency of its blocks, the arena (zeroed once).
inline GridPlan plan_grid(ClusterParams& p, int requested_blocks, int device) {
  GridPlan pl;
  const size_t smem = grid_fit(p, requested_blocks, device, pl.g);
  const int NB = pl.g.NB;
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const void* k = reinterpret_cast<const void*>(&p5_grid_epoch);
  CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kGrThreads, smem));
  if (per_sm * sms < NB) throw Error(kExitUsage, "--launch grid: " + std::to_string(NB) + " blocks cannot all be resident (use --launch graph)");
  void* arena = nullptr;
  CUDA_CHECK(cudaMalloc(&arena, pl.g.arena_bytes));
  pl.arena = std::shared_ptr<void>(arena, [](void* q) { cudaFree(q); });
  CUDA_CHECK(cudaMemset(arena, 0, pl.g.arena_bytes));
  pl.g.arena = static_cast<unsigned char*>(arena);
  pl.blocks = NB, pl.smem = smem;
  return pl;
}

inline void launch_grid(const GridPlan& pl, const ClusterParams& p, cudaStream_t st) {
  CUDA_CHECK(cudaMemsetAsync(pl.g.arena + pl.g.bar, 0, sizeof(unsigned), st));
  ClusterParams pp = p;
  GridLayout g = pl.g;
  void* args[] = {&pp, &g};
  CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&p5_grid_epoch), dim3(pl.blocks),
                                         dim3(kGrThreads), args, pl.smem, st));
  CHECK_LAUNCH();
}

// Flops and global-memory bytes of one step: the batch's bytes (every block), what every block reads
// of each exchange (activations twice: batch- and unit-major; output gradients; its rows of the
// transposed copies; every block's partial logits) and writes, and the weights kept in global memory
// (fp16 rows read and written, masters read and written).
inline KernelCost grid_step_cost(const ClusterParams& p, const GridPlan& pl) {
  const GridLayout& g = pl.g;
  const double NB = pl.blocks, h = sizeof(__half);
  double flops = 0, bytes = NB * p.B * p.w[0] + p.B * (1 + sizeof(int));
  for (int l = 0; l < p.L; ++l) {
    const double mac = static_cast<double>(p.B) * p.w[l] * p.w[l + 1];
    flops += 2 * mac * (l >= 1 ? 3 : 2);
    const GridLayer& y = g.ly[l];
    if (l + 1 == p.L) continue;
    if (l + 2 < p.L) bytes += NB * 2 * kGrRows * y.Np * h + 2 * kGrRows * y.out * h;
    if (l >= 1) bytes += NB * (kGrRows * y.Np + g.ly[l - 1].U * y.Np) * h + (kGrRows + y.in) * y.out * h;
    if (!y.w16_smem) bytes += 2.0 * y.out * y.ldw * h;
    if (!y.m32_smem) bytes += 2.0 * y.out * y.in * sizeof(float);
  }
  bytes += (NB + 1) * NB * kGrRows * g.C * sizeof(float);
  KernelCost c;
  c.flops = flops, c.bytes = bytes, c.calls = 0;
  return c;
}

}  // namespace mlp
}  // namespace nb
