// common/mlp/gemm/2_cp_async.cuh — the GEMM ladder, step 2: fp16 tiles straight from global to
// shared memory by cp.async, three stages in flight (long K slices of plain fp16 matrices).
#pragma once
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <mma.h>

#include "mlp/gemm/1_register_loop.cuh"

namespace nb {
namespace mlp {

// ------------------------------------------------------------------ fp16: the cp.async mainloop
// The register-staged loop above keeps one k-tile in flight per block: it issues the loads of tile
// t+1, multiplies tile t, then waits for t+1 to land in registers before storing it. A skinny
// product (a batch of 32 rows against 8192 x 8192 weights) is then bound by that one tile's
// latency, not by bandwidth. For fp16 operands in plain matrices (not the byte-gathering view) and
// at least kAsyncMinTiles k-tiles per block, the tiles instead go global -> shared memory directly
// by cp.async, kAsyncStages deep (the next tiles in flight while one is multiplied), in the layout each
// operand already has in memory (the WMMA fragments take row- or column-major), with no register
// staging. Chunks that cross the matrix edge (or operands not 16-byte aligned) are loaded through
// the view, zero-filled, and stored to the same place. The stages take 42 KB of dynamic shared
// memory, requested at launch only when the path runs (gemm_dyn_smem).
// Three stages, not four (measured when a stage held 32 values of k and the result tile was static
// shared memory): with four (31 KB + the 14 KB static tile) only 4 blocks fit an SM and the 640
// blocks of W2's hidden forward ran in 1.21 waves (ncu): 90.7 us; with three, 5 blocks an SM, one
// wave: 81.0 us (H100, same run, phase5_batched at h = 8192).
// A stage holds 64 values of k (two of the planner's 32-wide k-tiles): ncu showed 0.30 eligible
// warps a scheduler on that forward, every 6 KB stage ending in a block barrier; a 12 KB stage
// halves the barriers per byte and doubles the bytes in flight. Three such stages (42 KB) still fit
// 5 blocks an SM because the fp32 result tile and the register loop's buffers (GemmSmem) now share
// the same dynamic shared memory instead of adding 14 KB of static memory.
constexpr int kAsyncStages = 3;
constexpr int kAsyncBK = 64;       // k values per stage
constexpr int kAsyncMinTiles = 3;  // 32-wide k-tiles per split for the async loop to run
constexpr int kAsLdK = kAsyncBK + 8;  // As[m][k] (A contiguous along k): 72 halves
constexpr int kAsLdM = kBM + 8;       // As[k][m] (A contiguous along m): 40 halves
constexpr int kBsLdN = kBN + 8;       // Bs[k][n] (B contiguous along n): 72 halves
constexpr int kBsLdK = kAsyncBK + 8;  // Bs[n][k] (B contiguous along k): 72 halves
constexpr int kAsElems = (kBM * kAsLdK > kAsyncBK * kAsLdM) ? kBM * kAsLdK : kAsyncBK * kAsLdM;  // 2560
constexpr int kBsElems = (kBN * kBsLdK > kAsyncBK * kBsLdN) ? kBN * kBsLdK : kAsyncBK * kBsLdN;  // 4608
constexpr int kStageElems = kAsElems + kBsElems;
constexpr size_t kAsyncSmemBytes = static_cast<size_t>(kAsyncStages) * kStageElems * sizeof(__half);  // 43008

template <class V>
struct IsHalfMatView : std::false_type {};
template <bool C>
struct IsHalfMatView<MatView<__half, C>> : std::true_type {};
template <class P>
struct AsyncEligible
    : std::integral_constant<bool, IsHalfMatView<typename P::AView>::value && IsHalfMatView<typename P::BView>::value> {};

// Whether problem p runs the cp.async loop: decided the same way on the host (shared memory at
// launch) and in the kernel (k-tiles per split from kchunk, the same for every block).
template <class P>
__host__ __device__ inline bool uses_async(const P& p) {
  return AsyncEligible<P>::value && p.kchunk / P::kBK >= kAsyncMinTiles;
}
// Dynamic shared memory of one GEMM block: GemmSmem (the register loop's buffers and the fp32
// result tile), or the async loop's stages, which the result tile then overlays.
template <class P>
inline size_t gemm_dyn_smem(const P& p) {
  const size_t base = sizeof(GemmSmem<typename P::Elem>);
  return uses_async(p) && kAsyncSmemBytes > base ? kAsyncSmemBytes : base;
}

// One 8-half chunk: cp.async when it lies wholly inside the matrix (and the view allows 16-byte
// access), else through the view (bounds-checked, zeros outside) and a plain shared store.
template <bool kContig, class V>
__device__ __forceinline__ void chunk_async(const V& v, int r, int c, int rows, int cols, __half* dst) {
  const int outer = kContig ? r : c, inner = kContig ? c : r;
  const int outer_lim = kContig ? rows : cols, inner_lim = kContig ? cols : rows;
  if (v.vec_ok && outer < outer_lim && inner + 8 <= inner_lim) {
    __pipeline_memcpy_async(dst, v.p + static_cast<size_t>(outer) * v.ld + inner, 16);
  } else {
    __half e[8];
    v.template load<8>(r, c, rows, cols, e);
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[i] = e[i];
  }
}

// k values [k0, k0 + 64) of A (rows m0..) into one stage.
template <class P>
__device__ __forceinline__ void load_a_async(const P& p, int m0, int k0, int kend, __half* st) {
  constexpr int NT = TileCfg<__half>::kThreads, BK = kAsyncBK;
  __half* as = st;
#pragma unroll
  for (int i = 0; i < kBM * BK / 8 / NT; ++i) {  // 32 x 64 halves, two chunks a thread
    const int c = threadIdx.x + i * NT;
    if (P::AView::kContig) {  // As[m][k]
      const int r = c / (BK / 8), kk = (c % (BK / 8)) * 8;
      chunk_async<true>(p.a, m0 + r, k0 + kk, p.M, kend, as + r * kAsLdK + kk);
    } else {                  // As[k][m]
      const int kk = c / (kBM / 8), r = (c % (kBM / 8)) * 8;
      chunk_async<false>(p.a, m0 + r, k0 + kk, p.M, kend, as + kk * kAsLdM + r);
    }
  }
}
// ... and of B (columns n0..).
template <class P>
__device__ __forceinline__ void load_b_async(const P& p, int n0, int k0, int kend, __half* st) {
  constexpr int NT = TileCfg<__half>::kThreads, BK = kAsyncBK;
  __half* bs = st + kAsElems;
#pragma unroll
  for (int i = 0; i < BK * kBN / 8 / NT; ++i) {  // 64 x 64 halves, four chunks a thread
    const int c = threadIdx.x + i * NT;
    if (P::BView::kContig) {  // Bs[k][n]
      const int kk = c / (kBN / 8), nn = (c % (kBN / 8)) * 8;
      chunk_async<true>(p.b, k0 + kk, n0 + nn, kend, p.N, bs + kk * kBsLdN + nn);
    } else {                  // Bs[n][k]
      const int nn = c / (BK / 8), kk = (c % (BK / 8)) * 8;
      chunk_async<false>(p.b, k0 + kk, n0 + nn, kend, p.N, bs + nn * kBsLdK + kk);
    }
  }
}

// The product of one stage: warp (wm, wn) owns rows 16wm.. and columns 32wn.. of the tile.
template <bool kAContig, bool kBContig>
__device__ __forceinline__ void mma_stage(Accum<__half>& acc, const __half* st) {
  namespace w = nvcuda::wmma;
  using ALay = typename std::conditional<kAContig, w::row_major, w::col_major>::type;
  using BLay = typename std::conditional<kBContig, w::row_major, w::col_major>::type;
  const __half* as = st;
  const __half* bs = st + kAsElems;
  const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
#pragma unroll
  for (int kk = 0; kk < kAsyncBK; kk += 16) {
    w::fragment<w::matrix_a, 16, 16, 16, __half, ALay> a;
    w::load_matrix_sync(a, kAContig ? as + (wm * 16) * kAsLdK + kk : as + kk * kAsLdM + wm * 16,
                        kAContig ? kAsLdK : kAsLdM);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int n = wn * 32 + j * 16;
      w::fragment<w::matrix_b, 16, 16, 16, __half, BLay> b;
      if (kBContig) w::load_matrix_sync(b, bs + kk * kBsLdN + n, kBsLdN);
      else w::load_matrix_sync(b, bs + n * kBsLdK + kk, kBsLdK);
      w::mma_sync(acc.f[j], a, b, acc.f[j]);
    }
  }
}

// K range [kbeg, kend) in stages of 64 (the last one zero-filled past kend). Ends behind a block
// barrier: the caller's result tile overlays the stages.
template <class P>
__device__ __forceinline__ void mainloop_async(const P& p, int m0, int n0, int kbeg, int kend, Accum<__half>& acc) {
  extern __shared__ __align__(128) unsigned char gemm_dyn[];
  __half* stages = reinterpret_cast<__half*>(gemm_dyn);
  constexpr int S = kAsyncStages, BK = kAsyncBK;
  const int nst = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;
  // B's first stages go out before the PDL wait: in phase 5's step, B is a weight matrix or
  // activations of the forward pass, which the kernel launched just before does not write (except
  // where p.b_fresh: then after it); A is written by it (the previous layer's output or gradient).
  const bool early_b = !p.b_fresh;
  if (early_b) {
#pragma unroll
    for (int i = 0; i < S - 1; ++i)
      if (i < nst) load_b_async(p, n0, kbeg + i * BK, kend, stages + i * kStageElems);
  }
  pdl_wait();
  pdl_launch_dependents();
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (i < nst) {
      if (!early_b) load_b_async(p, n0, kbeg + i * BK, kend, stages + i * kStageElems);
      load_a_async(p, m0, kbeg + i * BK, kend, stages + i * kStageElems);
    }
    __pipeline_commit();  // group i: stage i's A (and B; group 0 also every early B)
  }
  p.epi.prefetch(m0, n0, p.M, p.N);  // under the first stages' latency
  for (int t = 0; t < nst; ++t) {
    __pipeline_wait_prior(S - 2);  // stage t has landed (this thread's copies) ...
    __syncthreads();               // ... and everyone's; every warp is done with stage t - 1
    if (t + S - 1 < nst) {
      __half* st = stages + ((t + S - 1) % S) * kStageElems;
      load_a_async(p, m0, kbeg + (t + S - 1) * BK, kend, st);
      load_b_async(p, n0, kbeg + (t + S - 1) * BK, kend, st);
    }
    __pipeline_commit();
    mma_stage<P::AView::kContig, P::BView::kContig>(acc, stages + (t % S) * kStageElems);
  }
  __pipeline_wait_prior(0);
  __syncthreads();
}

}  // namespace mlp
}  // namespace nb
