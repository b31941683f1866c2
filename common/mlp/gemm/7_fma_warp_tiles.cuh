// common/mlp/gemm/7_fma_warp_tiles.cuh — the GEMM ladder, step 7: fp32 FMAs in warp tiles.
//
// Adds: the CUDA cores' best on big products. Steps 1-4 give each thread a 2 x 4 tile of a 32 x 64
// block: per k it reads 6 values from shared memory for 8 FMAs. Here step 5's 64 x 64 tile, its
// three-stage cp.async pipeline, split-K hand-over and epilogues (tc64_tile) multiply with FMAs:
// the 8 warps form four k-groups (warps 2g and 2g + 1 take k 8g .. 8g + 7 of each k-tile), each
// group's 2 warps cover the tile in 32 x 64 warp tiles, each lane an 8 (m) x 8 (n) register tile.
// Per 4 values of k a lane reads 16 16-byte words (A's 8 rows and B's 8 columns, each 4 deep in k,
// or 4 deep in m and n where the operand lies along them) for 256 FMAs. The four groups' sums are
// added once, in the result tile. A byte operand (phase 5's gathered images) is converted once a
// k-tile into a float tile (its integers: the sums are divided by 255 at the end, as step 5 does),
// not at every read, which would cost 2 instructions per 4 FMAs.
// The one design decision: as many FMAs a 16-byte read as 128 registers allow. A warp's 16-byte
// shared read costs 4 wavefronts however its lanes share addresses, so the reads a FMA set the
// shared-memory time: a 4 x 4 lane tile reads 8 words per 64 FMAs, 8 x 4 12 per 128, 8 x 8 16 per
// 256 (64 accumulators, 32 B values held, ~115 registers), split over four k-groups so that 8 warps
// still cover the 64 x 64 tile.
// The first form, two k-groups of 8 x 4 lane tiles:
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
// Then the 8 x 8 lane tiles in four k-groups. Prediction, before measuring (H100, batch 8,192, the
// forward; 59.2 us, its shared-memory pipe 60% busy and ~35 us of wavefronts): a k-tile's reads an
// SM fall from 3,072 wavefronts to 2,048, as many as its FMA issue cycles (16 warps x 512 / 4
// schedulers); ~24 us of wavefronts, and at the same ~60% of issue the forward 59.2 -> ~45 us (~1.07x
// cuBLASLt fp32's 48.2), the weight gradient 59.9 -> ~46 (logs/ahead_5385d25/gemm-summary.txt).
#pragma once
#include <cstdint>

#include "mlp/gemm/5_tf32x3.cuh"

