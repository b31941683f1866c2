// common/mlp/kernels.cuh — the kernels of the straightforward MLP trainer, one per operation.
//
// The matrix products are one tiled GEMM, C[M,N] = A[M,K] · B[K,N] with fp32 accumulation, in two
// flavours chosen by the operand type T:
//   T = float : shared-memory tiled SIMT GEMM. Block tile 32x64, k-tile 32, 256 threads, each
//               thread owns a 2x4 micro-tile; tiles are double-buffered in shared memory and the
//               next tile is fetched into registers while the current one is multiplied.
//   T = half  : tensor-core GEMM (WMMA 16x16x16, fp16 operands, fp32 accumulators). Same block
//               tile, 4 warps each owning a 16x32 piece (two accumulator fragments). Long K
//               slices of plain fp16 matrices skip the registers: their tiles go global -> shared
//               memory by cp.async, 3 stages of 64 values of k (see "the cp.async mainloop").
// Each launch picks a kernel instance that contains only the mainloop it runs (and no split-K
// code when the product is not split); blocks walk the output tiles row by row.
// Operands are *views*: a view maps a logical element (row, col) to memory and loads V consecutive
// elements along its contiguous axis (16-byte vector loads when the leading dimension and the base
// pointer allow it, element by element with bounds checks otherwise). The three products of an MLP
// layer are the same kernel with different views:
//   forward        Z  = H · W^T      A = H [B,in] (row-major), B(k,n) = W[n][k]
//   backward data  dH = dZ · W       A = dZ [B,out],           B(k,n) = W[k][n]
//   backward weight dW = dZ^T · H    A(m,k) = dZ[k][m],        B = H [B,in]
// Any M, N, K works: loads outside the matrix give 0 (K not a multiple of the k-tile becomes a
// zero-padded tile) and the epilogue writes only elements inside C.
// Split-K: when the output has few tiles (a batch of 32 gives one tile row), the K range is cut
// into `splits` slices run by separate blocks; each writes its partial tile to a workspace, and the
// last block of a tile to finish (an atomic counter after a __threadfence) adds the partials in
// slice order and runs the epilogue. The sum order is fixed, so results are deterministic.
// The epilogue is a functor that receives the finished fp32 tile in shared memory; phase 4 only
// stores it (bias, activation, dropout, loss and optimizer are separate kernels below); phase 5
// plugs fused epilogues into the same mainloop.
//
// Every kernel is a template (or in an anonymous namespace) so that phases and tests can include
// this header in several translation units.
#pragma once
#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "adam_step.h"
#include "check.cuh"
#include "mlp_common.h"
#include "pdl.cuh"

namespace nb {
namespace mlp {

// ------------------------------------------------------------------ element helpers
__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_f<__half>(float x) {
  return __float2half_rn(x);
}

// ------------------------------------------------------------------ programmatic dependent launch
// Phase 5 launches its step kernels with programmatic stream serialization (PDL, common/pdl.cuh):
// a kernel may start while the one before it is still running. It then must not read what that
// kernel writes, nor write what it reads, before pdl_wait() (the previous grid has completed and
// its writes are visible); what older kernels wrote (the weights, written a step earlier) it may
// fetch before. pdl_launch_dependents() lets the next kernel start. Both are no-ops in a kernel
// launched without the attribute (phase 4, tests, evaluation).

// Launches kernel k, with the PDL attribute when pdl is true. Every launch of the GEMMs and the
// fused backward kernel goes through here.
template <class... KArgs, class... Args>
inline void launch_kernel(void (*k)(KArgs...), int grid, int block, size_t smem, cudaStream_t st, bool pdl,
                          Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(static_cast<unsigned>(block));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, k, args...));
}

// ------------------------------------------------------------------ tile configuration
// Block tile 32 x 64, k-tile 32. (A k-tile of 64 in the register loop for fp16 was measured
// slower on an H100: 120 registers allow 4 blocks per SM, so the 640 blocks of a 32x8192x8192
// product no longer fit one wave: forward 0.151 vs 0.139 ms, backward-data 0.186 vs 0.114 ms. The
// cp.async loop below, which holds no tile in registers, does use stages of 64.)
constexpr int kBM = 32, kBN = 64;
constexpr int kLdc = kBN + 4;  // fp32 result tile in shared memory (padded rows)

template <class T>
struct TileCfg;
template <>
struct TileCfg<float> {
  static constexpr int kThreads = 256;
  static constexpr int kBK = 32;
  static constexpr int kV = 4;           // elements per 16-byte vector
  static constexpr int kLdA = kBM + 4;   // As[k][m] (k-major: a thread reads 2 consecutive m)
  static constexpr int kLdB = kBN + 4;   // Bs[k][n]
  static constexpr int kAElems = kBK * kLdA, kBElems = kBK * kLdB;
};
template <>
struct TileCfg<__half> {
  static constexpr int kThreads = 128;
  static constexpr int kBK = 32;
  static constexpr int kV = 8;
  static constexpr int kLdA = kBK + 8;   // As[m][k] (row-major for the WMMA A fragment)
  static constexpr int kLdB = kBN + 8;   // Bs[k][n]
  static constexpr int kAElems = kBM * kLdA, kBElems = kBK * kLdB;
};

