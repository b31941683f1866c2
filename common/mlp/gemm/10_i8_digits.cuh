// common/mlp/gemm/10_i8_digits.cuh — the GEMM ladder, step 10: the gathered forward on the integer
// tensor cores, the images' bytes as they are.
//
// Adds: steps 5 and 6 spend most of a k-tile's instructions making the bytes values (a permute and
// a subtraction each) and the weights TF32 pairs, around MMAs that take 8 or 16 values of k. Here
// the bytes go to mma.sync m16n8k32 (u8 x s8, int32 sums) exactly as staged, and the weights,
// which change once a step, are cut once a step (i8_split_digits, one small kernel) into three
// signed 8-bit digits: w ~= s * 2^(E - 22) with s = d2 * 2^16 + d1 * 2^8 + d0 an integer of at most
// 22 bits and 2^E above the row's largest |w| (a scale per row of W: per output column). A k-tile
// (64 x 64 x 32) is then 12 integer MMAs a warp (2 m16 x 2 n8 x 3 digits) over the same word reads
// as step 5's gathered forward, with nothing converted; the three digits' sums are exact (at most
// 255 * 128 * K < 2^31 for K < 65,536) and become fp32 once a tile: the 64-bit integer
// sum_d 2^(8d) acc_d rounded to fp32, times the row's scale (a power of two: exact), divided by 255
// (over_255: correctly rounded). Each weight is held to 2^-23 of its row's largest; the sums have
// no rounding at all. So the error stays inside the fp32 tolerance (step 5's, tf32x3_tol).
// The digits' layout: W's row n as round_up(K, 4) words, k-group j (k = 4j .. 4j + 3) in words
// 4j .. 4j + 3 = {digit 0 of the four k's as bytes, digit 1's, digit 2's, the row's scale as fp32
// bits}: staged as step 5 stages fp32 weights (the same cp.async chunks and 48-word rows, a
// MatView<float, false> over the words) and read as step 5's gathered forward reads them (one
// 16-byte read a lane a k-group: along_k_words), the scale riding along with the digits.
// The one design decision: digits once a step, not per tile. Cutting W inside the forward would
// redo it in each of the 128 row tiles at batch 8,192, at ~15 instructions a weight; one pass over
// W (100 K weights for W1) before the forward costs a launch and ~1 MB of traffic.
// Runs where it can (i8digits_ok): A the gathered bytes [m][k] (GatherView), B a fp32 [n][k] view,
// K a multiple of 4 below 65,536 (a k-group's words are copied whole), compute capability 8.0 or
// above. Elsewhere the plan keeps step 5.
// Prediction, before measuring (H100, W1 at batch 8,192, the forward 8,192 x 128 x 784 on step 5:
// 33.3-33.7 us, logs/fma8x8_98dc2c4/). Step 5's gathered forward issues ~190 instructions a warp a
// k-tile (32 TF32 MMAs, 16 byte conversions of two instructions, 8 weight splits of five, 16
// additions of the second level, 12 shared reads, staging ~40); this one ~75 (12 MMAs, 12 shared
// reads, the same staging, the loop). If time follows instructions: ~14 us, above the floor of
// the weights' re-reads from L2 (400 KB of digit words by each of the 128 row tiles: 51 MB, ~8-9
// us at the L2's ~6 TB/s). The digit pass: ~2 us with its launch. W1's fp32 step 131.9 -> ~113 us.
// Measured (H100, bf146b3, profiles/nvidia-h100-80gb-hbm3/logs/digits_bf146b3/): the forward 22.6 us
// inside W1's step (PDL off), not ~14; with its digit pass in the GEMM benchmark 26.6 / 26.3 us against
// step 5's 33.9 / 33.9 and cuBLASLt fp32's 49.6 / 49.5 (1.87x), error 1.3e-7 against float64. W1's fp32
// step 131.6 -> 122.3 us at 8,192 (faster at 1,024-4,096 too): auto's plan. The batch sweep's record
// phase5_batched__batch-sweep-b8192.json (H100, 4592eea): 120.74 us a step, 2.02x JAX jit-run (243.80).
#pragma once
#include <cstdint>
#include <type_traits>

#include "mlp/gemm/5_tf32x3.cuh"

