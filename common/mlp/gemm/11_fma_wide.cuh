// common/mlp/gemm/11_fma_wide.cuh — the GEMM ladder, step 11: the gathered forward on the CUDA cores
// in 64 x 128 tiles, one block an SM.
//
// Adds: step 7 multiplies in 64 x 64 tiles, two blocks an SM, 8 x 4 results a lane: per 4 values of
// k a lane reads 12 16-byte words for 128 FMAs, and its 128 registers a thread (two blocks of 256)
// leave no room to load the next words while the FMAs run (the 8 x 8 lane tiles it tried spilled:
// the tried-and-dropped table). cuBLASLt fp32 runs W1's first-layer forward at batch 8,192 on a
// 64 x 128 tile (its kernel name in the batch sweep's table) with one block an SM; so does this
// step, for that product only: A the gathered images' bytes [m][k], B the weights [n][k]. 8 warps in
// two k-groups as in step 7 (warps 0-3 take k 0-15 of each 32-long k-tile, 4-7 k 16-31); a group's
// 128 lanes cover the tile, lane (tm, tn) rows tm + 8i and columns tn + 16j (i, j < 8): 64 results.
// Per 4 values of k a lane reads 16 16-byte words (A's 8 rows, B's 8 rows along k, as step 7 reads
// them) for 256 FMAs, and with 255 registers a thread (one block of 256 threads an SM) the compiler
// may hold the next words while it multiplies. The staging is steps 5-7's (x3_issue: the bytes in
// 4-byte chunks, the weights in 16-byte ones, three cp.async stages; B as two 64-column halves in
// step 7's 36-float rows), the bytes become floats once a k-tile (step 7's conversion), the groups'
// sums are added once in the result tile and divided by 255 there, and the tile leaves through the
// 32 x 64 sub-tile epilogues, four of them.
// The one design decision: the wider tile and fewer, fatter threads, not more blocks. At batch 8,192
// the forward has 128 such tiles, one wave on 132 SMs with 4 idle, where step 7's 256 tiles fill 128
// SMs twice over; below ~0.9 of a wave of tiles (plan_fma_wide) step 7 keeps the product.
// Prediction, before measuring (H100, 8,192 x 128 x 784, the GEMM benchmark; step 7 59.4 us, cuBLASLt
// fp32 48.2): an SM's 6.42 M FMAs are 50,200 issue cycles of its 4 schedulers, the 16 reads a 256
// FMAs and ~30 instructions a k-tile around them ~6% more: ~27 us at full issue; at the ~70% issue
// rate of two warps a scheduler ~38 us, with the prologue and the four epilogues ~42 us: ~1.15x
// cuBLASLt fp32 (0.9x needs 53.6 us).
#pragma once
#include <cstdint>
#include <type_traits>

#include "mlp/gemm/7_fma_warp_tiles.cuh"