template <class T>
struct alignas(128) GemmSmem {
  union {
    struct {
      T a[2][TileCfg<T>::kAElems];
      T b[2][TileCfg<T>::kBElems];
    } stage;
    float c[kBM * kLdc];
  };
};

// ------------------------------------------------------------------ operand views
// Row-major storage of a logical matrix, or of its transpose.
// kContigCol = true : element (r, c) at p[r*ld + c]   (chunks run along c)
// kContigCol = false: element (r, c) at p[c*ld + r]   (chunks run along r)
template <class T, bool kContigCol>
struct MatView {
  using Elem = T;
  static constexpr bool kContig = kContigCol;
  const T* p = nullptr;
  int ld = 0;
  bool vec_ok = false;  // 16-byte loads allowed (ld % V == 0 and p 16-byte aligned)

  // Loads V elements starting at (r, c) along the contiguous axis; (rows, cols) bound the matrix.
  template <int V>
  __device__ __forceinline__ void load(int r, int c, int rows, int cols, T (&v)[V]) const {
    const int outer = kContigCol ? r : c, inner = kContigCol ? c : r;
    const int outer_lim = kContigCol ? rows : cols, inner_lim = kContigCol ? cols : rows;
    if (outer >= outer_lim) {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = from_f<T>(0.f);
      return;
    }
    const T* src = p + static_cast<size_t>(outer) * ld + inner;
    if (vec_ok && inner + V <= inner_lim) {
      const uint4 u = __ldg(reinterpret_cast<const uint4*>(src));
      const T* t = reinterpret_cast<const T*>(&u);
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = t[i];
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = (inner + i < inner_lim) ? src[i] : from_f<T>(0.f);
    }
  }
};

template <class T, bool kContigCol>
inline MatView<T, kContigCol> make_view(const T* p, int ld) {
  MatView<T, kContigCol> v;
  v.p = p;
  v.ld = ld;
  constexpr int V = TileCfg<T>::kV;
  v.vec_ok = (ld % V == 0) && (reinterpret_cast<uintptr_t>(p) % 16 == 0);
  return v;
}

// ------------------------------------------------------------------ epilogue: store the tile
// C[m*ldc + n] = acc (fp32). Phase 4 stores every product like this.
struct StoreEpi {
  float* c = nullptr;
  int ldc = 0;
  // Every epilogue has prefetch(): called when the block starts, before the K loop, so that what
  // the epilogue needs besides the tile (labels, bias, the step number) is loaded under the loop.
  __device__ void prefetch(int, int, int, int) const {}
  // A whole tile of an unsplit product may be stored from the accumulators (DirectStore).
  __device__ bool direct_ok(int m0, int n0, int M, int N) const {
    return m0 + kBM <= M && n0 + kBN <= N && ldc % 4 == 0 && reinterpret_cast<uintptr_t>(c) % 32 == 0;
  }
  // Four columns a thread at a time: one 16-byte store where the row allows it (the store is most
  // of the cost of a weight gradient: K = 32, an 8192 x 8192 fp32 result).
  __device__ void operator()(const float* cs, int m0, int n0, int M, int N) const {
    const int nt = blockDim.x;
    const bool vec = ldc % 4 == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0;
    for (int e = threadIdx.x * 4; e < kBM * kBN; e += nt * 4) {
      const int r = e / kBN, col = e % kBN, m = m0 + r, n = n0 + col;
      if (m >= M) continue;
      const float4 v = *reinterpret_cast<const float4*>(&cs[r * kLdc + col]);
      float* dst = c + static_cast<size_t>(m) * ldc + n;
      if (vec && n + 4 <= N) {
        *reinterpret_cast<float4*>(dst) = v;
      } else {
        const float w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (n + j < N) dst[j] = w[j];
      }
    }
  }
};

// ------------------------------------------------------------------ one GEMM problem
template <class AV, class BV, class Epi>
struct GemmProblem {
  using AView = AV;
  using BView = BV;
  using Elem = typename AV::Elem;
  static constexpr int kBK = TileCfg<Elem>::kBK;
  int M = 0, N = 0, K = 0;
  int splits = 1, kchunk = 0;   // kchunk: K range per split, a multiple of the k-tile
  AV a;
  BV b;
  Epi epi;
  float* ws = nullptr;          // split-K partial tiles: tiles * splits * kBM * kBN floats
  unsigned* counters = nullptr; // one per output tile, zero between launches
  __host__ __device__ int tiles_m() const { return (M + kBM - 1) / kBM; }
  __host__ __device__ int tiles_n() const { return (N + kBN - 1) / kBN; }
  __host__ __device__ int tiles() const { return tiles_m() * tiles_n(); }
  __host__ __device__ int blocks() const { return tiles() * splits; }
};