namespace nb {
namespace mlp {

// ------------------------------------------------------------------ the digits of W
constexpr int kI8DigitBits = 22;      // s: at most 22 bits (|d2| <= 65: a signed byte)
constexpr int kI8MaxK = 65536;        // 255 * 128 * K below 2^31 (each digit's int32 sums exact)
constexpr int kI8SplitThreads = 256;  // 8 warps, a row of W each

// Words per row of the digits of a K-long row (k-groups of 4, each 4 words).
__host__ __device__ constexpr int i8_digit_ld(int K) { return (K + 3) / 4 * 4; }

// One warp a row n of W (N rows of K fp32, row stride ldw) into `out` (N rows of i8_digit_ld(K)
// words). E: the exponent with max|w| < 2^E (frexp); s = rint(w * 2^(22 - E)), |s| <= 2^22, in
// balanced base-256 digits d0, d1 in [-128, 127] and d2 in [-65, 65]. The scale 2^(E - 22), or
// NaN where the row holds a NaN or an infinity (the products then come out NaN, as fp32's would
// not silently lose them). Reads W after the PDL wait (the update before it wrote W).
// (Wt: W's element type, fp32 here; a template, as every kernel of these headers is.)
template <class Wt>
__global__ void __launch_bounds__(kI8SplitThreads) i8_split_digits_kernel(const Wt* __restrict__ w, int ldw, int N, int K,
                                                                         uint32_t* __restrict__ out) {
  const int lane = threadIdx.x % 32, n = blockIdx.x * (kI8SplitThreads / 32) + threadIdx.x / 32;
  pdl_wait();
  pdl_launch_dependents();
  if (n >= N) return;
  const Wt* row = w + static_cast<size_t>(n) * ldw;
  float mx = 0.f;
  bool finite = true;
  for (int k = lane; k < K; k += 32) {
    const float v = to_f(row[k]);
    finite = finite && isfinite(v);
    mx = fmaxf(mx, fabsf(v));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  finite = __all_sync(0xffffffffu, finite);
  int E = 0;
  if (mx > 0.f && finite) frexpf(mx, &E);  // mx = f * 2^E, f in [0.5, 1)
  const float scale = finite ? ldexpf(1.f, E - kI8DigitBits) : __int_as_float(0x7fc00000);
  const int ld = i8_digit_ld(K);
  uint4* dst = reinterpret_cast<uint4*>(out + static_cast<size_t>(n) * ld);
  for (int g = lane; g < ld / 4; g += 32) {
    uint32_t dw[3] = {0u, 0u, 0u};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int k = 4 * g + e;
      const int s = (k < K && finite) ? __float2int_rn(ldexpf(to_f(row[k]), kI8DigitBits - E)) : 0;
      const int d0 = ((s + 128) & 255) - 128, s1 = (s - d0) >> 8;
      const int d1 = ((s1 + 128) & 255) - 128, d2 = (s1 - d1) >> 8;
      dw[0] |= (static_cast<uint32_t>(d0) & 255u) << (8 * e);
      dw[1] |= (static_cast<uint32_t>(d1) & 255u) << (8 * e);
      dw[2] |= (static_cast<uint32_t>(d2) & 255u) << (8 * e);
    }
    dst[g] = make_uint4(dw[0], dw[1], dw[2], __float_as_uint(scale));
  }
}

// The digits of W (N rows of K, row stride ldw) into out (N * i8_digit_ld(K) words), on st.
template <class Wt>
inline void launch_i8_split_digits(const Wt* w, int ldw, int N, int K, uint32_t* out, cudaStream_t st, bool pdl) {
  const int rows_per_block = kI8SplitThreads / 32;
  launch_kernel(i8_split_digits_kernel<Wt>, (N + rows_per_block - 1) / rows_per_block, kI8SplitThreads, 0, st, pdl, w, ldw,
                N, K, out);
}

// The digit words (rows of i8_digit_ld(K) words) as step 10's B operand: an fp32 [n][k] view over
// them, which step 5's staging copies as it copies fp32 weights.
inline MatView<float, false> i8_digit_view(const uint32_t* words, int K) {
  return make_view<float, false>(reinterpret_cast<const float*>(words), i8_digit_ld(K));
}

// ------------------------------------------------------------------ the integer MMAs
// Which operands the rung takes: the gathered bytes [m][k] as A, the digit words as a fp32 [n][k] view.
template <class AV, class BV>
struct I8DigitsFits : std::integral_constant<bool, X3AlongK<AV, BV>::value &&
                                                        std::is_same<typename BV::Elem, float>::value> {};

// d += a · b on one m16n8k32 tile: a (16 x 32 bytes, row) in 4 registers, b (32 x 8 signed bytes,
// col) in 2, int32 sums. Fragment ownership (PTX ISA, mma.m16n8k32 .u8/.s8): lane = 4g + t holds
// A's bytes (g, 4t..4t+3), (g+8, 4t..), (g, 16+4t..), (g+8, 16+4t..); B's (4t..4t+3, g), (16+4t.., g);
// C as m16n8k8's. (An MMA sums its 32 values of k in any order; A and B need only agree.)
__device__ __forceinline__ void mma_u8s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)d, (void)a, (void)b0, (void)b1;
  __trap();  // never planned: i8digits_ok refuses a device below compute capability 8.0
#endif
}

