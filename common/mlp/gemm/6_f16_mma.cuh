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
// Measured, with the element-wise fragment reads (H200, 8033768, profiles/nvidia-h200/logs/
// f16mma_8033768/gemm-b8192-fp16.log): 41.5 and
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
// Then: fp16 fragments by ldmatrix, bytes by table. A staged fp16 tile is read by ldmatrix.x4
// (.trans where k is the tile's outer axis): one instruction for an A fragment, or for both B
// fragments of a k-step, where the element path took four 32-bit loads, or eight 16-bit loads and
// four packs. A byte's fp16 comes from a table of the 256 each block fills once (f16_byte_values:
// __float2half_rn(byte_over_255(b)), the conversion's bits). Same registers, same MMA order.
// Prediction, before measuring (H200, batch 8,192, gathered; 41.5 and 50.7 us before): issue-bound
// at 0.63 a cycle, 41.5 us holds about 520 instructions a warp a k-tile (25 k-tiles, 4 warps a
// scheduler). The forward loses ~80 (SASS from a k-tile's first fragment load to its last MMA:
// 483 -> 404; the bytes by table, W's fragments already 32-bit loads, now one ldmatrix for four):
// x0.85, about 35 us. The weight gradient loses ~95 (561 -> 467: dZ's fragments by ldmatrix.trans,
// 24 instructions a k-step -> 2, and B's bytes by table) of the ~610 its 50.7 us hold at the same
// rate: x0.85, about 43 us. Still 2x cuBLASLt's. (The gathered forward now takes all 128
// registers the two blocks an SM allow, 103 before; no spills.)
// Measured (H200, 77c2cf1, profiles/nvidia-h200/logs/sweep_77c2cf1/gemm-8192-fp16.log): 50.3 and
// 50.2 us: the weight gradient as before, the forward slower than before (41.5), not faster; W1's
// fp16 step at 8,192 165.8 -> 167.1 us (logs/sweep_693098b/logs-c/sweep-8192-fp16.log, b417a38 ->
// 693098b; 136.7 with the branched backward at 465b2a2, logs/sweep_465b2a2/logs-c/; 135.6 at a0f96e6,
// phase5_batched__batch-sweep-b8192-fp16.json: the byte operand is still read one element at a time
// through a table, where step 5 now reads whole words along k).
// Where the forward's time went is not yet profiled (the register cap is the suspect).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "mlp/gemm/5_tf32x3.cuh"