// Picks the split count: enough blocks to cover the GPU about `waves` times, at least two k-tiles
// per split, at most 16 splits. Workspace needs: tiles * splits * kBM * kBN floats.
// (min_ktiles: the fewest k-tiles per split; phase 5 passes 1.)
template <class P>
inline void plan_splits(P& p, int sm_count, int waves = 4, int max_splits = 16, int min_ktiles = 2) {
  constexpr int kBK = P::kBK;
  const int ktiles = (p.K + kBK - 1) / kBK;
  if (ktiles <= 1) {
    p.splits = 1;
    p.kchunk = kBK;
    return;
  }
  int s = 1;
  if (p.tiles() < sm_count * waves) {
    s = (sm_count * waves + p.tiles() - 1) / p.tiles();
    s = s < max_splits ? s : max_splits;
    const int by_k = ktiles / (min_ktiles < 1 ? 1 : min_ktiles);
    s = s < by_k ? s : by_k;
    if (s < 1) s = 1;
  }
  int per = (ktiles + s - 1) / s;
  s = (ktiles + per - 1) / per;  // no empty splits
  p.splits = s;
  p.kchunk = per * kBK;
}

template <class P>
inline size_t ws_floats(const P& p) {
  return p.splits > 1 ? static_cast<size_t>(p.tiles()) * p.splits * kBM * kBN : 0;
}

// ------------------------------------------------------------------ the mainloop
template <class T>
struct Regs {  // one k-tile of A and B in registers, V elements per chunk
  static constexpr int kBK = TileCfg<T>::kBK, V = TileCfg<T>::kV, NT = TileCfg<T>::kThreads;
  static constexpr int kA = kBM * kBK / V / NT, kB = kBK * kBN / V / NT;
  T a[kA][V];
  T b[kB][V];
};

template <class T, class AV>
__device__ __forceinline__ void load_a_regs(const AV& a, int m0, int k0, int M, int kend, Regs<T>& rg) {
  constexpr int V = TileCfg<T>::kV, NT = TileCfg<T>::kThreads, BK = TileCfg<T>::kBK;
#pragma unroll
  for (int i = 0; i < Regs<T>::kA; ++i) {
    const int c = threadIdx.x + i * NT;
    if (AV::kContig) {  // chunks along k: row m, k .. k+V-1
      const int r = c / (BK / V), kk = (c % (BK / V)) * V;
      a.template load<V>(m0 + r, k0 + kk, M, kend, rg.a[i]);
    } else {            // chunks along m: column k, m .. m+V-1
      const int kk = c / (kBM / V), r = (c % (kBM / V)) * V;
      a.template load<V>(m0 + r, k0 + kk, M, kend, rg.a[i]);
    }
  }
}

template <class T, class BV>
__device__ __forceinline__ void load_b_regs(const BV& b, int n0, int k0, int N, int kend, Regs<T>& rg) {
  constexpr int V = TileCfg<T>::kV, NT = TileCfg<T>::kThreads, BK = TileCfg<T>::kBK;
#pragma unroll
  for (int i = 0; i < Regs<T>::kB; ++i) {
    const int c = threadIdx.x + i * NT;
    if (BV::kContig) {  // chunks along n: row k, n .. n+V-1
      const int kk = c / (kBN / V), nn = (c % (kBN / V)) * V;
      b.template load<V>(k0 + kk, n0 + nn, kend, N, rg.b[i]);
    } else {            // chunks along k: column n, k .. k+V-1
      const int nn = c / (BK / V), kk = (c % (BK / V)) * V;
      b.template load<V>(k0 + kk, n0 + nn, kend, N, rg.b[i]);
    }
  }
}

// Writes the register chunks into shared memory in the layout of TileCfg<T>.
template <class T, bool kAContig, bool kBContig>
__device__ __forceinline__ void store_regs(T* as, T* bs, const Regs<T>& rg) {
  using C = TileCfg<T>;
  constexpr int V = C::kV, NT = C::kThreads, BK = C::kBK;
  constexpr bool kSimt = std::is_same<T, float>::value;
#pragma unroll
  for (int i = 0; i < Regs<T>::kA; ++i) {
    const int c = threadIdx.x + i * NT;
    int r, kk;
    if (kAContig) r = c / (BK / V), kk = (c % (BK / V)) * V;
    else kk = c / (kBM / V), r = (c % (kBM / V)) * V;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int rr = kAContig ? r : r + j, kj = kAContig ? kk + j : kk;
      if (kSimt) as[kj * C::kLdA + rr] = rg.a[i][j];
      else as[rr * C::kLdA + kj] = rg.a[i][j];
    }
  }
#pragma unroll
  for (int i = 0; i < Regs<T>::kB; ++i) {
    const int c = threadIdx.x + i * NT;
    int kk, nn;
    if (kBContig) kk = c / (kBN / V), nn = (c % (kBN / V)) * V;
    else nn = c / (BK / V), kk = (c % (BK / V)) * V;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int kj = kBContig ? kk : kk + j, nj = kBContig ? nn + j : nn;
      bs[kj * C::kLdB + nj] = rg.b[i][j];
    }
  }
}

