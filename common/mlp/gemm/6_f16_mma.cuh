// common/mlp/gemm/6_f16_mma.cuh — the GEMM ladder, step 6: fp16 products on mma.sync, in step 5's
// 64 x 64 tile.
//
// Adds: the fp16 products on the same tile, pipeline and epilogue hand-over as step 5 (tc64_tile:
// 8 warps of 32 x 16, three cp.async stages, the result as two 32 x 64 sub-tiles for the epilogues
// of steps 0-4), with one m16n8k16 f16 MMA (fp32 accumulators) where step 5 issues three m16n8k8
// TF32 ones. Operands are staged in their own type: fp16 matrices in 8-byte chunks, phase 5's
// gathered images as bytes, which become fp16 (byte / 255 in fp32, then rounded: the register
// loop's value) when a fragment is read. Pairs of fp16 along k that lie side by side in shared
// memory are read as one 32-bit word.
// The one design decision: reuse step 5's tile whole. The fp16 path's 32 x 64 WMMA tile (steps 1-4)
// reads the gathered images through the register loop, one byte at a time; this tile stages them
// by cp.async, as step 5 does for fp32, and keeps every epilogue.
// Prediction, before measuring (H200, W1 at batch 8,192, the GEMM benchmark): one MMA a k-step
// instead of step 5's three and no splits, on the same memory traffic at half the operand bytes:
// the first layer's forward and weight gradient (1.64 GFLOP each) at about a third of step 5's
// 59.6 and 72.8 us, 20-25 us each, against the WMMA tile's 32.8 and 29.6 on dense operands.
// Measured (H200, 8033768, profiles/nvidia-h200/logs/f16mma_8033768/gemm-b8192-fp16.log): 41.5 and
// 50.7 us (39.7 and 32.4 TFLOP/s) against the WMMA tile's 53.8 and 53.5 on the same gathered
// operands and cuBLASLt fp16's 16.9 and 20.8: twice the prediction. Inside the step (PDL off,
// logs/bias_7bb5a0a/) the forward takes 40.3 against 58.2 us; the weight gradients, 26 tiles or
// fewer split along the batch, lose to the WMMA tile, so phase 5 plans step 6 per product
// (--fp16-gemm auto, fp32_gemm.h). Nsight Compute on the step's first forward (logs/pdl_15e6532/
// ncu_f16mma_step.txt): 0.63 instructions issued a cycle per scheduler from 4 warps each (103
// registers), the top stalls a fixed-latency wait and "not selected": issue-bound, like step 5.
// The next lever is fewer instructions an MMA: the fragment reads (two 16-bit loads and a pack
// where k is the outer axis, a byte conversion per element of the gathered images; ldmatrix would
// read both orientations, the bytes could become fp16 once at staging).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "mlp/gemm/5_tf32x3.cuh"