namespace nb {
namespace mlp {

// The fp16 bits of every byte's value, for the gathered images' tiles: entry b holds
// __float2half_rn(byte_over_255(b)), the conversion a fragment read of the byte used to do (byte
// / 255 in fp32, then rounded: the register loop's value), so the values are the same bits. 512
// bytes of static shared memory, only in the kernels with a byte operand; AccumF16::prepare fills
// it once a block, before the mainloop's first barrier.
__device__ __forceinline__ uint16_t* f16_byte_values() {
  __shared__ uint16_t s[256];
  return s;
}

// Element (outer, inner) of a staged tile as fp16 bits: the view's own fp16, or a byte's value.
template <class V>
__device__ __forceinline__ uint32_t f16_bits(const void* s, int outer, int inner, int ld) {
  using S = X3Tile<V>;
  const auto* t = static_cast<const typename S::Elem*>(s);
  if constexpr (std::is_same<typename S::Elem, uint8_t>::value) return f16_byte_values()[t[outer * ld + inner]];
  else return __half_as_ushort(t[outer * ld + inner]);
}
// Two elements along k, (k, k+1) with k even, packed low first (an f16x2 fragment register: the
// bits __halves2half2(lo, hi) holds). Where they lie side by side in shared memory (the k axis
// inner) and are fp16, one 32-bit load. (The element path: fp16 staged tiles go by ldmatrix.)
template <class V, bool kKInner>
__device__ __forceinline__ uint32_t f16_pair(const void* s, int mn, int k) {
  using S = X3Tile<V>;
  if constexpr (kKInner) {
    if constexpr (std::is_same<typename S::Elem, __half>::value)
      return *reinterpret_cast<const uint32_t*>(static_cast<const __half*>(s) + mn * S::kLd32 + k);
    else
      return f16_bits<V>(s, mn, k, S::kLd32) | f16_bits<V>(s, mn, k + 1, S::kLd32) << 16;
  } else {
    return f16_bits<V>(s, k, mn, S::kLd64) | f16_bits<V>(s, k + 1, mn, S::kLd64) << 16;
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

// ------------------------------------------------------------------ fragments by ldmatrix
// Where the staged operand is fp16, its fragments come by ldmatrix.x4 (one instruction for four
// f16x2 registers, instead of four 32-bit loads, or eight 16-bit loads and four packs where k is
// the staged tile's outer axis). ldmatrix.x4 reads four 8 x 8 b16 matrices: lane l gives the
// address of row l % 8 of matrix q = l / 8 (16 bytes, 16-byte aligned) and receives in register q
// the pair (row l / 4; columns 2 (l % 4), +1) of matrix q, the lower column in the low half; with
// .trans the pair (rows 2 (l % 4), +1; column l / 4): the same fragment of the transposed matrix.
// With g = l / 4, t = l % 4 (the m16n8k16 fragments, PTX ISA):
//   A, 16 x 16 at (m0, k0): a0..a3 = A(g, 2t..2t+1), A(g+8, 2t..), A(g, 2t+8..), A(g+8, 2t+8..), so
//     matrix q is A's 8 x 8 at m0 + 8 (q & 1), k0 + 8 (q >> 1);
//     staged [m][k]: plain, lane l's row at m0 + (l & 15), k0 + 8 (l >> 4);
//     staged [k][m]: .trans, lane l's row at k0 + (l & 7) + 8 (l >> 4), m0 + 8 ((l >> 3) & 1).
//   B, 16 x 8 at (k0, n0) and the next 8 columns, both in one x4: b[j][0], b[j][1] = B(2t..2t+1,
//     g), B(2t+8.., g) of columns n0 + 8j, registers in the order b[0][0], b[0][1], b[1][0],
//     b[1][1], so matrix q is B's 8 x 8 at k0 + 8 (q & 1), n0 + 8 (q >> 1);
//     staged [n][k]: plain, lane l's row at n0 + (l & 7) + 8 (l >> 4), k0 + 8 ((l >> 3) & 1);
//     staged [k][n]: .trans, lane l's row at k0 + (l & 15), n0 + 8 (l >> 4).
// (The f16x2 registers hold the same bits as the element path's: no x2 is needed, every case
// fills an x4.) Alignment: the stages start at multiples of 128 bytes; rows are 40 halves (80
// bytes, [.][k]) or 72 (144 bytes, [k][.]) apart, and a row's first column is a multiple of 8
// halves: every row address is 16-byte aligned. Banks: one matrix is 8 rows of 4 words, 20 words
// apart (groups at 0, 20, 8, 28, 16, 4, 24, 12) or 36 (0, 4, ..., 28): conflict-free.
static_assert(X3Ld<__half>::k32 * sizeof(__half) % 16 == 0 && X3Ld<__half>::k64 * sizeof(__half) % 16 == 0,
              "ldmatrix reads 16-byte aligned rows");
static_assert(kXBK % 16 == 0 && kXBM % 16 == 0 && kXBN % 16 == 0, "whole 8 x 8 matrices, 16-byte aligned");
struct LdsmRow {
  int outer, inner;  // lane l's row address: the staged tile's element (outer, inner), tile-relative
};
// A at (m0, k0); k_inner: staged [m][k] (else [k][m], read with .trans).
__host__ __device__ constexpr LdsmRow ldsm_a_row(int lane, bool k_inner, int m0, int k0) {
  return k_inner ? LdsmRow{m0 + (lane & 15), k0 + 8 * (lane >> 4)}
                 : LdsmRow{k0 + (lane & 7) + 8 * (lane >> 4), m0 + 8 * ((lane >> 3) & 1)};
}
// B at (k0, n0) and (k0, n0 + 8); k_inner: staged [n][k] (else [k][n], read with .trans).
__host__ __device__ constexpr LdsmRow ldsm_b_row(int lane, bool k_inner, int k0, int n0) {
  return k_inner ? LdsmRow{n0 + (lane & 7) + 8 * (lane >> 4), k0 + 8 * ((lane >> 3) & 1)}
                 : LdsmRow{k0 + (lane & 15), n0 + 8 * (lane >> 4)};
}
template <bool kTrans>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __half* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
template <class V>
constexpr bool f16_staged() {
  return std::is_same<typename X3Tile<V>::Elem, __half>::value;
}

// A's fragment a0..a3 at (m0, k0) of the staged tile: ldmatrix for fp16, else element pairs.
template <class AV>
__device__ __forceinline__ void f16_a_frag(const void* s, int m0, int k0, uint32_t (&a)[4]) {
  const int lane = threadIdx.x % 32;
  if constexpr (f16_staged<AV>()) {
    using S = X3Tile<AV>;
    const LdsmRow r = ldsm_a_row(lane, AV::kContig, m0, k0);
    ldsm_x4<!AV::kContig>(a, static_cast<const __half*>(s) + r.outer * (AV::kContig ? S::kLd32 : S::kLd64) + r.inner);
  } else {
    const int g = lane / 4, t = lane % 4, m = m0 + g, k = k0 + 2 * t;
    a[0] = f16_a<AV>(s, m, k), a[1] = f16_a<AV>(s, m + 8, k);
    a[2] = f16_a<AV>(s, m, k + 8), a[3] = f16_a<AV>(s, m + 8, k + 8);
  }
}
// B's fragments of columns n0 .. n0 + 7 (b[0]) and n0 + 8 .. n0 + 15 (b[1]) at k0.
template <class BV>
__device__ __forceinline__ void f16_b_frags(const void* s, int k0, int n0, uint32_t (&b)[2][2]) {
  const int lane = threadIdx.x % 32;
  if constexpr (f16_staged<BV>()) {
    using S = X3Tile<BV>;
    const LdsmRow r = ldsm_b_row(lane, !BV::kContig, k0, n0);
    uint32_t q[4];
    ldsm_x4<BV::kContig>(q, static_cast<const __half*>(s) + r.outer * (BV::kContig ? S::kLd64 : S::kLd32) + r.inner);
    b[0][0] = q[0], b[0][1] = q[1], b[1][0] = q[2], b[1][1] = q[3];
  } else {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      b[j][0] = f16_b<BV>(s, k0 + 2 * t, n0 + j * 8 + g);
      b[j][1] = f16_b<BV>(s, k0 + 2 * t + 8, n0 + j * 8 + g);
    }
  }
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
  // A byte operand: the table of the 256 bytes' fp16 values, one entry a thread.
  template <class AV, class BV>
  __device__ __forceinline__ static void prepare() {
    if constexpr (ByteRows<AV>::value || ByteRows<BV>::value) {
      static_assert(kXThreads >= 256, "one table entry a thread");
      if (threadIdx.x < 256) f16_byte_values()[threadIdx.x] = __half_as_ushort(__float2half_rn(byte_over_255(threadIdx.x)));
    }
  }
  template <class AV, class BV>
  __device__ __forceinline__ void mma(const void* as, const void* bs) {
    const int warp = threadIdx.x / 32;
    const int wm = (warp / 4) * 32, wn = (warp % 4) * 16;
    Frags part;  // this k-tile's sums (the first level)
    zero(part);
#pragma unroll
    for (int kk = 0; kk < kXBK; kk += 16) {
      uint32_t b[2][2];
      f16_b_frags<BV>(bs, kk, wn, b);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        uint32_t a[4];
        f16_a_frag<AV>(as, wm + i * 16, kk, a);
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