// Accumulators of one block tile: SIMT (2x4 per thread) or WMMA (two 16x16 fragments per warp).
template <class T>
struct Accum;
template <>
struct Accum<float> {
  float v[2][4];
  __device__ Accum() {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) v[i][j] = 0.f;
  }
  // Thread (ty, tx) = (tid / 16, tid % 16) owns rows 2ty, 2ty+1 and columns tx + 16j.
  __device__ __forceinline__ void mma(const float* as, const float* bs) {
    using C = TileCfg<float>;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll 8
    for (int kk = 0; kk < C::kBK; ++kk) {
      const float2 a = *reinterpret_cast<const float2*>(&as[kk * C::kLdA + ty * 2]);
      float b[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = bs[kk * C::kLdB + tx + 16 * j];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[0][j] = fmaf(a.x, b[j], v[0][j]);
        v[1][j] = fmaf(a.y, b[j], v[1][j]);
      }
    }
  }
  // The 32 x 64 tile into c (row stride ld): the shared tile, or the output itself.
  __device__ __forceinline__ void store(float* c, int ld) const {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) c[static_cast<size_t>(ty * 2 + i) * ld + tx + 16 * j] = v[i][j];
  }
};
template <>
struct Accum<__half> {
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> f[2];
  __device__ Accum() {
    nvcuda::wmma::fill_fragment(f[0], 0.f);
    nvcuda::wmma::fill_fragment(f[1], 0.f);
  }
  // Warp w = (wm, wn) = (w / 2, w % 2) owns rows 16wm..16wm+15 and columns 32wn..32wn+31.
  __device__ __forceinline__ void mma(const __half* as, const __half* bs) {
    using C = TileCfg<__half>;
    const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
#pragma unroll
    for (int kk = 0; kk < C::kBK; kk += 16) {
      nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> a;
      nvcuda::wmma::load_matrix_sync(a, as + (wm * 16) * C::kLdA + kk, C::kLdA);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __half, nvcuda::wmma::row_major> b;
        nvcuda::wmma::load_matrix_sync(b, bs + kk * C::kLdB + wn * 32 + j * 16, C::kLdB);
        nvcuda::wmma::mma_sync(f[j], a, b, f[j]);
      }
    }
  }
  // The 32 x 64 tile into c (row stride ld, a multiple of 4; c 32-byte aligned).
  __device__ __forceinline__ void store(float* c, int ld) const {
    const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
#pragma unroll
    for (int j = 0; j < 2; ++j)
      nvcuda::wmma::store_matrix_sync(c + static_cast<size_t>(wm * 16) * ld + wn * 32 + j * 16, f[j], ld,
                                      nvcuda::wmma::mem_row_major);
  }
};

// An epilogue that declares `static constexpr bool kVecFixup = true` (phase 5's) gets the split-K
// fix-up below in its latency-tuned form: partials written and read as float4, the loads of up to
// 16 float4 per thread issued before they are added (in the same slice order, so the sums are
// bit-identical to the plain form, which phase 4 keeps).
template <class E, class = void>
struct VecFixup : std::false_type {};
template <class E>
struct VecFixup<E, std::void_t<decltype(E::kVecFixup)>> : std::integral_constant<bool, E::kVecFixup> {};

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
  // B's first stages go out before the PDL wait: in phase 5's step, B is never written by the
  // kernel launched just before (it is a weight matrix, or activations of the forward pass); A is
  // (the previous layer's output or gradient).
#pragma unroll
  for (int i = 0; i < S - 1; ++i)
    if (i < nst) load_b_async(p, n0, kbeg + i * BK, kend, stages + i * kStageElems);
  pdl_wait();
  pdl_launch_dependents();
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (i < nst) load_a_async(p, m0, kbeg + i * BK, kend, stages + i * kStageElems);
    __pipeline_commit();  // group i: stage i's A (group 0 also every prologue B)
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

