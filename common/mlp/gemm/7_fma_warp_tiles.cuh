// common/mlp/gemm/7_fma_warp_tiles.cuh — the GEMM ladder, step 7: fp32 FMAs in warp tiles.
//
// Adds: the CUDA cores' best on big products. Steps 1-4 give each thread a 2 x 4 tile of a 32 x 64
// block: per k it reads 6 values from shared memory for 8 FMAs. Here step 5's 64 x 64 tile, its
// three-stage cp.async pipeline, split-K hand-over and epilogues (tc64_tile) multiply with FMAs:
// the 8 warps form two k-groups (warps 0-3 take k 0-15 of each k-tile, 4-7 k 16-31), each group's
// 4 warps cover the tile in 32 x 32 warp tiles, each lane an 8 (m) x 4 (n) register tile. Per 4
// values of k a lane reads 12 16-byte words (A's 8 rows and B's 4 columns, each 4 deep in k, or 4
// deep in m and n where the operand lies along them) for 128 FMAs. The two groups' sums are added
// once, in the result tile. A byte operand (phase 5's gathered images) is converted once a k-tile
// into a float tile (its integers: the sums are divided by 255 at the end, as step 5 does), not at
// every read, which would cost 2 instructions per 4 FMAs.
// The one design decision: two k-groups of 8 x 4 lane tiles, not 8 warps of 4 x 4. A 4 x 4 tile
// reads 8 words per 64 FMAs; 8 x 4 reads 12 per 128, a quarter fewer shared-memory wavefronts for
// the same FMAs, at 32 accumulators a thread (the launch bound allows 128 registers).
// Prediction, before measuring (H200, 132 SMs at 1.98 GHz, W1's first layer at batch 8,192): the
// forward (8,192 x 128 x 784) runs 256 blocks, two an SM: 200,700 FMA instructions a warp-slot an
// SM, 50,200 cycles on 4 schedulers; its 16-byte shared reads, 4 wavefronts each, take 76,800
// cycles: shared-memory bound, about 39 us plus the pipeline's fill, ~42 us (39 TFLOP/s; cuBLASLt
// fp32 52.9 us). The weight gradient (K = 8,192 in 10 slices, 260 blocks): the same per SM plus its
// fix-up tail, ~48 us (cuBLASLt fp32 75.4).
// Measured (H200, 493ef7e, logs/fma_493ef7e/gemm/): 67.4 and 65.7 us (24.4 and 25.0 TFLOP/s),
// 0.78x and 1.14x cuBLASLt fp32 (52.8, 74.7). Nsight Compute on the forward (logs/fma_var/
// fwd-v0.txt): shared-memory pipe 81% busy, a third of its load wavefronts bank conflicts, issue
// in 64% of cycles: the four quarter warps' A rows (8 tm + i, 36 floats apart) fell on the same
// banks. Then: a lane's rows along k interleaved (tm + 4 i: 4 banks apart) -> 64.7 and 65.2 us
// (logs/fma_ab_a88bbab/ab-summary.txt; the pipe 60% busy, an instruction issued in 66% of cycles,
// 766 a warp a k-tile of which 512 FMAs). Then: past 16 slices for few-tile long-K products, the fix-up in two levels
// (plan_fma64): W1's 64 x 128 x 8,192 weight gradient 27.5 -> 16.9 us. Result (phase5_batched__
// gemm-b<B>.json, 0adcf3b): 10 of the W1 step's 11 products of at least 100 MFLOP at batch 1,024-
// 8,192 at 0.907-1.30x cuBLASLt fp32; the first layer's forward at 8,192 0.785x (63.8 against 50.1).
// With step 5's staging worked out once a tile (X3Stream; e802857): 10 of 11 at 1.05-1.59x, the
// first layer's forward at 8,192 0.862x (62.4 against 53.8; cuBLASLt's own time spreads 50-54).
#pragma once
#include <cstdint>

#include "mlp/gemm/5_tf32x3.cuh"