namespace nb {
namespace mlp {

constexpr int kFwBN = 2 * kXBN;  // 128 columns a block tile (two of step 5's 64-column B tiles)
constexpr int kFwTm = 8, kFwTn = 8;  // a lane's register tile: rows tm + 8i, columns tn + 16j

// Which products the step takes: the gathered bytes along k times fp32 weights along k (W1's and
// W2's first-layer forward).
template <class AV, class BV>
struct FmaWideFits
    : std::integral_constant<bool, X3AlongK<AV, BV>::value && std::is_same<typename BV::Elem, float>::value> {};

// Shared memory: kXStages stages of A's bytes and B's two halves (step 7's layouts), which the result's
// four 32 x 64 sub-tiles overlay once the loop is done.
template <class P>
struct FwLayout {
  using AV = typename P::AView;
  using BV = typename P::BView;
  static constexpr int kBLd = X3Ld<float>::k32;  // 36 floats a B row (step 7's B staged [n][k])
  static constexpr int kA = x3_round128(x3_tile_bytes<AV>());
  static constexpr int kBHalf = x3_round128(x3_tile_bytes<BV, kBLd>());
  static constexpr int kStage = kA + 2 * kBHalf;
  static constexpr int kResult = 4 * kBM * kLdc * static_cast<int>(sizeof(float));
  static constexpr int kBytes = kXStages * kStage > kResult ? kXStages * kStage : kResult;
};

template <class P>
__host__ __device__ inline int fw_tiles_n(const P& p) {
  return (p.N + kFwBN - 1) / kFwBN;
}
template <class P>
__host__ __device__ inline int fw_tiles(const P& p) {
  return ((p.M + kXBM - 1) / kXBM) * fw_tiles_n(p);
}

// The result of a lane into the four sub-tiles at c (sub-tile 2h + s: columns 64h.., rows 32s..), as
// step 7's store_tile does for two: group 1 stores, group 0 adds its own and divides by 255.
__device__ __forceinline__ void fw_store_tile(const float (&d)[kFwTm][kFwTn], float* c, int kg, int tm, int tn) {
  auto at = [&](int i, int j) -> float& {
    const int h = j / 4, s = i / 4, r = tm + 8 * (i % 4), col = tn + 16 * (j % 4);
    return c[(2 * h + s) * (kBM * kLdc) + r * kLdc + col];
  };
  if (kg == 1) {
#pragma unroll
    for (int i = 0; i < kFwTm; ++i)
#pragma unroll
      for (int j = 0; j < kFwTn; ++j) at(i, j) = d[i][j];
  }
  __syncthreads();
  if (kg == 0) {
#pragma unroll
    for (int i = 0; i < kFwTm; ++i)
#pragma unroll
      for (int j = 0; j < kFwTn; ++j) {
        float& o = at(i, j);
        o = over_255(d[i][j] + o);
      }
  }
}

// One 64 x 128 tile of a product that FmaWideFits, unsplit.
template <class P>
__device__ __forceinline__ void fma_wide_tile(const P& p) {
  extern __shared__ __align__(128) unsigned char gemm_dyn[];
  using AV = typename P::AView;
  using BV = typename P::BView;
  using Lay = FwLayout<P>;
  using Epi = typename std::decay<decltype(p.epi)>::type;
  constexpr int kSt = kXStages;
  const int tn_tiles = fw_tiles_n(p);
  const int bm = blockIdx.x / tn_tiles, bn = blockIdx.x % tn_tiles;
  const int m0 = bm * kXBM, n0 = bn * kFwBN;
  const int nst = (p.K + kXBK - 1) / kXBK;
  auto a_stage = [&](int s) { return gemm_dyn + s * Lay::kStage; };
  auto b_stage = [&](int s, int h) { return gemm_dyn + s * Lay::kStage + Lay::kA + h * Lay::kBHalf; };
  const int warp = threadIdx.x / 32, kg = warp / 4, q = threadIdx.x % 128;
  const int tm = q / 16, tn = q % 16;

  // The dropout bits of the first half's two sub-tiles before the PDL wait (they depend on no kernel).
  if constexpr (EarlyDraw<Epi>::value) p.epi.prefetch_pair(m0, n0, p.M, p.N);
  pdl_wait();  // (the weights, A's rows: every operand after the wait; the first layer's W is fresh)
  pdl_launch_dependents();
  X3Rows<AV> ra;  // this thread's two A chunks' rows are the same in every k-tile: their ids once
  ra.template fetch<kXBM, kXBK>(p.a, m0, 0, p.M, p.K);
  auto issue = [&](int s, int st) {
    const int k0 = s * kXBK;
    x3_issue<kXBM, kXBK>(p.a, m0, k0, p.M, p.K, a_stage(st), ra.ids());
    x3_issue<kXBK, kXBN, Lay::kBLd>(p.b, k0, n0, p.K, p.N, b_stage(st, 0), nullptr);
    x3_issue<kXBK, kXBN, Lay::kBLd>(p.b, k0, n0 + kXBN, p.K, p.N, b_stage(st, 1), nullptr);
  };
#pragma unroll
  for (int s = 0; s < kSt - 1; ++s) {
    if (s < nst) issue(s, s);
    x3_commit();
  }
  if constexpr (!EarlyDraw<Epi>::value) p.epi.prefetch(m0, n0, p.M, p.N);  // (the first sub-tile's)

  float d[kFwTm][kFwTn];
#pragma unroll
  for (int i = 0; i < kFwTm; ++i)
#pragma unroll
    for (int j = 0; j < kFwTn; ++j) d[i][j] = 0.f;
  constexpr int kLdA = X3Ld<float>::k32;
  float* fa = fma_byte_tile_a();  // A's k-tile as the bytes' integer values, [m][k] (step 7's tile)
  int rs = 0, ws = kSt - 1;
  for (int t = 0; t < nst; ++t) {
    x3_wait<kSt - 2>();  // stage t has landed (this thread's copies) ...
    __syncthreads();     // ... and everyone's; every warp is done with stage t - 1 and fa
    if (t + kSt - 1 < nst) issue(t + kSt - 1, ws);
    x3_commit();
    AccumFma::convert<kXBM, kXBK, X3Ld<uint8_t>::k32, kLdA>(static_cast<const uint8_t*>(a_stage(rs)), fa);
    __syncthreads();
    const float* fb0 = reinterpret_cast<const float*>(b_stage(rs, 0));
    const float* fb1 = reinterpret_cast<const float*>(b_stage(rs, 1));
#pragma unroll
    for (int k4 = 0; k4 < kFKPer; k4 += 4) {
      const int k = kg * kFKPer + k4;
      float b[kFwTn][4];
#pragma unroll
      for (int j = 0; j < kFwTn; ++j) {
        const float* row = (j < 4 ? fb0 : fb1) + (tn + 16 * (j % 4)) * Lay::kBLd + k;
        const float4 v = *reinterpret_cast<const float4*>(row);
        b[j][0] = v.x, b[j][1] = v.y, b[j][2] = v.z, b[j][3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < kFwTm; ++i) {
        const float4 v = *reinterpret_cast<const float4*>(fa + (tm + 8 * i) * kLdA + k);
        const float a[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
          for (int j = 0; j < kFwTn; ++j) d[i][j] = fmaf(a[kk], b[j][kk], d[i][j]);
      }
    }
    rs = rs == kSt - 1 ? 0 : rs + 1;
    ws = ws == kSt - 1 ? 0 : ws + 1;
  }
  x3_wait<0>();
  __syncthreads();
  float* cs = reinterpret_cast<float*>(gemm_dyn);
  fw_store_tile(d, cs, kg, tm, tn);
  __syncthreads();

  // The four sub-tiles' epilogues: the 64-column halves in turn, each half's two 32-row sub-tiles as
  // tc64_epilogues runs a 64 x 64 tile's (the second half's preparation after the first's epilogues).
  const int subs = min(2, (p.M - m0 + kBM - 1) / kBM);
#pragma unroll 1
  for (int h = 0; h < 2; ++h) {
    const int nh = n0 + h * kXBN;
    if (nh >= p.N) break;
    float* ch = cs + h * 2 * (kBM * kLdc);
    if (h > 0) {
      __syncthreads();  // the first half's epilogues are done with the per-block scratch
      if constexpr (EarlyDraw<Epi>::value) p.epi.prefetch_pair(m0, nh, p.M, p.N);
      else p.epi.prefetch(m0, nh, p.M, p.N);
      __syncthreads();
    }
#pragma unroll 1
    for (int s = 0; s < subs; ++s) {
      const int ms = m0 + s * kBM;
      if (s > 0) {
        __syncthreads();
        if constexpr (EarlyDraw<Epi>::value) p.epi.next_sub();
        else p.epi.prefetch(ms, nh, p.M, p.N);
        __syncthreads();
      }
      p.epi(ch + s * (kBM * kLdc), ms, nh, p.M, p.N);
    }
  }
}

template <class Tag, class P>
__global__ void __launch_bounds__(kXThreads, 1) gemm_fma_wide_kernel(P p) {
  if constexpr (FmaWideFits<typename P::AView, typename P::BView>::value) fma_wide_tile(p);
}

// Whether step 11 takes a product on a GPU of sm_count SMs: the operands it multiplies (the bytes'
// rows and the weights' rows by the cp.async chunks of steps 5-7), and tiles for at least 0.9 of a
// wave of one block an SM (W1's first layer at batch 7,424 and up); else step 7 keeps it.
template <class P>
inline bool fma_wide_ok(const P& p, int sm_count) {
  if constexpr (!FmaWideFits<typename P::AView, typename P::BView>::value) {
    (void)p, (void)sm_count;
    return false;
  } else {
    return p.K > 0 && 10 * fw_tiles(p) >= 9 * sm_count;
  }
}

// Step 11 unsplit (the caller checks fma_wide_ok).
template <class P>
inline void plan_fma_wide(P& p) {
  static_assert(std::is_same<typename P::Elem, float>::value, "step 11 multiplies fp32 weights");
  p.rung = GemmRung::FmaWide;
  p.splits = 1;
  p.kchunk = (p.K + kXBK - 1) / kXBK * kXBK;
}

template <class Tag, class P>
inline void launch_fma_wide(const P& p, cudaStream_t st, bool pdl) {
  if constexpr (FmaWideFits<typename P::AView, typename P::BView>::value) {
    constexpr int kSmem = FwLayout<P>::kBytes;
    static bool attr_set = false;
    if (!attr_set) {
      CUDA_CHECK(cudaFuncSetAttribute(gemm_fma_wide_kernel<Tag, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
      attr_set = true;
    }
    launch_kernel(gemm_fma_wide_kernel<Tag, P>, fw_tiles(p), kXThreads, kSmem, st, pdl, p);
  } else {
    (void)p, (void)st, (void)pdl;
    throw Error(kExitInternal, "GEMM step 11 planned for operands it does not take (internal error)");
  }
}

}  // namespace mlp
}  // namespace nb
