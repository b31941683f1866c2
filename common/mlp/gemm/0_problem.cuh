// common/mlp/gemm/0_problem.cuh — the GEMM ladder, step 0: what a product is before any mainloop.
// Element conversions, the launch helper (with the PDL attribute), the block tile and its shared
// memory, operand views, the plain store epilogue, one GEMM problem and its split-K planning.
// (Read in order: 0_problem, 1_register_loop, 2_cp_async, 3_split_k, 4_kernels; common/mlp/kernels.cuh
// includes them all and says how the pieces fit.)
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "check.cuh"
#include "mlp/mlp_common.h"
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
// A pixel byte as the fp32 value byte / 255 without a division (an IEEE division is a dozen
// instructions; step 5 reads every byte of its tiles once per fragment, and the division made its
// gathered products three times slower than its fp32 ones): a product by 1/255 and one correction
// step, which gives the correctly rounded quotient for every byte, so the value is the division's
// bit for bit (tests/gpu/test_mlp_kernels.cu checks all 256). Phase 5's gathered views use it too.
// (over_255: the same two steps for any fp32 x; step 5 divides its byte products' sums with it.)
__device__ __forceinline__ float over_255(float x) {
  const float r = 1.0f / 255.0f;
  const float q = x * r;
  return fmaf(fmaf(-q, 255.0f, x), r, q);
}
__device__ __forceinline__ float byte_over_255(unsigned b) { return over_255(static_cast<float>(b)); }

// ------------------------------------------------------------------ programmatic dependent launch
// Phase 5 launches its step kernels with programmatic stream serialization (PDL, common/pdl.cuh):
// a kernel may start while the one before it is still running. It then must not read what that
// kernel writes, nor write what it reads, before pdl_wait() (the previous grid has completed and
// its writes are visible); what older kernels wrote (a layer's weights, written a step earlier) it
// may fetch before, except where the kernel just before wrote them: the first layer's weights,
// updated by the last kernel of the step before (GemmProblem::b_fresh).
// pdl_launch_dependents() lets the next kernel start. Both are no-ops in a kernel launched without
// the attribute (phase 4, tests, evaluation).

// Every launch of the GEMMs and the fused backward kernel goes through nb::launch_kernel
// (common/pdl.cuh), with the PDL attribute when pdl is true.
using nb::launch_kernel;

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
// Which mainloop computes the product (fp32 operands only; fp16 products always take Tile):
//   Tile    the 32 x 64 block tile of steps 1-4 (SIMT FMA for fp32, WMMA for fp16);
//   TF32x3  step 5: a 64 x 64 block tile on tensor cores, each fp32 operand split into two TF32
//           parts and three products summed in fp32 (two where one operand is the images' bytes,
//           exact in TF32; plan_tf32x3 sets it, with its own splits);
//   F16Mma  step 6: fp16 products on mma.sync in step 5's tile (plan_f16mma);
//   Fma64   step 7: fp32 FMAs in warp tiles in step 5's tile (plan_fma64);
//   F16Stream  step 8: fp16 products of at most 32 rows, the weights streamed into the fragments
//           (plan_stream_rows);
//   F16Wgmma  step 9: the first layer's fp16 products on wgmma in step 5's tile (plan_f16wgmma);
//   F16StreamStaged  step 8 with W's stages in shared memory by cp.async (plan_stream_rows, staged);
//   I8Digits  step 10: the gathered forward's bytes times W's three 8-bit digits on the integer
//           tensor cores in step 5's tile (plan_i8digits; B: the digit words).
enum class GemmRung : int {
  Tile = 0, TF32x3 = 1, F16Mma = 2, Fma64 = 3, F16Stream = 4, F16Wgmma = 5, F16StreamStaged = 6, I8Digits = 7
};

template <class AV, class BV, class Epi>
struct GemmProblem {
  using AView = AV;
  using BView = BV;
  using Elem = typename AV::Elem;
  static constexpr int kBK = TileCfg<Elem>::kBK;
  int M = 0, N = 0, K = 0;
  int splits = 1, kchunk = 0;   // kchunk: K range per split, a multiple of the k-tile
  GemmRung rung = GemmRung::Tile;
  // PDL: B was written by the kernel launched just before (phase 5's first forward product, whose
  // weights the step before updated last): the loops that fetch B's first stages before pdl_wait()
  // fetch them after it instead.
  bool b_fresh = false;
  // Step 8 (8_stream_rows.cuh): a tile's K slices run as one thread-block cluster and hand their
  // partial tiles over through its shared memory instead of ws and counters (plan_stream_rows).
  bool cluster = false;
  AV a;
  BV b;
  Epi epi;
  float* ws = nullptr;          // split-K partial tiles: ws_floats() (tiles * splits * kBM * kBN floats,
                                // past 16 splits also one slot a group of 16 a tile)
  unsigned* counters = nullptr; // counter_slots(): one per output tile (past 16 splits, one per
                                // group of 16 and one more), zero between launches
  __host__ __device__ int tiles_m() const { return (M + kBM - 1) / kBM; }
  __host__ __device__ int tiles_n() const { return (N + kBN - 1) / kBN; }
  __host__ __device__ int tiles() const { return tiles_m() * tiles_n(); }
  __host__ __device__ int blocks() const { return tiles() * splits; }
};

// Picks the split count: enough blocks to cover the GPU about `waves` times, at least two k-tiles
// per split, at most max_splits splits (default 16). Workspace: ws_floats(); counters: counter_slots().
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

// The split-K fix-up adds at most kFixupGroup slices in one block. Past that it adds in two levels
// (3_split_k.cuh): the last block of each group of kFixupGroup slices adds its group, the last
// group adds the groups; each level has its own counter, and the groups' sums their own slots.
constexpr int kFixupGroup = 16;
__host__ __device__ inline int fixup_groups(int splits) {
  return splits > kFixupGroup ? (splits + kFixupGroup - 1) / kFixupGroup : 1;
}
template <class P>
inline size_t ws_floats(const P& p) {
  if (p.splits <= 1) return 0;
  const int g = fixup_groups(p.splits);
  return static_cast<size_t>(p.tiles()) * (p.splits + (g > 1 ? g : 0)) * kBM * kBN;
}
template <class P>
inline size_t counter_slots(const P& p) {
  if (p.splits <= 1) return 0;
  const int g = fixup_groups(p.splits);
  return static_cast<size_t>(p.tiles()) * (g > 1 ? g + 1 : 1);
}

}  // namespace mlp
}  // namespace nb