namespace nb {
namespace mlp {

constexpr int kFKGroups = 2;                 // the k-tile's halves, one a group of 4 warps
constexpr int kFKPer = kXBK / kFKGroups;     // 16 values of k a group a k-tile
constexpr int kFTm = 8, kFTn = 4;            // a lane's register tile
constexpr int kFBLdBytes = kBN;              // converted byte B tile [k][n]: rows of 64 floats
static_assert(kXThreads == 256 && kXBM == 64 && kXBN == 64, "two groups of 4 warps of 32 x 32 on a 64 x 64 tile");

// Float tiles for a byte operand's k-tile, converted once (static shared memory, only in the
// kernels with a byte operand): A's bytes [m][k] as floats [m][k] (row stride X3Tile's 36, so a
// lane's 16-byte read of a row is conflict-free), B's [k][n] as floats [k][n].
__device__ __forceinline__ float* fma_byte_tile_a() {
  __shared__ __align__(16) float s[kXBM * X3Ld<float>::k32];
  return s;
}
__device__ __forceinline__ float* fma_byte_tile_b() {
  __shared__ __align__(16) float s[kXBK * kFBLdBytes];
  return s;
}

struct AccumFma {
  static constexpr int kStages = kXStages;  // (tc64_tile's pipeline depth)
  float d[kFTm][kFTn];
  __device__ AccumFma() {
#pragma unroll
    for (int i = 0; i < kFTm; ++i)
#pragma unroll
      for (int j = 0; j < kFTn; ++j) d[i][j] = 0.f;
  }
  template <class AV, class BV>
  __device__ __forceinline__ static void prepare() {}
  // B staged [n][k] (the forward's weights): 36 floats a row, whatever A is: a quarter warp reads
  // 8 consecutive rows, each 4 banks past the one before (step 5's gathered forward uses 48 for its
  // MMA lanes).
  template <class AV, class BV>
  __host__ __device__ static constexpr int b_ld32() {
    return X3Tile<BV>::kLd32;
  }
  // The lane's place: group kg = warp / 4; warp tile (wm, wn) of the 64 x 64; tm = lane / 8 (a
  // quarter warp's 8 lanes share their rows, one broadcast read), tn = lane % 8. Rows: A along m,
  // wm + 8 tm + i (two 16-byte reads of 8 rows); A along k, wm + tm + 4 i (rows 36 floats apart:
  // 8 tm + i would put the four quarters' rows on the same banks, 4-way conflicts on every A read;
  // tm + 4 i puts them 4 banks apart). Columns: B along n, wn + 4 tn + j (one 16-byte read); B along
  // k, wn + tn + 8 j (a quarter warp reads 8 consecutive rows, conflict-free).
  template <class AV, class BV>
  __device__ __forceinline__ static void place(int& kg, int& row0, int& rstep, int& col0, int& cstep) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wq = warp % 4;
    kg = warp / 4;
    const int tm = lane / 8, wm = (wq / 2) * 32;
    if constexpr (AV::kContig) row0 = wm + tm, rstep = 4;
    else row0 = wm + 8 * tm, rstep = 1;
    const int tn = lane % 8, wn = (wq % 2) * 32;
    if constexpr (BV::kContig) col0 = wn + 4 * tn, cstep = 1;
    else col0 = wn + tn, cstep = 8;
  }
  // 2^23 + byte i of w, minus 2^23: the byte's integer, exact (step 5's byte_as_tf32).
  __device__ __forceinline__ static float byte_value(uint32_t w, int i) {
    return __uint_as_float(AccumX3<3>::byte_as_tf32(w, i));
  }
  // A byte tile's 2,048 values into floats: two 4-byte words a thread.
  template <int kOuter, int kInner, int kSrcLd, int kDstLd>
  __device__ __forceinline__ static void convert(const uint8_t* src, float* dst) {
    constexpr int kWords = kOuter * kInner / 4;
    static_assert(kWords == 2 * kXThreads && kSrcLd % 4 == 0 && kDstLd % 4 == 0, "two aligned words a thread");
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int w = threadIdx.x + i * kXThreads, o = w / (kInner / 4), in = (w % (kInner / 4)) * 4;
      const uint32_t word = *reinterpret_cast<const uint32_t*>(src + o * kSrcLd + in);
      *reinterpret_cast<float4*>(dst + o * kDstLd + in) =
          make_float4(byte_value(word, 0), byte_value(word, 1), byte_value(word, 2), byte_value(word, 3));
    }
  }