// The register-staged loop: the loads of k-tile t+1 are in flight while tile t is multiplied.
template <class T, class P>
__device__ __forceinline__ void mainloop_regs(const P& p, int m0, int n0, int kbeg, int kend, int ntiles,
                                              Accum<T>& acc, GemmSmem<T>& sm) {
  constexpr int BK = TileCfg<T>::kBK;
  Regs<T> rg;
  pdl_wait();  // (PDL: everything this loop reads may come from the kernel just before)
  pdl_launch_dependents();
  // The epilogue's prefetch runs while the first k-tile's loads are in flight (its own loads and
  // any arithmetic it does overlap their latency).
  if (ntiles > 0) {
    load_a_regs<T>(p.a, m0, kbeg, p.M, kend, rg);
    load_b_regs<T>(p.b, n0, kbeg, p.N, kend, rg);
  }
  p.epi.prefetch(m0, n0, p.M, p.N);
  if (ntiles > 0) {
    store_regs<T, P::AView::kContig, P::BView::kContig>(sm.stage.a[0], sm.stage.b[0], rg);
    __syncthreads();
  }
  for (int t = 0; t < ntiles; ++t) {
    const int cur = t & 1;
    if (t + 1 < ntiles) {
      const int k0 = kbeg + (t + 1) * BK;
      load_a_regs<T>(p.a, m0, k0, p.M, kend, rg);
      load_b_regs<T>(p.b, n0, k0, p.N, kend, rg);
    }
    acc.mma(sm.stage.a[cur], sm.stage.b[cur]);
    if (t + 1 < ntiles) store_regs<T, P::AView::kContig, P::BView::kContig>(sm.stage.a[cur ^ 1], sm.stage.b[cur ^ 1], rg);
    __syncthreads();
  }
}

// Split-K fix-up of one kBM x kBN fp32 tile `c` (row stride kLdc, in shared memory) computed by
// slice `split` of `splits`: the tile goes to its workspace slot (ws: per tile, `splits` slots of
// kBM * kBN floats), and the last block of the tile to finish (an atomic counter after a fence)
// adds all slots in slice order into c, resets the counter and returns true; the others return
// false. kVec: float4 traffic and up to 16 float4 loads a thread issued before they are added
// (the same order, so the same sums). Every thread of the block (NT of them) must call it.
template <int NT, bool kVec>
__device__ bool splitk_fixup(float* c, float* ws, unsigned* counters, int tile, int split, int splits) {
  __shared__ bool s_last;
  constexpr int kE4 = kBM * kBN / 4 / NT;  // float4 of the tile per thread: 2 (256 threads), 4 (128)
  float* mine = ws + (static_cast<size_t>(tile) * splits + split) * (kBM * kBN);
  if constexpr (kVec) {
#pragma unroll
    for (int i = 0; i < kE4; ++i) {
      const int e = (threadIdx.x + i * NT) * 4;
      reinterpret_cast<float4*>(mine)[e / 4] = *reinterpret_cast<const float4*>(&c[(e / kBN) * kLdc + e % kBN]);
    }
  } else {
    for (int e = threadIdx.x; e < kBM * kBN; e += NT) mine[e] = c[(e / kBN) * kLdc + e % kBN];
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned prev = atomicAdd(&counters[tile], 1u);
    s_last = (prev == static_cast<unsigned>(splits - 1));
  }
  __syncthreads();
  if (!s_last) return false;
  __threadfence();
  const float* all = ws + static_cast<size_t>(tile) * splits * (kBM * kBN);
  if constexpr (kVec) {
    constexpr int kG = 16 / kE4;  // slices loaded per round
    const float4* all4 = reinterpret_cast<const float4*>(all);
    float4 s[kE4];
#pragma unroll
    for (int i = 0; i < kE4; ++i) s[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int z0 = 0; z0 < splits; z0 += kG) {
      float4 v[kG][kE4];
#pragma unroll
      for (int g = 0; g < kG; ++g)
#pragma unroll
        for (int i = 0; i < kE4; ++i)
          v[g][i] = (z0 + g < splits) ? __ldcg(all4 + static_cast<size_t>(z0 + g) * (kBM * kBN / 4) + threadIdx.x + i * NT)
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int g = 0; g < kG; ++g)
        if (z0 + g < splits)
#pragma unroll
          for (int i = 0; i < kE4; ++i) s[i].x += v[g][i].x, s[i].y += v[g][i].y, s[i].z += v[g][i].z, s[i].w += v[g][i].w;
    }
#pragma unroll
    for (int i = 0; i < kE4; ++i) {
      const int e = (threadIdx.x + i * NT) * 4;
      *reinterpret_cast<float4*>(&c[(e / kBN) * kLdc + e % kBN]) = s[i];
    }
  } else {
    for (int e = threadIdx.x; e < kBM * kBN; e += NT) {
      float s = 0.f;
      for (int z = 0; z < splits; ++z) s += __ldcg(all + static_cast<size_t>(z) * (kBM * kBN) + e);
      c[(e / kBN) * kLdc + e % kBN] = s;
    }
  }
  if (threadIdx.x == 0) counters[tile] = 0u;  // ready for the next launch
  __syncthreads();
  return true;
}

// Which mainloop a kernel instance contains: the register loop only, the cp.async loop only, or
// both with the choice made per problem at run time (gemm_pair_kernel). launch_gemm picks the
// instance, so a kernel carries only the code (and registers) of the loop it runs.
enum class Loop { Regs, Async, Either };

// An epilogue with direct_ok() (StoreEpi) may take the accumulators straight to global memory,
// without the round trip through the shared tile, when the product is not split and the tile is
// whole: the weight gradient (K = batch, one k-tile per block, 8 KB of fp32 out) is mostly that store.
template <class E, class = void>
struct DirectStore : std::false_type {};
template <class E>
struct DirectStore<E, std::void_t<decltype(std::declval<const E&>().direct_ok(0, 0, 0, 0))>> : std::true_type {};