// The accumulator for tc64_tile: 8 warps of 32 x 16 (TcWarps<false>), each k-tile one k32 step:
// A's words as step 5's gathered forward reads them, B's k-group words (3 digits and the scale).
struct AccumI8 : TcAccum<false> {
  using Base = TcAccum<false>;
  int acc[3][2][2][4];  // [digit][m16][n8][C fragment]
  float sc[2];          // the scale of B row wn + 8j + g (lanes with t = 0 hold a k-group's own)
  __device__ AccumI8() {
#pragma unroll
    for (int d = 0; d < 3; ++d)
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[d][i][j][e] = 0;
    sc[0] = sc[1] = 0.f;
  }
  template <class AV, class BV>
  __device__ __forceinline__ void mma(const void* as, const void* bs) {
    static_assert(I8DigitsFits<AV, BV>::value, "step 10 takes the gathered bytes and digit words only");
    const Base::Warps w;
    uint32_t aw[2][2][2];  // [i][row g / g + 8][k 4t.. / 16 + 4t..]
    float4 bq[2][2];       // [j][k 4t.. / 16 + 4t..]: digit words 0-2 and the scale
    along_k_words(static_cast<const uint8_t*>(as), static_cast<const float*>(bs), w, aw, bq);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t a[4] = {aw[i][0][0], aw[i][1][0], aw[i][0][1], aw[i][1][1]};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        mma_u8s8(acc[0][i][j], a, __float_as_uint(bq[j][0].x), __float_as_uint(bq[j][1].x));
        mma_u8s8(acc[1][i][j], a, __float_as_uint(bq[j][0].y), __float_as_uint(bq[j][1].y));
        mma_u8s8(acc[2][i][j], a, __float_as_uint(bq[j][0].z), __float_as_uint(bq[j][1].z));
      }
    }
    // k-group t of the k-tile's first half: inside K for t = 0 (a k-tile starts inside its slice).
    sc[0] = bq[0][0].w, sc[1] = bq[1][0].w;
  }
  // The digits' sums as fp32: (2^16 acc2 + 2^8 acc1 + acc0) exact in 64 bits, rounded once, times
  // the column's scale (lane 4c, t = 0, holds column c's), divided by 255 (the bytes' quotient).
  template <class AV, class BV>
  __device__ __forceinline__ void finish() {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float s0 = __shfl_sync(0xffffffffu, sc[j], 8 * t), s1 = __shfl_sync(0xffffffffu, sc[j], 8 * t + 4);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const long long v = static_cast<long long>(acc[2][i][j][e]) * 65536 +
                              static_cast<long long>(acc[1][i][j][e]) * 256 + acc[0][i][j][e];
          d[i][j][e] = over_255(__ll2float_rn(v) * (e % 2 == 0 ? s0 : s1));
        }
    }
  }
};

template <class Tag, class P>
__global__ void __launch_bounds__(kXThreads, kXBlocksPerSm) gemm_i8digits_kernel(P p) {
  tc64_tile<P, AccumI8>(p);
}

// Whether step 10 takes a problem on a device of compute capability cc (major * 10 + minor): the
// operand types, K a positive multiple of 4 below kI8MaxK, the digit words' rows by 16-byte copies.
template <class P>
inline bool i8digits_ok(const P& p, int cc) {
  if constexpr (!I8DigitsFits<typename P::AView, typename P::BView>::value) {
    (void)p, (void)cc;
    return false;
  } else {
    return cc >= 80 && p.K > 0 && p.K % 4 == 0 && p.K < kI8MaxK;
  }
}

// Step 10 on step 5's split plan (the same tile and blocks an SM). The caller points p.b at the
// digit words (i8_digit_ld(K) a row, 16-byte aligned) and runs i8_split_digits before the product.
template <class P>
inline void plan_i8digits(P& p, int sm_count) {
  static_assert(std::is_same<typename P::Elem, float>::value, "step 10 is an fp32 path's rung");
  p.rung = GemmRung::I8Digits;
  plan_tc64_splits(p, sm_count);
}

template <class Tag, class P>
inline void launch_i8digits(const P& p, cudaStream_t st, bool pdl) {
  if constexpr (I8DigitsFits<typename P::AView, typename P::BView>::value) {
    if (!p.b.vec_ok || p.b.ld % 4 != 0)
      throw Error(kExitInternal, "GEMM step 10's digit words need 16-byte rows (internal error)");
    launch_tc64<gemm_i8digits_kernel<Tag, P>, X3Layout<P, AccumI8>::kBytes>(p, st, pdl);
  } else {
    (void)p, (void)st, (void)pdl;
    throw Error(kExitInternal, "GEMM step 10 planned for operands it does not take (internal error)");
  }
}

}  // namespace mlp
}  // namespace nb
