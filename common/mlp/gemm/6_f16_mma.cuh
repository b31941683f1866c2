// common/mlp/gemm/6_f16_mma.cuh — the GEMM ladder, step 6: fp16 products on mma.sync, in step 5's
// 64 x 64 tile.
//
// Adds: the fp16 products on the same tile, pipeline and epilogue hand-over as step 5 (tc64_tile:
// 8 warps of 32 x 16, three cp.async stages, the result as two 32 x 64 sub-tiles for the epilogues
// of steps 0-4), with one m16n8k16 f16 MMA (fp32 accumulators) where step 5 issues three m16n8k8
// TF32 ones. Operands are staged in their own type: fp16 tiles read by ldmatrix (.trans where k is
// the staged tile's outer axis); phase 5's gathered images as bytes, exact in fp16 as integers (the
// sums divided by 255 once): the gathered forward reads a lane's bytes of a row as one word and its
// four weights as one 8-byte load (mma_along_k), the gathered weight gradient its bytes by
// ldmatrix.trans as b16 column pairs (mma_bytes_b); a byte pair becomes an f16x2 by a byte permute
// and one subtraction.
// The one design decision: reuse step 5's tile whole. The fp16 path's 32 x 64 WMMA tile (steps 1-4)
// reads the gathered images through the register loop, one byte at a time; this tile stages them
// by cp.async, as step 5 does for fp32, and keeps every epilogue.
// Prediction, before measuring (H200, W1 at batch 8,192, the GEMM benchmark): one MMA a k-step
// instead of step 5's three and no splits, on the same memory traffic at half the operand bytes:
// the first layer's forward and weight gradient (1.64 GFLOP each) at about a third of step 5's
// 59.6 and 72.8 us, 20-25 us each, against the WMMA tile's 32.8 and 29.6 on dense operands.
// Measured (H200, e802857, profiles/nvidia-h200/phase5_batched__gemm-b8192-fp16.json): 25.2 and
// 31.5 us, 0.79x and 0.74x cuBLASLt fp16 (19.9, 23.4); the first build, reading every fragment
// element by element, took 41.5 and 50.7. W1's fp16 step 88.4 us, 1.49x our fp32 (131.4). An MMA is
// still 8 of ~176 instructions a warp a k-tile: a 32 x 16 warp tile reads and converts its operands
// for 8 MMAs (step 9, 9_f16_wgmma.cuh, hands B to the tensor cores). What each change since bought
// (fragments by ldmatrix, the bytes as integers in whole words, the staging worked out once a tile)
// against its prediction: report/phase_notes/phase5_batched.md, the kept-changes and
// predicted-against-measured tables.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "mlp/gemm/5_tf32x3.cuh"