// Computes one (tile, split) of problem P into sm.c, runs the split-K fix-up and the epilogue.
// kSplit = false: an instance for unsplit problems only, without the fix-up's code (whose 16
// float4 loads in flight cost registers: 109 instead of 88 on the fp16 weight gradient).
template <class T, Loop kLoop, class P, bool kSplit = true>
__device__ void gemm_tile(const P& p, int linear_block, GemmSmem<T>& sm) {
  using C = TileCfg<T>;
  constexpr int BK = C::kBK;
  const int tiles = p.tiles();
  const int split = linear_block / tiles, tile = linear_block % tiles;
  // Consecutive blocks take consecutive column tiles of the same rows: a tall output (the weight
  // gradient, 8192 x 8192 fp32) is then written row by row, whole DRAM pages at a time, not in
  // narrow column strips 32 KB apart.
  const int bn = tile % p.tiles_n(), bm = tile / p.tiles_n();
  const int m0 = bm * kBM, n0 = bn * kBN;
  const int kbeg = split * p.kchunk;
  const int kend = min(p.K, kbeg + p.kchunk);
  const int ntiles = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;

  Accum<T> acc;
  if constexpr (kLoop == Loop::Async) {
    mainloop_async(p, m0, n0, kbeg, kend, acc);
  } else if constexpr (kLoop == Loop::Either && AsyncEligible<P>::value) {
    if (uses_async(p)) mainloop_async(p, m0, n0, kbeg, kend, acc);
    else mainloop_regs(p, m0, n0, kbeg, kend, ntiles, acc, sm);
  } else {
    mainloop_regs(p, m0, n0, kbeg, kend, ntiles, acc, sm);
  }

  using Epi = typename std::decay<decltype(p.epi)>::type;
  if constexpr (DirectStore<Epi>::value) {
    if (p.splits == 1 && p.epi.direct_ok(m0, n0, p.M, p.N)) {
      acc.store(p.epi.c + static_cast<size_t>(m0) * p.epi.ldc + n0, p.epi.ldc);
      return;
    }
  }

  // Accumulators -> shared fp32 tile (the stage buffers are dead: both loops end behind a barrier).
  acc.store(sm.c, kLdc);
  __syncthreads();

  if constexpr (kSplit) {
    if (p.splits > 1 && !splitk_fixup<C::kThreads, VecFixup<Epi>::value>(sm.c, p.ws, p.counters, tile, split, p.splits))
      return;
  }
  p.epi(sm.c, m0, n0, p.M, p.N);
}

// The GemmSmem of a block: at the start of its dynamic shared memory (gemm_dyn_smem bytes).
template <class T>
__device__ __forceinline__ GemmSmem<T>& gemm_smem() {
  extern __shared__ __align__(128) unsigned char gemm_dyn[];
  return *reinterpret_cast<GemmSmem<T>*>(gemm_dyn);
}

// One problem per launch, its instance chosen at launch (kAsync = uses_async(p); kSplit = false
// only for unsplit register-loop problems). Tag only names the kernel (profiles show what each
// launch was for).
// Blocks an SM that each instance is compiled for (its register budget):
//   * with a plain store epilogue (DirectStore: phase 4, --gemm-compare), the unsplit register-loop
//     instance: 64 registers a thread (8 blocks an SM in fp16, 4 in fp32). Its blocks are short (one
//     or two k-tiles, then the store), so the SM needs many resident to keep the stores flowing.
//     (Phase 5's fused epilogues would spill under that bound.)
//   * every other fp16 instance: 5 blocks (at most 96 registers), the count the 42 KB of cp.async
//     stages allow, so that 640 blocks (a 32 x 8192 output in 5 splits) run in one wave. Without
//     the bound the gathered first layer's split instance took 100 registers, 4 blocks an SM, and
//     ran its 640 blocks at h = 8192 in two waves: 36.6 us against 24.5 (H100, records of 2275dbb
//     against 211693b).
template <class T, class P, bool kAsync, bool kSplit>
constexpr int gemm_min_blocks() {
  if (!kAsync && !kSplit && DirectStore<typename std::decay<decltype(P::epi)>::type>::value)
    return 65536 / (64 * TileCfg<T>::kThreads);
  return std::is_same<T, __half>::value ? 5 : 1;
}
template <class Tag, class T, class P, bool kAsync, bool kSplit>
__global__ void __launch_bounds__(TileCfg<T>::kThreads, (gemm_min_blocks<T, P, kAsync, kSplit>()))
    gemm_kernel(P p) {
  gemm_tile<T, kAsync ? Loop::Async : Loop::Regs, P, kSplit>(p, blockIdx.x, gemm_smem<T>());
}