namespace nb {
namespace mlp {

constexpr int kFKGroups = 4;                 // the k-tile's quarters, one a group of 2 warps
constexpr int kFKPer = kXBK / kFKGroups;     // 8 values of k a group a k-tile
constexpr int kFTm = 8, kFTn = 8;            // a lane's register tile
constexpr int kFBLdBytes = kBN;              // converted byte B tile [k][n]: rows of 64 floats
static_assert(kXThreads == 256 && kXBM == 64 && kXBN == 64 && kBM == 32,
              "four groups of 2 warps of 32 x 64 on a 64 x 64 tile, a warp's rows in one 32-row sub-tile");
static_assert(kFKPer % 4 == 0, "whole 16-byte reads along k");

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
  // The lane's place: group kg = warp / 2 (k 8 kg .. 8 kg + 7 of each k-tile); warp tile rows
  // wm = 32 (warp % 2), all 64 columns; tm = lane / 8 (a quarter warp's 8 lanes share their rows:
  // one broadcast read), tn = lane % 8. Its 8 rows: A along k, wm + tm + 4 i (rows 36 floats apart,
  // the four quarters 4 banks apart); A along m, wm + 4 tm + (i % 4) + 16 (i / 4) (two 16-byte reads
  // a k). Its 8 columns: B along k, tn + 8 j (a quarter warp reads 8 consecutive rows, conflict-free);
  // B along n, 4 tn + (j % 4) + 32 (j / 4) (a quarter warp reads 128 contiguous bytes, twice a k).
  struct Place {
    int kg, wm, tm, tn;
    __device__ __forceinline__ Place() {
      const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
      kg = warp / 2, wm = (warp % 2) * 32, tm = lane / 8, tn = lane % 8;
    }
    template <class AV>
    __device__ __forceinline__ int row(int i) const {  // relative to wm
      return AV::kContig ? tm + 4 * i : 4 * tm + (i % 4) + 16 * (i / 4);
    }
    template <class BV>
    __device__ __forceinline__ int col(int j) const {
      return BV::kContig ? 4 * tn + (j % 4) + 32 * (j / 4) : tn + 8 * j;
    }
  };
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
    const Place pl;
    const int k0 = pl.kg * kFKPer;
    const float* ra = fa + (AV::kContig ? (pl.wm + pl.row<AV>(0)) * kLdA : pl.wm + pl.row<AV>(0));
    const float* rb = fb + (BV::kContig ? pl.col<BV>(0) : pl.col<BV>(0) * kLdB);
#pragma unroll
    for (int k4 = 0; k4 < kFKPer; k4 += 4) {
      const int k = k0 + k4;
      float b[4][kFTn];  // [k][j]
      if constexpr (BV::kContig) {  // a k's 8 columns: two 16-byte reads
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float4 v = *reinterpret_cast<const float4*>(rb + (k + kk) * kLdB + 32 * h);
            b[kk][4 * h] = v.x, b[kk][4 * h + 1] = v.y, b[kk][4 * h + 2] = v.z, b[kk][4 * h + 3] = v.w;
          }
      } else {  // a column's 4 values of k
#pragma unroll
        for (int j = 0; j < kFTn; ++j) {
          const float4 v = *reinterpret_cast<const float4*>(rb + 8 * j * kLdB + k);
          b[0][j] = v.x, b[1][j] = v.y, b[2][j] = v.z, b[3][j] = v.w;
        }
      }
      if constexpr (AV::kContig) {  // a row's 4 values of k at a time
#pragma unroll
        for (int i = 0; i < kFTm; ++i) {
          const float4 v = *reinterpret_cast<const float4*>(ra + 4 * i * kLdA + k);
          const float a[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int j = 0; j < kFTn; ++j) d[i][j] = fmaf(a[kk], b[kk][j], d[i][j]);
        }
      } else {  // one k's 8 rows at a time
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const float4 v0 = *reinterpret_cast<const float4*>(ra + (k + kk) * kLdA);
          const float4 v1 = *reinterpret_cast<const float4*>(ra + (k + kk) * kLdA + 16);
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

  // The four groups' sums added in the result tile, group 3's first and group 0's last, in that
  // order every launch (a barrier between groups), a byte operand's sums divided by 255 once, into
  // the two 32 x 64 sub-tiles at c (a warp's 32 rows are one sub-tile).
  template <class AV, class BV>
  __device__ __forceinline__ void store_tile(float* c) const {
    const Place pl;
    float* sub = c + (pl.wm / kBM) * (kBM * kLdc);
#pragma unroll 1
    for (int g = kFKGroups - 1; g >= 0; --g) {
      if (pl.kg == g) {
#pragma unroll
        for (int i = 0; i < kFTm; ++i)
#pragma unroll
          for (int j = 0; j < kFTn; ++j) {
            float& o = sub[pl.row<AV>(i) * kLdc + pl.col<BV>(j)];
            if (g == kFKGroups - 1) {
              o = d[i][j];
            } else {
              const float s = d[i][j] + o;
              o = g == 0 && (ByteRows<AV>::value || ByteRows<BV>::value) ? over_255(s) : s;
            }
          }
      }
      if (g > 0) __syncthreads();
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
  const bool few_tiles = x3_tiles(p) * kFixupGroup < kXBlocksPerSm * sm_count;
  plan_tc64_splits(p, sm_count, few_tiles ? kFixupGroup * kFixupGroup : kFixupGroup);
}

template <class Tag, class P>
inline void launch_fma64(const P& p, cudaStream_t st, bool pdl) {
  constexpr int kSmem = X3Layout<P, AccumFma>::kBytes;
  if (p.splits > kFixupGroup) launch_tc64<gemm_fma64_kernel<Tag, P, true>, kSmem>(p, st, pdl);
  else launch_tc64<gemm_fma64_kernel<Tag, P, false>, kSmem>(p, st, pdl);
}

}  // namespace mlp
}  // namespace nb