namespace nb {
namespace mlp {

// Element (outer, inner) of a staged tile as fp16: the view's own fp16, or a byte as byte / 255.
template <class V>
__device__ __forceinline__ __half f16_elem(const void* s, int outer, int inner, int ld) {
  using S = X3Tile<V>;
  const auto* t = static_cast<const typename S::Elem*>(s);
  if constexpr (std::is_same<typename S::Elem, uint8_t>::value) return __float2half_rn(byte_over_255(t[outer * ld + inner]));
  else return t[outer * ld + inner];
}
__device__ __forceinline__ uint32_t f16_pack(__half lo, __half hi) {
  const __half2 h = __halves2half2(lo, hi);
  uint32_t u;
  memcpy(&u, &h, sizeof(u));
  return u;
}
// Two elements along k, (k, k+1) with k even, packed low first (an f16x2 fragment register). Where
// they lie side by side in shared memory (the k axis inner) and are fp16, one 32-bit load.
template <class V, bool kKInner>
__device__ __forceinline__ uint32_t f16_pair(const void* s, int mn, int k) {
  using S = X3Tile<V>;
  if constexpr (kKInner) {
    if constexpr (std::is_same<typename S::Elem, __half>::value)
      return *reinterpret_cast<const uint32_t*>(static_cast<const __half*>(s) + mn * S::kLd32 + k);
    else
      return f16_pack(f16_elem<V>(s, mn, k, S::kLd32), f16_elem<V>(s, mn, k + 1, S::kLd32));
  } else {
    return f16_pack(f16_elem<V>(s, k, mn, S::kLd64), f16_elem<V>(s, k + 1, mn, S::kLd64));
  }
}
// A(m, k..k+1): staged [m][k] when A's view is contiguous along k. B(k..k+1, n): staged [n][k] when
// B's view is not contiguous along n.
template <class AV>
__device__ __forceinline__ uint32_t f16_a(const void* s, int m, int k) {
  return f16_pair<AV, AV::kContig>(s, m, k);
}
template <class BV>
__device__ __forceinline__ uint32_t f16_b(const void* s, int k, int n) {
  return f16_pair<BV, !BV::kContig>(s, n, k);
}

// d += a · b on one m16n8k16 tile: a (16 x 16, row) in 4 f16x2 registers, b (16 x 8, col) in 2.
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Step 6's products: per k-tile two k-steps of 16, each 2 (m16) x 2 (n8) MMAs. Fragment ownership
// (PTX ISA, mma.m16n8k16 .f16): lane = 4g + t holds A (g, 2t..2t+1), (g+8, 2t..2t+1), (g, 2t+8..
// 2t+9), (g+8, 2t+8..2t+9); B (2t..2t+1, g), (2t+8..2t+9, g). The two levels of accumulation of
// step 5 (a k-tile in the tensor cores, the running sums in fp32 with round to nearest).
struct AccumF16 : TcAccum {
  template <class AV, class BV>
  __device__ __forceinline__ void mma(const void* as, const void* bs) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int wm = (warp / 4) * 32, wn = (warp % 4) * 16;
    Frags part;  // this k-tile's sums (the first level)
    zero(part);
#pragma unroll
    for (int kk = 0; kk < kXBK; kk += 16) {
      uint32_t b[2][2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int n = wn + j * 8 + g;
        b[j][0] = f16_b<BV>(bs, kk + 2 * t, n);
        b[j][1] = f16_b<BV>(bs, kk + 2 * t + 8, n);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int m = wm + i * 16 + g;
        const uint32_t a[4] = {f16_a<AV>(as, m, kk + 2 * t), f16_a<AV>(as, m + 8, kk + 2 * t),
                               f16_a<AV>(as, m, kk + 2 * t + 8), f16_a<AV>(as, m + 8, kk + 2 * t + 8)};
#pragma unroll
        for (int j = 0; j < 2; ++j) mma_f16(part[i][j], a, b[j][0], b[j][1]);
      }
    }
    add(part);
  }
};

template <class Tag, class P>
__global__ void __launch_bounds__(kXThreads, kXBlocksPerSm) gemm_f16mma_kernel(P p) {
  tc64_tile<P, AccumF16>(p);
}

// fp16 problems on step 6: step 5's split plan (the same tile and blocks an SM).
template <class P>
inline void plan_f16mma(P& p, int sm_count) {
  static_assert(std::is_same<typename P::Elem, __half>::value, "step 6 multiplies fp16 operands");
  p.rung = GemmRung::F16Mma;
  plan_tc64_splits(p, sm_count);
}

template <class Tag, class P>
inline void launch_f16mma(const P& p, cudaStream_t st, bool pdl) {
  constexpr int kSmem = X3Layout<P>::kBytes;
  static bool attr_set = false;  // per instance: above 48 KB a kernel must ask for its shared memory
  if (!attr_set) {
    CUDA_CHECK(cudaFuncSetAttribute(gemm_f16mma_kernel<Tag, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    attr_set = true;
  }
  launch_kernel(gemm_f16mma_kernel<Tag, P>, x3_tiles(p) * p.splits, kXThreads, kSmem, st, pdl, p);
}

}  // namespace mlp
}  // namespace nb