// Two independent problems in one launch (phase 5 pairs a weight update with the next layer's
// backward-data product): blocks [0, p1.blocks()) run p1, the rest p2.
template <class Tag, class T, class P1, class P2>
__global__ void __launch_bounds__(TileCfg<T>::kThreads) gemm_pair_kernel(P1 p1, P2 p2) {
  GemmSmem<T>& sm = gemm_smem<T>();
  const int b1 = p1.blocks();
  if (static_cast<int>(blockIdx.x) < b1) gemm_tile<T, Loop::Either, P1>(p1, blockIdx.x, sm);
  else gemm_tile<T, Loop::Either, P2>(p2, blockIdx.x - b1, sm);
}

// pdl: launch with programmatic stream serialization (phase 5's step; see pdl_wait).
template <class Tag, class T, class P>
inline void launch_gemm(const P& p, cudaStream_t st, bool pdl = false) {
  if (p.M <= 0 || p.N <= 0) return;
  constexpr int NT = TileCfg<T>::kThreads;
  if constexpr (AsyncEligible<P>::value) {
    if (uses_async(p)) {
      launch_kernel(gemm_kernel<Tag, T, P, true, true>, p.blocks(), NT, gemm_dyn_smem(p), st, pdl, p);
      return;
    }
  }
  if (p.splits == 1) launch_kernel(gemm_kernel<Tag, T, P, false, false>, p.blocks(), NT, gemm_dyn_smem(p), st, pdl, p);
  else launch_kernel(gemm_kernel<Tag, T, P, false, true>, p.blocks(), NT, gemm_dyn_smem(p), st, pdl, p);
}

template <class Tag, class T, class P1, class P2>
inline void launch_gemm_pair(const P1& p1, const P2& p2, cudaStream_t st, bool pdl = false) {
  const size_t dyn = gemm_dyn_smem(p1) > gemm_dyn_smem(p2) ? gemm_dyn_smem(p1) : gemm_dyn_smem(p2);
  launch_kernel(gemm_pair_kernel<Tag, T, P1, P2>, p1.blocks() + p2.blocks(), TileCfg<T>::kThreads, dyn, st, pdl, p1,
                p2);
}

// Kernel-name tags of phase 4 (they show in our traces and in nsys).
struct p4_gemm_fwd {};
struct p4_gemm_bwd_data {};
struct p4_gemm_bwd_weight {};

// ------------------------------------------------------------------ element-wise kernels (phase 4)
// H = act(Z + b): relu on hidden layers; the last layer keeps fp32 logits (T = float, relu=false).
template <class T>
__global__ void bias_act_kernel(const float* __restrict__ z, const float* __restrict__ b, T* __restrict__ h, int rows,
                                int cols, bool relu) {
  const size_t n = static_cast<size_t>(rows) * cols;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float v = z[i] + b[i % cols];
    if (relu) v = fmaxf(v, 0.f);
    h[i] = from_f<T>(v);
  }
}

// Inverted dropout in place; keep[i] = 1 when element i survives (for the backward pass and for
// validation). Mask bits: see mlp_common.h (Philox4x32-10, counter {i, layer, step}).
template <class T>
__global__ void dropout_kernel(T* __restrict__ h, uint8_t* __restrict__ keep, int n, uint64_t key, uint32_t layer,
                               uint64_t step, uint32_t threshold, float scale) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const bool k = dropout_bits_dev(key, layer, step, static_cast<uint32_t>(i)) >= threshold;
    keep[i] = k;
    h[i] = from_f<T>(k ? to_f(h[i]) * scale : 0.f);
  }
}

// One row of softmax cross-entropy: returns the row's loss (logsumexp(z) - z[y]) and writes
// dz[j] = (softmax(z)_j - [j == y]) * inv as T. dz may be z itself (each z[j] is read before dz[j]
// is written): phase 5's persistent kernel turns its logits into dz3 in place.
template <class T>
__device__ __forceinline__ float softmax_ce_row(const float* z, int cols, int y, float inv, T* dz) {
  float mx = -INFINITY;
  for (int j = 0; j < cols; ++j) mx = fmaxf(mx, z[j]);
  float s = 0.f;
  for (int j = 0; j < cols; ++j) s += expf(z[j] - mx);
  const float lse = mx + logf(s);
  const float loss = lse - z[y];
  for (int j = 0; j < cols; ++j) {
    const float pj = expf(z[j] - lse);
    dz[j] = from_f<T>((pj - (j == y ? 1.f : 0.f)) * inv);
  }
  return loss;
}

// Row-wise softmax cross-entropy on fp32 logits [rows, cols]: row_loss[r] = logsumexp - z[label];
// dz = (softmax - onehot) / rows (the gradient of the batch mean), stored as T.
template <class T>
__global__ void softmax_ce_kernel(const float* __restrict__ logits, const int* __restrict__ labels, int rows, int cols,
                                  float* __restrict__ row_loss, T* __restrict__ dz) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  row_loss[r] = softmax_ce_row(logits + static_cast<size_t>(r) * cols, cols, labels[r],
                               1.f / static_cast<float>(rows), dz + static_cast<size_t>(r) * cols);
}