namespace nb {
namespace mlp {

// The gathered images' bytes are exact in fp16 (an integer below 2^11), so step 6, like step 5,
// multiplies a byte operand as its integer b and divides the finished sums by 255 once
// (TcAccum's finish or store): the products are of byte / 255 itself, where the 32 x 64 WMMA tile (steps 1-4)
// multiplies byte / 255 rounded to fp16 (2^-12 relative). Two layouts are read without a table
// (mma_along_k, mma_bytes_b); any other byte tile looks its integers' fp16 bits up here: 512 bytes
// of static shared memory, only in those kernels; AccumF16::prepare fills it once a block, before
// the mainloop's first barrier.
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
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* row) {
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

// A byte tile staged [k][n] (B of the gathered weight gradient) times fp16 A: B's fragments by
// ldmatrix.trans on the bytes, read as b16 pairs (mma_bytes_b).
template <class AV, class BV>
struct F16BytesB : std::integral_constant<bool, ByteRows<BV>::value && BV::kContig && f16_staged<AV>()> {};

// Bytes (lo, hi) of a word as an f16x2 of their integers, lo in the low half: 1024 + b has the fp16
// bits 0x6400 | b, so one byte permute builds both halves (selector: result bytes from lo, 0x64,
// hi, 0x64) and one subtraction of 1024 leaves b, exactly.
template <int kLo, int kHi>
__device__ __forceinline__ uint32_t bytes_as_f16x2(uint32_t word) {
  static_assert(kLo >= 0 && kLo < 4 && kHi >= 0 && kHi < 4, "bytes of one word");
  uint32_t h = __byte_perm(word, 0x64646464u, kLo | 4 << 4 | kHi << 8 | 4 << 12);
  const __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&h), __float2half2_rn(1024.0f));
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Step 6's products: per k-tile its k-steps of 16 (a warp's: both, or its k-group's one), each 2 (m16)
// x kNJ (n8) MMAs. Fragment ownership (PTX ISA, mma.m16n8k16 .f16): lane = 4g + t holds A (g,
// 2t..2t+1), (g+8, 2t..2t+1), (g, 2t+8..2t+9), (g+8, 2t+8..2t+9); B (2t..2t+1, g), (2t+8..2t+9, g). The
// two levels of accumulation of step 5 (a k-tile in the tensor cores, the running sums in fp32 with
// round to nearest).
template <bool kKG = false>
struct AccumF16 : TcAccum<kKG> {
  using Base = TcAccum<kKG>;
  using typename Base::Frags;
  using Base::kNJ;
  using W = typename Base::Warps;
  // A byte tile read element by element: the table of the 256 integers' fp16 bits, one entry a thread.
  template <class AV, class BV>
  __device__ __forceinline__ static void prepare() {
    if constexpr ((ByteRows<AV>::value || ByteRows<BV>::value) && !X3AlongK<AV, BV>::value && !F16BytesB<AV, BV>::value) {
      static_assert(kXThreads >= 256, "one table entry a thread");
      if (threadIdx.x < 256) f16_byte_values()[threadIdx.x] = __half_as_ushort(__int2half_rn(static_cast<int>(threadIdx.x)));
    }
  }
  // mma_bytes_b leaves the warp's columns interleaved (WarpTiles::kInterleaved).
  template <class AV, class BV>
  __device__ __forceinline__ void store_tile(float* c) const {
    this->template store<F16BytesB<AV, BV>::value ? WarpTiles::kInterleaved : WarpTiles::kPlain,
                         ByteRows<AV>::value || ByteRows<BV>::value>(c);
  }
  template <class AV, class BV>
  __device__ __forceinline__ void mma(const void* as, const void* bs) {
    if constexpr (X3AlongK<AV, BV>::value) {
      mma_along_k(static_cast<const uint8_t*>(as), static_cast<const __half*>(bs));
      return;
    } else if constexpr (F16BytesB<AV, BV>::value) {
      mma_bytes_b<AV>(as, static_cast<const uint8_t*>(bs));
      return;
    }
    const W w;
    Frags part;  // this k-tile's sums (the first level)
    Base::zero(part);
#pragma unroll
    for (int hh = 0; hh < W::kHalves; ++hh) {
      const int kk = 16 * w.half(hh);
      uint32_t b[kNJ / 2][2][2];  // [columns wn + 16h ..][j][register]: MMA 2h + j
#pragma unroll
      for (int h = 0; h < kNJ / 2; ++h) f16_b_frags<BV>(bs, kk, w.wn + 16 * h, b[h]);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        uint32_t a[4];
        f16_a_frag<AV>(as, w.wm + i * 16, kk, a);
#pragma unroll
        for (int j = 0; j < kNJ; ++j) mma_f16(part[i][j], a, b[j / 2][j % 2][0], b[j / 2][j % 2][1]);
      }
    }
    this->add(part);
  }