  template <class AV, class BV>
  __device__ __forceinline__ void mma(const void* as, const void* bs) {
    constexpr bool kAB = ByteRows<AV>::value, kBB = ByteRows<BV>::value;
    static_assert(!kAB || AV::kContig, "a byte A is staged [m][k]");
    static_assert(!kBB || BV::kContig, "a byte B is staged [k][n]");
    const float* fa;
    const float* fb;
    if constexpr (kAB) {
      convert<kXBM, kXBK, X3Ld<uint8_t>::k32, X3Ld<float>::k32>(static_cast<const uint8_t*>(as), fma_byte_tile_a());
      fa = fma_byte_tile_a();
    } else {
      fa = static_cast<const float*>(as);
    }
    if constexpr (kBB) {
      convert<kXBK, kXBN, X3Ld<uint8_t>::k64, kFBLdBytes>(static_cast<const uint8_t*>(bs), fma_byte_tile_b());
      fb = fma_byte_tile_b();
    } else {
      fb = static_cast<const float*>(bs);
    }
    if constexpr (kAB || kBB) __syncthreads();  // (every thread runs mma: tc64_tile's loop is uniform)
    constexpr int kLdA = AV::kContig ? X3Ld<float>::k32 : X3Ld<float>::k64;
    constexpr int kLdB = kBB ? kFBLdBytes : BV::kContig ? X3Ld<float>::k64 : X3Ld<float>::k32;
    int kg, row0, rstep, col0, cstep;
    place<AV, BV>(kg, row0, rstep, col0, cstep);
    const int k0 = kg * kFKPer;
#pragma unroll
    for (int k4 = 0; k4 < kFKPer; k4 += 4) {
      const int k = k0 + k4;
      float b[4][kFTn];  // [k][j]
      if constexpr (BV::kContig) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const float4 v = *reinterpret_cast<const float4*>(fb + (k + kk) * kLdB + col0);
          b[kk][0] = v.x, b[kk][1] = v.y, b[kk][2] = v.z, b[kk][3] = v.w;
        }
      } else {
#pragma unroll
        for (int j = 0; j < kFTn; ++j) {
          const float4 v = *reinterpret_cast<const float4*>(fb + (col0 + j * 8) * kLdB + k);
          b[0][j] = v.x, b[1][j] = v.y, b[2][j] = v.z, b[3][j] = v.w;
        }
      }
      if constexpr (AV::kContig) {  // a row's 4 values of k at a time
#pragma unroll
        for (int i = 0; i < kFTm; ++i) {
          const float4 v = *reinterpret_cast<const float4*>(fa + (row0 + i * rstep) * kLdA + k);
          const float a[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int j = 0; j < kFTn; ++j) d[i][j] = fmaf(a[kk], b[kk][j], d[i][j]);
        }
      } else {  // one k's 8 rows at a time
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const float4 v0 = *reinterpret_cast<const float4*>(fa + (k + kk) * kLdA + row0);
          const float4 v1 = *reinterpret_cast<const float4*>(fa + (k + kk) * kLdA + row0 + 4);
          const float a[kFTm] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
          for (int i = 0; i < kFTm; ++i)
#pragma unroll
            for (int j = 0; j < kFTn; ++j) d[i][j] = fmaf(a[i], b[kk][j], d[i][j]);
        }
      }
    }
  }
  template <class AV, class BV>
  __device__ __forceinline__ void finish() {}  // (the bytes' division follows the groups' sum: store_tile)

  // The two groups' sums added in the result tile (group 0's + group 1's, in that order, every
  // launch), a byte operand's sums divided by 255 once, into the two 32 x 64 sub-tiles at c.
  template <class AV, class BV>
  __device__ __forceinline__ void store_tile(float* c) const {
    int kg, row0, rstep, col0, cstep;
    place<AV, BV>(kg, row0, rstep, col0, cstep);
    float* sub = c + (row0 / kBM) * (kBM * kLdc) + (row0 % kBM) * kLdc;  // (a lane's rows lie in one sub-tile)
    if (kg == 1) {
#pragma unroll
      for (int i = 0; i < kFTm; ++i)
#pragma unroll
        for (int j = 0; j < kFTn; ++j) sub[i * rstep * kLdc + col0 + j * cstep] = d[i][j];
    }
    __syncthreads();
    if (kg == 0) {
#pragma unroll
      for (int i = 0; i < kFTm; ++i)
#pragma unroll
        for (int j = 0; j < kFTn; ++j) {
          float& o = sub[i * rstep * kLdc + col0 + j * cstep];
          const float s = d[i][j] + o;
          o = (ByteRows<AV>::value || ByteRows<BV>::value) ? over_255(s) : s;
        }
    }
  }
};

template <class Tag, class P, bool kTwoLevel>
__global__ void __launch_bounds__(kXThreads, kXBlocksPerSm) gemm_fma64_kernel(P p) {
  tc64_tile<P, AccumFma, kTwoLevel>(p);
}

// fp32 problems on step 7: step 5's split plan (the same tile and blocks an SM), except that a
// product with fewer tiles than a sixteenth of the blocks one wave holds may take up to 16 x 16
// slices of at least four k-tiles, added in two levels (tc64_tile's kTwoLevel): W1's 64 x 128 x
// 8,192 weight gradient has two 64 x 64 tiles, 32 blocks in 16 slices.
template <class P>
inline void plan_fma64(P& p, int sm_count) {
  static_assert(std::is_same<typename P::Elem, float>::value, "step 7 multiplies fp32 operands");
  p.rung = GemmRung::Fma64;
  plan_tc64_splits_two_level(p, sm_count);
}

template <class Tag, class P>
inline void launch_fma64(const P& p, cudaStream_t st, bool pdl) {
  constexpr int kSmem = X3Layout<P, AccumFma>::kBytes;
  if (p.splits > kFixupGroup) launch_tc64<gemm_fma64_kernel<Tag, P, true>, kSmem>(p, st, pdl);
  else launch_tc64<gemm_fma64_kernel<Tag, P, false>, kSmem>(p, st, pdl);
}

}  // namespace mlp
}  // namespace nb