// out[0] = mean(x[0..n)), fixed summation order (one block). flag[0] = 1 if it is not finite.
template <int kThreads = 256>
__global__ void mean_kernel(const float* __restrict__ x, int n, float* __restrict__ out, int* __restrict__ flag) {
  __shared__ double s[kThreads];
  double acc = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) acc += x[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float m = static_cast<float>(s[0] / n);
    out[0] = m;
    if (!isfinite(m)) flag[0] = 1;
  }
}

// dZ = dH * relu'(.) * dropout mask: the output h is > 0 exactly when the unit was active and kept.
template <class T>
__global__ void relu_dropout_bwd_kernel(const float* __restrict__ dh, const T* __restrict__ h,
                                        const uint8_t* __restrict__ keep, float scale, T* __restrict__ dz, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const bool live = to_f(h[i]) > 0.f && (keep == nullptr || keep[i]);
    dz[i] = from_f<T>(live ? dh[i] * scale : 0.f);
  }
}

// db[c] = sum over rows of dz[r][c] (one thread per column, rows in order: deterministic).
template <class T>
__global__ void bias_grad_kernel(const T* __restrict__ dz, int rows, int cols, float* __restrict__ db) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.f;
  for (int r = 0; r < rows; ++r) s += to_f(dz[static_cast<size_t>(r) * cols + c]);
  db[c] = s;
}

// PyTorch's Adam (foreach form): m = lerp(m, g, 1-b1); v = b2 v + (1-b2) g^2;
// p -= step_size * m / (sqrt(v) / bc2_sqrt + eps), step_size = lr / (1 - b1^t),
// bc2_sqrt = sqrt(1 - b2^t). Like PyTorch, the constants are formed in double and rounded to
// float once (1 - 0.999f in float would be off by 1.3e-5 relative). p16 (optional) receives the
// fp16 copy of the new p.
struct AdamHyper {
  float omb1, b2, omb2, eps, step_size, bc2_sqrt;
};
__host__ __device__ inline AdamHyper adam_hyper(double lr, int64_t t, double b1 = 0.9, double b2 = 0.999,
                                                double eps = 1e-8) {
  AdamHyper h;
  h.omb1 = static_cast<float>(1.0 - b1);
  h.b2 = static_cast<float>(b2);
  h.omb2 = static_cast<float>(1.0 - b2);
  h.eps = static_cast<float>(eps);
  h.step_size = static_cast<float>(lr / (1.0 - pow(b1, static_cast<double>(t))));
  h.bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(b2, static_cast<double>(t))));
  return h;
}

__device__ __forceinline__ float adam_apply(float& p, float g, float& m, float& v, const AdamHyper& h) {
  m = m + h.omb1 * (g - m);
  v = v * h.b2 + h.omb2 * g * g;
  // A step that cannot change p (adam_step.h: m zero or subnormal) is skipped: same bits, and no
  // division slow path, which a warp runs for all its lanes if one needs it (m == 0: ~4k extra
  // instructions a step in phase 5's persistent kernel; subnormal m, most of MNIST's border
  // pixels after a while: ~0.45 us of its 11 us W1 step, with -ftz=true as the probe).
  if (adam_step_negligible(p, m, h.step_size, h.eps)) return p;
  const float denom = sqrtf(v) / h.bc2_sqrt + h.eps;
  p = p - h.step_size * (m / denom);
  return p;
}

template <class Dummy = void>
__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, __half* __restrict__ p16, size_t n, AdamHyper h) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float pi = p[i], mi = m[i], vi = v[i];
    adam_apply(pi, g[i], mi, vi, h);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (p16) p16[i] = __float2half_rn(pi);
  }
}

template <class Dummy = void>
__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, __half* __restrict__ p16, size_t n,
                           float lr) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float pi = p[i] - lr * g[i];
    p[i] = pi;
    if (p16) p16[i] = __float2half_rn(pi);
  }
}

template <class Dummy = void>
__global__ void to_half_kernel(const float* __restrict__ x, __half* __restrict__ y, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] = __float2half_rn(x[i]);
}

// The host-gathered batch arrives as bytes (B x 784 pixels, then B labels): x = pixel / 255 in T,
// labels as int.
template <class T>
__global__ void bytes_to_batch_kernel(const uint8_t* __restrict__ bytes, int B, int D, T* __restrict__ x,
                                      int* __restrict__ labels) {
  const int n = B * D;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n + B; i += gridDim.x * blockDim.x) {
    if (i < n) x[i] = from_f<T>(static_cast<float>(bytes[i]) / 255.0f);
    else labels[i - n] = bytes[i];
  }
}

// Grid for a grid-stride element-wise kernel over n elements.
inline int ew_blocks(size_t n, int threads = 256, int cap = 4096) {
  size_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<int>(b < static_cast<size_t>(cap) ? b : cap);
}

}  // namespace mlp
}  // namespace nb