  // The gathered forward: A's bytes [m][k] (row stride 36) and B's fp16 weights [n][k] (row stride
  // 48), both contiguous along k. An MMA sums its 16 values of k in any order, so in k-step h lane
  // slots 2t, 2t+1 stand for k = 16h + 4t, +1 and slots 2t+8, 2t+9 for 16h + 4t + 2, +3, in A and in
  // B alike: a lane's bytes of a row for a k-step are one 4-byte word (two f16x2 registers by
  // bytes_as_f16x2) and its four fp16 of B one 8-byte load (both registers of the fragment), where
  // the element path took 8 byte loads, 8 table loads and 4 packs, and two 32-bit loads.
  __device__ __forceinline__ void mma_along_k(const uint8_t* as, const __half* bs) {
    const W w;
    uint32_t aw[2][2][W::kHalves];  // [i][row g / g + 8][hh]
    uint2 bq[kNJ][W::kHalves];      // [j][hh]
    along_k_words(as, bs, w, aw, bq);
    Frags part;  // this k-tile's sums (the first level)
    Base::zero(part);
#pragma unroll
    for (int hh = 0; hh < W::kHalves; ++hh)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint32_t a[4] = {bytes_as_f16x2<0, 1>(aw[i][0][hh]), bytes_as_f16x2<0, 1>(aw[i][1][hh]),
                               bytes_as_f16x2<2, 3>(aw[i][0][hh]), bytes_as_f16x2<2, 3>(aw[i][1][hh])};
#pragma unroll
        for (int j = 0; j < kNJ; ++j) mma_f16(part[i][j], a, bq[j][hh].x, bq[j][hh].y);
      }
    this->add(part);
  }

  // The gathered weight gradient: B's bytes staged [k][n] (row stride 80), A fp16 (by ldmatrix).
  // One ldmatrix.x4.trans reads a warp's bytes as four 8 x 8 matrices of b16 (pairs of adjacent
  // columns): 32 x 16 warps, the k-tile's 32 rows at the warp's 16 columns (lane l gives row l);
  // k-groups, the group's 16 rows at the warp's 32 columns (lane l gives row 16 kg + (l & 15), column
  // wn + 16 (l >> 4)). Register q receives, at rows k = 2t, +1 of its matrix, the column pair 2g, 2g+1:
  // bytes (2t, 2g), (2t, 2g+1), (2t+1, 2g), (2t+1, 2g+1). Bytes 0 and 2 are the k pair of column 2g,
  // bytes 1 and 3 that of column 2g + 1: so MMA j = 2h + p multiplies the warp's columns 16h + 2c + p
  // (c = 0..7), k in its natural order, and the result is stored interleaved. One ldmatrix and 16 (or
  // 8) conversions a k-tile where the element path took 32 byte loads, 32 table loads and 16 packs.
  // Rows 80 bytes apart: the 8 rows of a matrix fall on distinct banks.
  template <class AV>
  __device__ __forceinline__ void mma_bytes_b(const void* as, const uint8_t* bs) {
    constexpr int kBLd = X3Ld<uint8_t>::k64;
    static_assert(kBLd % 16 == 0 && kXBK == 32, "16-byte aligned rows; one x4 covers a warp's k-steps");
    const int lane = threadIdx.x % 32;
    const W w;
    uint32_t q[4];
    Frags part;  // this k-tile's sums (the first level)
    Base::zero(part);
    if constexpr (!kKG) {
      ldsm_x4<true>(q, bs + lane * kBLd + w.wn);
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const uint32_t b[2][2] = {{bytes_as_f16x2<0, 2>(q[2 * s]), bytes_as_f16x2<0, 2>(q[2 * s + 1])},
                                  {bytes_as_f16x2<1, 3>(q[2 * s]), bytes_as_f16x2<1, 3>(q[2 * s + 1])}};
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          uint32_t a[4];
          f16_a_frag<AV>(as, w.wm + i * 16, 16 * s, a);
#pragma unroll
          for (int j = 0; j < 2; ++j) mma_f16(part[i][j], a, b[j][0], b[j][1]);
        }
      }
    } else {
      ldsm_x4<true>(q, bs + (16 * w.kg + (lane & 15)) * kBLd + w.wn + 16 * (lane >> 4));
      uint32_t b[kNJ][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        b[2 * h][0] = bytes_as_f16x2<0, 2>(q[2 * h]), b[2 * h][1] = bytes_as_f16x2<0, 2>(q[2 * h + 1]);
        b[2 * h + 1][0] = bytes_as_f16x2<1, 3>(q[2 * h]), b[2 * h + 1][1] = bytes_as_f16x2<1, 3>(q[2 * h + 1]);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        uint32_t a[4];
        f16_a_frag<AV>(as, w.wm + i * 16, 16 * w.kg, a);
#pragma unroll
        for (int j = 0; j < kNJ; ++j) mma_f16(part[i][j], a, b[j][0], b[j][1]);
      }
    }
    this->add(part);
  }
};
// Step 6's accumulator for a product (logs/kgroups_e83e9ed/, batch 8,192): k-groups for the gathered
// forward (24.6 -> 22.9 / 23.1 us: its byte conversions halve), 32 x 16 warps elsewhere (the gathered
// weight gradient 31.1 / 30.5 against 31.3 / 31.6 with k-groups; W1's fp16 step 86.62 against 88.29
// with every product on them).
template <class AV, class BV>
using F16Acc = AccumF16<X3AlongK<AV, BV>::value>;

template <class Tag, class P, bool kTwoLevel = false>
__global__ void __launch_bounds__(kXThreads, kXBlocksPerSm) gemm_f16mma_kernel(P p) {
  tc64_tile<P, F16Acc<typename P::AView, typename P::BView>, kTwoLevel>(p);
}

// fp16 problems on step 6: step 7's split plan (plan_tc64_splits_two_level): past 16 slices, in two
// levels, for few-tile long-K products (W1's upper weight gradients at batch 8,192: 64 x 128 and
// 10 x 64 outputs over K = 8,192, two tiles and one, where 16 slices left 32 or 16 blocks for the
// whole GPU). W1's and W2's products that phase 5's rule puts on step 6 (use_f16mma) have many
// tiles or K of at most 2,048 (16 slices of four k-tiles): their plans are as they were.
// Measured (H100, GEMM benchmark at batch 8,192, 2 rounds; nvidia-h100-80gb-hbm3/logs/ahead_5385d25/):
// the 64 x 128 weight gradient 15.2 -> 14.0 us in 64 slices, the 10 x 64 one 20.5 -> 14.4; W1's
// fp16 step with every product on step 6 (--fp16-gemm mma) 94.61 -> 94.33 us (those two run beside
// the first layer's update).
template <class P>
inline void plan_f16mma(P& p, int sm_count) {
  static_assert(std::is_same<typename P::Elem, __half>::value, "step 6 multiplies fp16 operands");
  p.rung = GemmRung::F16Mma;
  plan_tc64_splits_two_level(p, sm_count);
}

template <class Tag, class P>
inline void launch_f16mma(const P& p, cudaStream_t st, bool pdl) {
  constexpr int kSmem = X3Layout<P, F16Acc<typename P::AView, typename P::BView>>::kBytes;
  if (p.splits > kFixupGroup) launch_tc64<gemm_f16mma_kernel<Tag, P, true>, kSmem>(p, st, pdl);
  else launch_tc64<gemm_f16mma_kernel<Tag, P, false>, kSmem>(p, st, pdl);
}

}  // namespace mlp
}  // namespace nb
