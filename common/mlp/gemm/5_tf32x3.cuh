// common/mlp/gemm/5_tf32x3.cuh — the GEMM ladder, step 5: fp32-accurate products on tensor cores.
//
// Adds: tensor cores for fp32 products. Every fp32 operand is split into a TF32 high part and a
// TF32 remainder (x = hi + lo, hi = x rounded to TF32, lo = (x - hi) rounded to TF32) and three
// mma.sync m16n8k8 products are summed in fp32: lo·hi + hi·lo + hi·hi (lo·lo, about 2^-22 of the
// product, is dropped). One TF32 operand keeps 11 significant bits; the pair keeps about 22, close
// to fp32's 24, so the sums stay inside the fp32 tolerance against float64. 64 x 64 block tiles,
// 8 warps of 32 x 16; the k-tiles arrive by a three-stage cp.async pipeline, each operand staged
// in its own element type (phase 5's gathered images as bytes, multiplied as exact integers: two
// products, not three, the sums divided by 255 once).
// The one design decision: keep every epilogue of steps 0-4 unchanged. The 64 x 64 result tile is
// written to shared memory as two 32 x 64 sub-tiles in the layout those epilogues read (row stride
// kLdc), and each sub-tile goes through the epilogue exactly as a block of the 32 x 64 kernel
// would; a split product hands both sub-tiles over in one split-K fix-up (tc64_epilogues).
// Prediction, before measuring (H200, W1 at batch 8,192): the two big products (8,192 x 128 x 784
// forward, 128 x 784 x 8,192 weight gradient, 1.64 GFLOP each) cost 4.9 GFLOP of TF32 work each
// here; at half of the dense TF32 peak that mma.sync reaches (about 250 TFLOP/s) that is about
// 20 us each, against 202 and 273 us for the 32 x 64 SIMT tile inside phase 5's step.
// Measured (H200, e802857, profiles/nvidia-h200/phase5_batched__gemm-b8192.json): 35.8 and 52.2 us
// (45.9 and 31.5 TFLOP/s), 1.50x and 1.45x cuBLASLt fp32 (53.8, 75.9); the first build took 59.3
// and 71.8. Held by the instructions around the MMAs, not by them: what each change since bought
// (the bytes as integers read along k in whole words, the rows' ids a stage ahead, the TF32
// rounding in two integer instructions, one hand-over for both halves of a split tile, the dropout
// bits before the PDL wait, each chunk's copy worked out once a tile) against what it was predicted
// to buy: report/phase_notes/phase5_batched.md, its kept-changes and predicted-against-measured tables.
#pragma once
#include <cstdint>

#include "mlp/gemm/4_kernels.cuh"

namespace nb {
namespace mlp {

constexpr int kXBM = 64, kXBN = kBN, kXBK = 32;  // block tile (kXBN = the epilogues' kBN), k-tile
constexpr int kXThreads = 256;                   // 8 warps, 2 (m) x 4 (n), each a 32 x 16 warp tile
constexpr int kXStages = 3;                      // k-tiles in flight (cp.async)
constexpr int kXBlocksPerSm = 2;                 // resident blocks an SM (__launch_bounds__, shared memory)
static_assert(kXBM == kXBN, "A's and B's tiles are both 64 x 32: one staging code for either");
static_assert(kXThreads == TileCfg<float>::kThreads, "the fp32 epilogues assume 256 threads");

// ------------------------------------------------------------------ staging an operand tile
// Each operand's k-tile goes global -> shared memory by cp.async, kXStages deep, in the element
// type and the layout it has in memory: a view's (r, c) element lies along its contiguous axis,
// so a tile is stored [outer][inner] with 4-element chunks along the inner axis. fp32 matrices
// move 16-byte chunks; phase 5's gathered images (GatherView) move their bytes, 4-byte chunks, and
// become values only when a fragment is read: their integers, in fp32 (step 5) or fp16 (step 6),
// the sums divided by 255 at the end (TcAccum's finish or store). A tile is 64 (the 64-wide axis: m of A, n of B) by
// 32 (k). Row strides keep the fragment reads free of bank conflicts: a warp reads elements (g, t),
// g = lane / 4, t = lane % 4, along the two axes; fp32 at g * 36 + t (banks 4g + t) or t * 72 + g
// (banks 8t + g); bytes in 36- or 80-byte rows; the gathered forward's weights in 48-float rows
// (X3AlongK).
// A view of bytes that stand for byte / 255 (phase 5's gathered images, GatherView) declares
// kByteRows = true, row_id(r) (its row r's id: a global load), id_bytes(id) (that row's bytes,
// contiguous) and ld; its tiles are staged as bytes. Every other fp32 view is a MatView<float, C>.
template <class V, class = void>
struct ByteRows : std::false_type {};
template <class V>
struct ByteRows<V, std::void_t<decltype(V::kByteRows)>> : std::integral_constant<bool, V::kByteRows> {};

// Row strides (elements) of a staged tile whose inner axis is 32 or 64 long, per element type. fp16
// (step 6) is read two elements a 32-bit word: 40 puts word (g, t) of a 32-long row in bank 20g + t
// mod 32, all 32 apart; along a 64-long row two lanes share a word (t * 72 / 2 + g / 2).
template <class E>
struct X3Ld;
template <>
struct X3Ld<float> {
  static constexpr int k32 = 36, k64 = 72;
};
template <>
struct X3Ld<__half> {
  static constexpr int k32 = 40, k64 = 72;
};
template <>
struct X3Ld<uint8_t> {
  static constexpr int k32 = 36, k64 = 80;
};

template <class V, bool kBytes = ByteRows<V>::value>
struct X3Tile {  // the view's own elements (fp32 or fp16)
  using Elem = typename V::Elem;
  static constexpr int kLd32 = X3Ld<Elem>::k32, kLd64 = X3Ld<Elem>::k64;
};
// (A fragment read of a byte tile takes the byte's integer from a table of all 256 that the block
// fills once, in fp32 (step 5) or fp16 (step 6), or, in the gathered forward (steps 5 and 6) and
// step 6's gathered weight gradient, from whole words by a byte permute: mma_along_k, mma_bytes_b.)
template <class V>
struct X3Tile<V, true> {  // bytes
  using Elem = uint8_t;
  static constexpr int kLd32 = X3Ld<uint8_t>::k32, kLd64 = X3Ld<uint8_t>::k64;
};
// The gathered forward (bytes along k times weights along k, fp32 in step 5, fp16 in step 6) reads
// whole words of both tiles along k (AccumX3::mma_along_k, AccumF16::mma_along_k): B's rows of 32
// elements then take 48, so that its wide reads are conflict-free (fp32: 16-byte reads, rows 16
// words apart mod 32; fp16: 8-byte reads, rows 24 words apart).
constexpr int kX3AlongKBLd = 48;
template <class AV, class BV>
struct X3AlongK
    : std::integral_constant<bool, ByteRows<AV>::value && AV::kContig && !ByteRows<BV>::value && !BV::kContig &&
                                       (std::is_same<typename BV::Elem, float>::value ||
                                        std::is_same<typename BV::Elem, __half>::value)> {};
template <class AV, class BV>
constexpr int x3_b_ld32() {
  return X3AlongK<AV, BV>::value ? kX3AlongKBLd : X3Tile<BV>::kLd32;
}
template <class V, int kLd32 = X3Tile<V>::kLd32>
constexpr int x3_tile_bytes() {  // either orientation of a 64 x 32 tile, padded
  using S = X3Tile<V>;
  constexpr int a = 64 * kLd32, b = 32 * S::kLd64;
  return static_cast<int>(sizeof(typename S::Elem)) * (a > b ? a : b);
}
__host__ __device__ constexpr int x3_round128(int b) { return (b + 127) / 128 * 128; }

// Issues this thread's two chunks of the tile whose logical rows are [r0, r0 + R) and columns
// [c0, c0 + C) of view v (bounds rows x cols), into dst. Whole chunks inside the matrix go by
// cp.async (a chunk cut by the edge copies its valid part and zero-fills the rest); chunks a
// vector access cannot take (unaligned views) go through the view's own load.
// A byte view's rows of this thread's two chunks (x3_issue's), fetched one stage ahead of the
// copies that use them: a row id is a global load, and fetched at the copy it held the warp before
// its MMAs (17% of the stall samples of the gathered weight gradient at batch 8,192, where every
// k-tile has rows of its own: logs/ncu_16be240/). Empty for other views.
template <class V, bool = ByteRows<V>::value>
struct X3Rows {
  template <int R, int C>
  __device__ __forceinline__ void fetch(const V&, int, int, int, int) {}
  __device__ __forceinline__ const int* ids() const { return nullptr; }
};
template <class V>
struct X3Rows<V, true> {
  int id[2] = {0, 0};
  template <int R, int C>
  __device__ __forceinline__ void fetch(const V& v, int r0, int c0, int rows, int cols) {
    constexpr bool kC = V::kContig;
    constexpr int kInner = kC ? C : R;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int ch = threadIdx.x + i * kXThreads;
      const int o = ch / (kInner / 4);
      const int outer = kC ? r0 + o : c0 + o, outer_lim = kC ? rows : cols;
      id[i] = outer < outer_lim ? v.row_id(outer) : 0;
    }
  }
  __device__ __forceinline__ const int* ids() const { return id; }
};

// (ids: a byte view's row ids for the two chunks, X3Rows; nullptr: fetched here.)
template <int R, int C, int kLd32 = 0, class V>
__device__ __forceinline__ void x3_issue(const V& v, int r0, int c0, int rows, int cols, void* dst,
                                         const int* ids = nullptr) {
  using S = X3Tile<V>;
  using E = typename S::Elem;
  constexpr bool kC = V::kContig;
  constexpr int kOuter = kC ? R : C, kInner = kC ? C : R;
  constexpr int kLd = kInner == 32 ? (kLd32 > 0 ? kLd32 : S::kLd32) : S::kLd64;
  static_assert(kOuter * kInner / 4 == 2 * kXThreads, "two 4-element chunks a thread");
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int ch = threadIdx.x + i * kXThreads;
    const int o = ch / (kInner / 4), in = (ch % (kInner / 4)) * 4;
    const int r = kC ? r0 + o : r0 + in, c = kC ? c0 + in : c0 + o;  // the chunk's first element
    const int outer = kC ? r : c, inner = kC ? c : r;
    const int outer_lim = kC ? rows : cols, inner_lim = kC ? cols : rows;
    E* d = static_cast<E*>(dst) + o * kLd + in;
    const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(d));
    const int valid = outer < outer_lim ? max(0, min(4, inner_lim - inner)) : 0;
    const E* src = nullptr;
    bool vec = false;
    if constexpr (!std::is_same<E, uint8_t>::value) {  // the view's own elements
      vec = v.vec_ok;
      src = v.p + (valid > 0 ? static_cast<size_t>(outer) * v.ld + inner : 0);
    } else {
      src = valid > 0 ? v.id_bytes(ids ? ids[i] : v.row_id(outer)) + inner : v.id_bytes(0);  // (nothing read when valid == 0)
      vec = v.ld % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 4 == 0;
    }
    if (vec) {
      constexpr int kBytes = 4 * sizeof(E);
      const int src_bytes = valid * static_cast<int>(sizeof(E));
      if constexpr (kBytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(src), "r"(src_bytes));
      else if constexpr (kBytes == 8)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(saddr), "l"(src), "r"(src_bytes));
      else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(saddr), "l"(src), "r"(src_bytes));
    } else {
      typename V::Elem e[4];
      v.template load<4>(r, c, rows, cols, e);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if constexpr (!std::is_same<E, uint8_t>::value) d[j] = e[j];
        else d[j] = static_cast<E>(__float2int_rn(to_f(e[j]) * 255.0f));  // the byte back (exact)
      }
    }
  }
}
// x3_issue's fast path: a k-tile wholly inside the slice [kbeg, kend) of a view whose chunks go
// by cp.async. Whatever x3_issue works out per chunk and per k-tile (the chunk's place, its row,
// its bounds, whether a vector copy may take it) is the same for every such k-tile but the k
// offset, so it is worked out once a tile: the chunk's offset in a stage, the bytes it copies (the
// k axis is whole inside the slice; the other axis's edge cuts a chunk alike every k-tile) and its
// source for the slice's first k-tile, which a k-tile moves 32 elements along k. A byte view's
// rows along the tile's other axis (the gathered forward's A) are looked up once a tile; rows
// along k (the gathered weight gradient's B) still come from X3Rows a stage ahead. The tail
// k-tile and views a vector copy cannot take go through x3_issue. (Staging had cost ~105 of step
// 6's ~265 instructions a warp a k-tile: logs/stages_3b7f804/, logs/stream_e802857/.)
// kKCols: k is the view's column axis (operand A) or its row axis (operand B).
template <int R, int C, bool kKCols, int kLd32, class V>
struct X3Stream {
  using S = X3Tile<V>;
  using E = typename S::Elem;
  static constexpr bool kC = V::kContig;
  static constexpr bool kKInner = kKCols == kC;                      // k runs along the stored rows
  static constexpr bool kIdsAlongK = ByteRows<V>::value && !kKInner;  // gathered rows along k
  static constexpr int kInner = kC ? C : R;
  static constexpr int kLd = kInner == 32 ? (kLd32 > 0 ? kLd32 : S::kLd32) : S::kLd64;
  static constexpr int kBytes = 4 * static_cast<int>(sizeof(E));
  const E* src[2];
  int off[2];     // a chunk's first element along the stored row (kIdsAlongK)
  int soff[2];    // its shared-memory offset in a stage, bytes
  int nbytes[2];  // the bytes it copies
  size_t step;    // elements a k-tile moves its source
  bool fast;

  // (r0, c0): the slice's first k-tile; rows x cols bound the view (the slice's end on the k axis).
  __device__ __forceinline__ void init(const V& v, int r0, int c0, int rows, int cols) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int ch = threadIdx.x + i * kXThreads;
      const int o = ch / (kInner / 4), in = (ch % (kInner / 4)) * 4;
      const int outer = kC ? r0 + o : c0 + o, inner = kC ? c0 + in : r0 + in;
      const int outer_lim = kC ? rows : cols, inner_lim = kC ? cols : rows;
      soff[i] = (o * kLd + in) * static_cast<int>(sizeof(E));
      const int valid = kKInner ? (outer < outer_lim ? 4 : 0) : max(0, min(4, inner_lim - inner));
      nbytes[i] = valid * static_cast<int>(sizeof(E));
      off[i] = inner;
      if constexpr (ByteRows<V>::value) {
        src[i] = kKInner && valid > 0 ? v.id_bytes(v.row_id(outer)) + inner : v.id_bytes(0);
      } else {
        src[i] = v.p + (valid > 0 ? static_cast<size_t>(outer) * v.ld + inner : 0);
      }
    }
    if constexpr (ByteRows<V>::value) {
      step = kXBK;
      fast = v.ld % 4 == 0 && reinterpret_cast<uintptr_t>(v.id_bytes(0)) % 4 == 0;
    } else {
      step = kKInner ? kXBK : static_cast<size_t>(kXBK) * v.ld;
      fast = v.vec_ok;
    }
  }
  // k-tile s of the slice into the stage at dst (ids: X3Rows's, for rows along k).
  __device__ __forceinline__ void issue(const V& v, int s, const void* dst, const int* ids) const {
    const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(dst));
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const E* g;
      if constexpr (kIdsAlongK) g = nbytes[i] > 0 ? v.id_bytes(ids[i]) + off[i] : src[i];
      else g = src[i] + static_cast<size_t>(s) * step;
      const unsigned sa = base + soff[i];
      if constexpr (kBytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(g), "r"(nbytes[i]));
      else if constexpr (kBytes == 8)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(sa), "l"(g), "r"(nbytes[i]));
      else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sa), "l"(g), "r"(nbytes[i]));
    }
  }
};

__device__ __forceinline__ void x3_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void x3_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// x rounded to TF32, to nearest with ties away from zero: cvt.rna.tf32.f32's bits for every x below
// 2^127 in magnitude, subnormals included (half a TF32 unit added to the magnitude's bits, the 13
// bits below TF32's cleared; a carry moves into the exponent as it should), in two integer instructions where ptxas expands the cvt
// into about four (the split was 37% of the gathered weight gradient's instructions at batch
// 8,192, logs/ncu_16be240/). tests/gpu/test_mlp_kernels.cu checks it against the cvt.
__device__ __forceinline__ uint32_t tf32_rna(float x) { return (__float_as_uint(x) + 0x1000u) & 0xFFFFE000u; }

// x = hi + lo with both parts TF32 (round to nearest, ties away). x - hi is exact in fp32.
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = tf32_rna(x);
  lo = tf32_rna(x - __uint_as_float(hi));
}

// The gathered images' bytes are exact in TF32: an integer below 2^11 keeps all its bits in TF32's
// 11 significant ones. So a byte operand is multiplied as the integer b (hi = b, lo = 0), its
// cross term drops (two products, not three), and the finished sums are divided by 255 once
// (AccumX3::finish), not every element (x · b / 255 = (x · b) / 255 up to one rounding of the sum).
// The table holds the 256 integers as fp32 bits, 1 KB of static shared memory, only in the
// kernels with a byte operand; AccumX3::prepare fills it once a block, before the mainloop's
// first barrier (a table load is one instruction; the conversion I2F is a quarter-rate one).
__device__ __forceinline__ uint32_t* x3_byte_values() {
  __shared__ uint32_t s[256];
  return s;
}

// Element (outer, inner) of a staged tile (row stride ld) as its TF32 parts: fp32 split here, a
// byte's integer value looked up (lo stays 0: the cross term with it is never issued).
template <class V>
__device__ __forceinline__ void x3_parts(const void* s, int outer, int inner, int ld, uint32_t& hi, uint32_t& lo) {
  const auto* t = static_cast<const typename X3Tile<V>::Elem*>(s);
  if constexpr (ByteRows<V>::value) {
    hi = x3_byte_values()[t[outer * ld + inner]];
    lo = 0;
  } else {
    split_tf32(to_f(t[outer * ld + inner]), hi, lo);
  }
}
// Element (m, k) of A's staged tile and (k, n) of B's, tile-relative, as TF32 parts.
template <class AV>
__device__ __forceinline__ void x3_a(const void* s, int m, int k, uint32_t& hi, uint32_t& lo) {
  using S = X3Tile<AV>;
  if constexpr (AV::kContig) x3_parts<AV>(s, m, k, S::kLd32, hi, lo);
  else x3_parts<AV>(s, k, m, S::kLd64, hi, lo);
}
template <class BV>
__device__ __forceinline__ void x3_b(const void* s, int k, int n, uint32_t& hi, uint32_t& lo) {
  using S = X3Tile<BV>;
  if constexpr (BV::kContig) x3_parts<BV>(s, k, n, S::kLd64, hi, lo);
  else x3_parts<BV>(s, n, k, S::kLd32, hi, lo);
}

// d += a · b on one m16n8k8 tile: a (16 x 8, row) in 4 registers, b (8 x 8, col) in 2, d in 4.
// (Phase 5's cluster32 rung, 5f, multiplies with these too.)
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  mma_tf32(d, a, b[0], b[1]);
}

// How the 64 x 64 block tile is dealt to its 8 warps (TcWarps<kKGroups>), per product (X3Acc, F16Acc):
//   kKGroups = false: 8 warps of 32 x 16 (warp w: rows 32 (w / 4), columns 16 (w % 4)), 2 (m16) x 2 (n8)
//     MMA tiles, each warp taking every k-step of a k-tile;
//   kKGroups = true: step 7's layout (7_fma_warp_tiles.cuh): two k-groups of four warps (kg = w / 4) each
//     cover the tile in 32 x 32 warp tiles (w % 4: rows 32 ((w % 4) / 2), columns 32 (w % 2)), 2 x 4 MMA
//     tiles, group kg taking k 16 kg .. 16 kg + 15 of every k-tile; the groups' sums are added once, in
//     the result tile (TcAccum::store). A k-step's A fragments then serve 4 MMAs, not 2, but a first
//     level of accumulation (a k-tile's products in the tensor cores) holds a group's 16 values of k,
//     not 32: twice the fp32 additions. Which pays depends on the product (logs/kgroups_e83e9ed/).
template <bool kKGroups>
struct TcWarps {
  static constexpr int kNJ = kKGroups ? 4 : 2;      // n8 MMA tiles of a warp tile (and 2 of m16)
  static constexpr int kHalves = kKGroups ? 1 : 2;  // k-steps of 16 a warp takes of a k-tile
  int kg, wm, wn;
  __device__ __forceinline__ TcWarps() {
    const int w = threadIdx.x / 32, q = w % 4;
    kg = kKGroups ? w / 4 : 0;
    wm = kKGroups ? (q / 2) * 32 : (w / 4) * 32;
    wn = kKGroups ? (q % 2) * 32 : q * 16;
  }
  // The k-tile's k-step of 16 a warp's hh-th is (hh < kHalves).
  __device__ __forceinline__ int half(int hh) const { return kKGroups ? kg : hh; }
};
static_assert(kXThreads == 256 && kXBM == 64 && kXBN == 64 && kXBK == 32, "8 warps on a 64 x 64 x 32 tile");

// The gathered forward's k-tile read along k in whole words (steps 5 and 6, mma_along_k): with g =
// lane / 4, t = lane % 4 and the warp's place w, aw[i][r][hh] holds A's 4 bytes of row w.wm + 16i + 8r +
// g at k = 16 h + 4t .. +3 (h = w.half(hh); rows 36 bytes apart), bq[j][hh] B's 4 elements of row w.wn +
// 8j + g at the same k (rows kX3AlongKBLd apart): a float4 in step 5, a uint2 of fp16 in step 6.
template <bool kKG, class E, class Q>
__device__ __forceinline__ void along_k_words(const uint8_t* as, const E* bs, const TcWarps<kKG>& w,
                                              uint32_t (&aw)[2][2][TcWarps<kKG>::kHalves],
                                              Q (&bq)[TcWarps<kKG>::kNJ][TcWarps<kKG>::kHalves]) {
  using W = TcWarps<kKG>;
  constexpr int kALd = X3Ld<uint8_t>::k32, kBLd = kX3AlongKBLd;
  static_assert(kALd % 4 == 0 && kBLd % 4 == 0 && sizeof(Q) == 4 * sizeof(E), "whole words of aligned rows");
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int hh = 0; hh < W::kHalves; ++hh) {
    const int k = 16 * w.half(hh) + 4 * t;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        aw[i][r][hh] = *reinterpret_cast<const uint32_t*>(as + (w.wm + i * 16 + r * 8 + g) * kALd + k);
#pragma unroll
    for (int j = 0; j < W::kNJ; ++j) bq[j][hh] = *reinterpret_cast<const Q*>(bs + (w.wn + j * 8 + g) * kBLd + k);
  }
}

// A warp's MMA columns in the result tile (TcAccum::store).
enum class WarpTiles {
  kPlain,       // MMA j's column c is the warp's column 8j + c
  kInterleaved  // MMA j = 2h + p's column c is the warp's column 16h + 2c + p (step 6's byte B staged [k][n])
};

// The accumulators of one warp tile, 2 (m16) x kNJ (n8) mma tiles of fp32, in the C fragments of
// m16n8k8 (tf32) and m16n8k16 (f16) alike: lane = 4g + t holds (g, 2t), (g, 2t+1), (g+8, 2t),
// (g+8, 2t+1). Steps 5 and 6 add their own mma() over it.
template <bool kKGroups>
struct TcAccum {
  using Warps = TcWarps<kKGroups>;
  static constexpr int kNJ = Warps::kNJ;
  using Frags = float[2][kNJ][4];
  static constexpr int kStages = kXStages;  // k-tiles in flight for tc64_tile (an accumulator may name more)
  Frags d;
  __device__ TcAccum() { zero(d); }
  // Per-block tables the fragment reads use (steps 5 and 6: the values of the 256 bytes), filled by
  // the block before its mainloop's first barrier; nothing here.
  template <class AV, class BV>
  __device__ __forceinline__ static void prepare() {}
  // B's row stride in a k-tile staged [n][k] (X3Layout): kX3AlongKBLd for the gathered forward.
  template <class AV, class BV>
  __host__ __device__ static constexpr int b_ld32() {
    return x3_b_ld32<AV, BV>();
  }
  // After the last k-tile: steps 5 and 6 multiply a byte operand as its integers, so the sums /
  // 255 are the products of byte / 255 (over_255, 0_problem.cuh: the quotient correctly rounded);
  // with k-groups after the groups' sum (store).
  template <class AV, class BV>
  __device__ __forceinline__ void finish() {
    if constexpr (!kKGroups && (ByteRows<AV>::value || ByteRows<BV>::value)) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < kNJ; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) d[i][j][e] = over_255(d[i][j][e]);
    }
  }
  __device__ __forceinline__ static void zero(Frags& f) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < kNJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) f[i][j][e] = 0.f;
  }
  // The running sums += one k-tile's (the second level, fp32 round to nearest).
  __device__ __forceinline__ void add(const Frags& part) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < kNJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[i][j][e] += part[i][j][e];
  }
  // Into the two 32 x 64 sub-tiles at c (each kBM * kLdc floats); a warp tile lies in sub-tile wm / 32.
  // k-groups: group 1 writes its sums, then group 0 adds its own to them (the same order every launch)
  // and, with a byte operand (kBytes), divides by 255. kInterleaved (32 x 16 warps): a lane's four
  // values of a row are adjacent, one 16-byte store.
  template <WarpTiles L, bool kBytes>
  __device__ __forceinline__ void store(float* c) const {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const Warps w;
    float* sub = c + (w.wm / kBM) * (kBM * kLdc);
    if constexpr (!kKGroups) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = i * 16 + g;
        if constexpr (L == WarpTiles::kInterleaved) {
          static_assert(kLdc % 4 == 0, "16-byte rows");
          *reinterpret_cast<float4*>(&sub[r * kLdc + w.wn + 4 * t]) = make_float4(d[i][0][0], d[i][1][0], d[i][0][1], d[i][1][1]);
          *reinterpret_cast<float4*>(&sub[(r + 8) * kLdc + w.wn + 4 * t]) =
              make_float4(d[i][0][2], d[i][1][2], d[i][0][3], d[i][1][3]);
        } else {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int col = w.wn + j * 8 + 2 * t;
            *reinterpret_cast<float2*>(&sub[r * kLdc + col]) = make_float2(d[i][j][0], d[i][j][1]);
            *reinterpret_cast<float2*>(&sub[(r + 8) * kLdc + col]) = make_float2(d[i][j][2], d[i][j][3]);
          }
        }
      }
    } else {
      auto put = [&](float* o, float v) {
        if (w.kg == 1) *o = v;
        else *o = kBytes ? over_255(*o + v) : *o + v;
      };
#pragma unroll
      for (int pass = 1; pass >= 0; --pass) {
        if (w.kg == pass) {
#pragma unroll
          for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {  // rows g, g + 8
              float* row = sub + (i * 16 + hr * 8 + g) * kLdc + w.wn;
#pragma unroll
              for (int j = 0; j < kNJ; ++j) {
                const int c0 = L == WarpTiles::kInterleaved ? 16 * (j / 2) + 4 * t + j % 2 : 8 * j + 2 * t;
                const int c1 = L == WarpTiles::kInterleaved ? c0 + 2 : c0 + 1;
                put(row + c0, d[i][j][2 * hr]);
                put(row + c1, d[i][j][2 * hr + 1]);
              }
            }
        }
        if (pass == 1) __syncthreads();  // (every thread stores: tc64_tile's epilogue is uniform)
      }
    }
  }
  // The block tile's store (steps 5 and 6 name their layout here).
  template <class AV, class BV>
  __device__ __forceinline__ void store_tile(float* c) const {
    store<WarpTiles::kPlain, ByteRows<AV>::value || ByteRows<BV>::value>(c);
  }
};

// Step 5's products over it. kTerms = 3 is the rung; kTerms = 1
// (hi·hi only: plain TF32) exists so that the tests can show a one-term product fails the fp32
// tolerance they hold the rung to.
// Two levels of accumulation: the tensor cores add into a k-tile's own accumulators (a warp's values
// of k of the k-tile: 32 in 12 MMAs, or a k-group's 16 in 6), which are then added to the running sums
// in ordinary fp32 (round to nearest). The
// tensor cores' own additions do not round to nearest: accumulating a whole K = 8,191 in them came
// out 5.1 times over the fp32 tolerance (error growing with K: a bias), the two levels within it.
template <int kTerms = 3, bool kKG = false>
struct AccumX3 : TcAccum<kKG> {
  using Base = TcAccum<kKG>;
  using typename Base::Frags;
  using Base::kNJ;
  // A byte operand read element by element: the table of the 256 bytes' integer values, one entry
  // a thread (the gathered forward reads its bytes as words: no table).
  template <class AV, class BV>
  __device__ __forceinline__ static void prepare() {
    if constexpr ((ByteRows<AV>::value || ByteRows<BV>::value) && !(X3AlongK<AV, BV>::value && kTerms == 3)) {
      static_assert(kXThreads >= 256, "one table entry a thread");
      if (threadIdx.x < 256) x3_byte_values()[threadIdx.x] = __float_as_uint(static_cast<float>(threadIdx.x));
    }
  }
  // (A byte operand's sums are divided by 255 in TcAccum's finish or store.)
  // Fragment ownership (PTX ISA, mma.m16n8k8 .tf32): lane = 4g + t holds A (g, t), (g+8, t),
  // (g, t+4), (g+8, t+4); B (t, g), (t+4, g).
  template <class AV, class BV>
  __device__ __forceinline__ void mma(const void* as, const void* bs) {
    if constexpr (X3AlongK<AV, BV>::value && std::is_same<typename BV::Elem, float>::value && kTerms == 3) {
      mma_along_k(static_cast<const uint8_t*>(as), static_cast<const float*>(bs));
      return;
    }
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const typename Base::Warps w;
    Frags part;  // this k-tile's sums (the first level)
    Base::zero(part);
#pragma unroll
    for (int hh = 0; hh < Base::Warps::kHalves; ++hh)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int kk = 16 * w.half(hh) + 8 * q;
        uint32_t bh[kNJ][2], bl[kNJ][2];
#pragma unroll
        for (int j = 0; j < kNJ; ++j) {
          const int n = w.wn + j * 8 + g;
          x3_b<BV>(bs, kk + t, n, bh[j][0], bl[j][0]);
          x3_b<BV>(bs, kk + t + 4, n, bh[j][1], bl[j][1]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int m = w.wm + i * 16 + g;
          uint32_t ah[4], al[4];
          x3_a<AV>(as, m, kk + t, ah[0], al[0]);
          x3_a<AV>(as, m + 8, kk + t, ah[1], al[1]);
          x3_a<AV>(as, m, kk + t + 4, ah[2], al[2]);
          x3_a<AV>(as, m + 8, kk + t + 4, ah[3], al[3]);
#pragma unroll
          for (int j = 0; j < kNJ; ++j) {
            if (kTerms == 3) {  // the small terms first; an exact (byte) operand has none
              if constexpr (!ByteRows<AV>::value) mma_tf32(part[i][j], al, bh[j]);
              if constexpr (!ByteRows<BV>::value) mma_tf32(part[i][j], ah, bl[j]);
            }
            mma_tf32(part[i][j], ah, bh[j]);
          }
        }
      }
    this->add(part);
  }

  // The gathered forward: A's bytes [m][k] (row stride X3Tile's 36) and B's fp32 weights [n][k]
  // (row stride 48), both contiguous along k. An MMA sums its 8 values of k in any order, so the
  // k-tile's 32 values are dealt to the lanes so that each reads whole words: in k-step s
  // (h = s / 2, q = s % 2) lane slot t stands for k = 16h + 4t + 2q and slot t + 4 for the k after
  // it, in A and in B alike. A lane's bytes of a row for steps 0-1 are then one 4-byte word and for
  // 2-3 the next (8 word loads a k-tile where 32 byte loads and 32 table loads were), and its four
  // floats of B one 16-byte load (4 where 16 were). A byte becomes its fp32 integer with a byte
  // permute and one subtraction (2^23 + b - 2^23, exact).
  __device__ __forceinline__ static uint32_t byte_as_tf32(uint32_t word, int i) {
    const uint32_t f = __byte_perm(word, 0x4B000000u, 0x7540u + i);  // bits of 2^23 + byte i
    return __float_as_uint(__uint_as_float(f) - 8388608.0f);
  }
  __device__ __forceinline__ void mma_along_k(const uint8_t* as, const float* bs) {
    using W = typename Base::Warps;
    const W w;
    uint32_t aw[2][2][W::kHalves];  // [i][row g / g + 8][hh]
    float4 bq[kNJ][W::kHalves];     // [j][hh]
    along_k_words(as, bs, w, aw, bq);
    Frags part;  // this k-tile's sums (the first level)
    Base::zero(part);
#pragma unroll
    for (int hh = 0; hh < W::kHalves; ++hh)
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        uint32_t bh[kNJ][2], bl[kNJ][2];
#pragma unroll
        for (int j = 0; j < kNJ; ++j) {
          const float4& v = bq[j][hh];
          split_tf32(q == 0 ? v.x : v.z, bh[j][0], bl[j][0]);
          split_tf32(q == 0 ? v.y : v.w, bh[j][1], bl[j][1]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const uint32_t a[4] = {byte_as_tf32(aw[i][0][hh], 2 * q), byte_as_tf32(aw[i][1][hh], 2 * q),
                                 byte_as_tf32(aw[i][0][hh], 2 * q + 1), byte_as_tf32(aw[i][1][hh], 2 * q + 1)};
#pragma unroll
          for (int j = 0; j < kNJ; ++j) {
            mma_tf32(part[i][j], a, bl[j]);  // the small term first (A's bytes have none)
            mma_tf32(part[i][j], a, bh[j]);
          }
        }
      }
    this->add(part);
  }
};
// Step 5's accumulator for a product (logs/kgroups_e83e9ed/, GEMM benchmark at batch 8,192): k-groups
// where a k-step's fragments are reads and splits of fp32 elements (the weight gradients and the
// hidden products: the gathered weight gradient 51.3 / 49.9 -> 47.5 / 47.5 us), 32 x 16 warps for the
// gathered forward, whose B splits are the same either way and whose additions double (34.8 / 33.8 ->
// 36.0 / 36.1 us with k-groups). This choice against 32 x 16 warps for all (H100, 2 rounds,
// profiles/nvidia-h100-80gb-hbm3/logs/kgroups_hybrid_954c125/): the gathered weight gradient 53.1 /
// 51.6 -> 47.7 / 48.0 us (1.61x / 1.56x cuBLASLt fp32), W1's fp32 step 134.92 -> 131.82 us at 8,192.
template <int kTerms, class AV, class BV>
using X3Acc = AccumX3<kTerms, !X3AlongK<AV, BV>::value>;

// Dynamic shared memory of a problem: kXStages stages of A's and B's tiles, which the result's two
// 32 x 64 sub-tiles overlay once the loop is done.
// (Acc: the accumulator the tile runs; it names B's row stride when B is staged along k: step 7's
// FMA tile reads it differently from the MMAs' gathered forward, TcAccum::b_ld32.)
template <class P, class Acc = TcAccum<false>>
struct X3Layout {
  static constexpr int kBLd32 = Acc::template b_ld32<typename P::AView, typename P::BView>();
  static constexpr int kA = x3_round128(x3_tile_bytes<typename P::AView>());
  static constexpr int kB = x3_round128(x3_tile_bytes<typename P::BView, kBLd32>());
  static constexpr int kStage = kA + kB;
  static constexpr int kResult = 2 * kBM * kLdc * static_cast<int>(sizeof(float));
  static constexpr int kBytes = Acc::kStages * kStage > kResult ? Acc::kStages * kStage : kResult;
};

// Output tiles of 64 x 64 (the split-K slots and counters stay those of the 32 x 64 tiles).
template <class P>
__host__ __device__ inline int x3_tiles(const P& p) {
  return ((p.M + kXBM - 1) / kXBM) * p.tiles_n();
}

// An epilogue with `static constexpr bool kEarlyDraw = true` (phase 5's FwdHiddenEpi: its dropout
// bits) prepares both 32-row sub-tiles before the PDL wait (prefetch_pair) and the second one's in
// place of its prefetch (next_sub); the others prefetch each sub-tile as the 32 x 64 kernel does.
template <class E, class = void>
struct EarlyDraw : std::false_type {};
template <class E>
struct EarlyDraw<E, std::void_t<decltype(E::kEarlyDraw)>> : std::integral_constant<bool, E::kEarlyDraw> {};

// After a 64 x 64 tile's mainloop (steps 5-7 and 9): its result in cs as two 32 x 64 sub-tiles
// (every thread's store done and a barrier passed), the split-K fix-up of both, then each
// sub-tile's epilogue.
template <class P, bool kTwoLevel = false>
__device__ __forceinline__ void tc64_epilogues(const P& p, float* cs, int m0, int bn, int split) {
  using Epi = typename std::decay<decltype(p.epi)>::type;
  const int n0 = bn * kXBN;
  constexpr int kSubs = kXBM / kBM;
  const int subs = min(kSubs, (p.M - m0 + kBM - 1) / kBM);  // sub-tiles inside M: the same for the tile row
  // Split: both sub-tiles handed over at once (one fence and one counter, sub-tile 0's); the last
  // block of the tile runs the epilogues.
  const int tile0 = (m0 / kBM) * p.tiles_n() + bn;
  if constexpr (kTwoLevel) {
    if (!splitk_fixup_rows_two_level<kXThreads, VecFixup<Epi>::value, kSubs>(cs, p.ws, p.counters, tile0, p.tiles_n(),
                                                                            subs, p.tiles(), split, p.splits))
      return;
  } else if (p.splits > 1 && !splitk_fixup_rows<kXThreads, VecFixup<Epi>::value, kSubs>(cs, p.ws, p.counters, tile0,
                                                                                        p.tiles_n(), subs, split,
                                                                                        p.splits)) {
    return;
  }
#pragma unroll 1
  for (int s = 0; s < subs; ++s) {
    const int ms = m0 + s * kBM;
    if (s > 0) {
      __syncthreads();  // the previous sub-tile's epilogue is done with the per-block scratch
      if constexpr (EarlyDraw<Epi>::value) p.epi.next_sub();
      else p.epi.prefetch(ms, n0, p.M, p.N);
      __syncthreads();
    }
    p.epi(cs + s * (kBM * kLdc), ms, n0, p.M, p.N);
  }
}

// One (64 x 64 tile, split) with the products of Acc (step 5's AccumX3, step 6's AccumF16): the
// cp.async pipeline, the split-K fix-up of both 32-row sub-tiles, then each one's epilogue.
// kTwoLevel: an instance for products planned past kFixupGroup slices (step 7's long-K products
// with few tiles), whose fix-up adds in two levels (splitk_fixup_rows_two_level).
template <class P, class Acc, bool kTwoLevel = false>
__device__ __forceinline__ void tc64_tile(const P& p) {
  extern __shared__ __align__(128) unsigned char gemm_dyn[];
  using AV = typename P::AView;
  using BV = typename P::BView;
  using Lay = X3Layout<P, Acc>;
  constexpr int kSt = Acc::kStages;
  const int xt = x3_tiles(p);
  const int split = blockIdx.x / xt, tile = blockIdx.x % xt;
  const int bn = tile % p.tiles_n(), bm = tile / p.tiles_n();
  const int m0 = bm * kXBM, n0 = bn * kXBN;
  const int kbeg = split * p.kchunk, kend = min(p.K, kbeg + p.kchunk);
  const int nst = kend > kbeg ? (kend - kbeg + kXBK - 1) / kXBK : 0;
  auto a_stage = [&](int s) { return gemm_dyn + s * Lay::kStage; };
  auto b_stage = [&](int s) { return gemm_dyn + s * Lay::kStage + Lay::kA; };

  Acc acc;
  X3Rows<AV> ra;  // a byte operand's row ids for the next stage to issue (X3Rows)
  X3Rows<BV> rb;
  X3Stream<kXBM, kXBK, true, 0, AV> sa{};  // (set up below: B's before the PDL wait unless fresh, A's after)
  X3Stream<kXBK, kXBN, false, Lay::kBLd32, BV> sb{};
  // k-tiles [0, nfa) and [0, nfb) go by the streams' fast path (set once each stream is set up).
  int nfa = 0, nfb = 0;
  const int nfull = (kend - kbeg) / kXBK;  // k-tiles wholly inside the slice
  auto issue_a = [&](int s, int st) {  // k-tile s into stage st
    const int* ids = decltype(sa)::kIdsAlongK ? ra.ids() : nullptr;
    if (s < nfa) sa.issue(p.a, s, a_stage(st), ids);
    else x3_issue<kXBM, kXBK>(p.a, m0, kbeg + s * kXBK, p.M, kend, a_stage(st), ids);
  };
  auto issue_b = [&](int s, int st) {
    const int* ids = decltype(sb)::kIdsAlongK ? rb.ids() : nullptr;
    if (s < nfb) sb.issue(p.b, s, b_stage(st), ids);
    else x3_issue<kXBK, kXBN, Lay::kBLd32>(p.b, kbeg + s * kXBK, n0, kend, p.N, b_stage(st), ids);
  };
  // Row ids a stage ahead only where rows run along k; the gathered forward's rows are the tile's
  // (its stream looks them up once; its tail k-tile looks them up in x3_issue).
  auto fetch_a = [&](int s) {
    if constexpr (decltype(sa)::kIdsAlongK) ra.template fetch<kXBM, kXBK>(p.a, m0, kbeg + s * kXBK, p.M, kend);
  };
  auto fetch_b = [&](int s) {
    if constexpr (decltype(sb)::kIdsAlongK) rb.template fetch<kXBK, kXBN>(p.b, kbeg + s * kXBK, n0, kend, p.N);
  };
  // B's first stages go out before the PDL wait (weights, images or activations of the forward
  // pass, which the kernel just before does not write), unless p.b_fresh; A's after it.
  const bool early_b = !p.b_fresh;
  if (early_b) {
    sb.init(p.b, kbeg, n0, kend, p.N);
    nfb = sb.fast ? nfull : 0;
#pragma unroll
    for (int s = 0; s < kSt - 1; ++s)
      if (s < nst) fetch_b(s), issue_b(s, s);
  }
  // The fragment reads' tables (a byte operand's values), under those copies and before the wait:
  // they depend on no kernel. The loop's first barrier orders them before any read.
  Acc::template prepare<AV, BV>();
  using Epi = typename std::decay<decltype(p.epi)>::type;
  if constexpr (EarlyDraw<Epi>::value) p.epi.prefetch_pair(m0, n0, p.M, p.N);
  pdl_wait();
  pdl_launch_dependents();
  sa.init(p.a, m0, kbeg, p.M, kend);  // (A's row ids, in the gathered forward, after the wait like its copies)
  nfa = sa.fast ? nfull : 0;
  if (!early_b) {
    sb.init(p.b, kbeg, n0, kend, p.N);
    nfb = sb.fast ? nfull : 0;
  }
#pragma unroll
  for (int s = 0; s < kSt - 1; ++s) {
    if (s < nst) {
      if (!early_b) fetch_b(s), issue_b(s, s);
      fetch_a(s), issue_a(s, s);
    }
    x3_commit();
  }
  // The row ids of the first stage the loop issues, fetched now: each iteration issues its stage's
  // copies and fetches the next stage's ids, which land under the MMAs.
  if (kSt - 1 < nst) fetch_a(kSt - 1), fetch_b(kSt - 1);
  if constexpr (!EarlyDraw<Epi>::value) p.epi.prefetch(m0, n0, p.M, p.N);  // sub-tile 0's; under the first stages' latency
  int rs = 0, ws = kSt - 1;  // the stages k-tile t is read from and k-tile t + kSt - 1 goes to
  for (int t = 0; t < nst; ++t) {
    x3_wait<kSt - 2>();  // stage t has landed (this thread's copies) ...
    __syncthreads();     // ... and everyone's; every warp is done with stage t - 1
    const int nx = t + kSt - 1;
    if (nx < nst) {
      issue_a(nx, ws), issue_b(nx, ws);
      if (nx + 1 < nst) fetch_a(nx + 1), fetch_b(nx + 1);
    }
    x3_commit();
    acc.template mma<AV, BV>(a_stage(rs), b_stage(rs));
    rs = rs == kSt - 1 ? 0 : rs + 1;
    ws = ws == kSt - 1 ? 0 : ws + 1;
  }
  x3_wait<0>();
  __syncthreads();
  float* cs = reinterpret_cast<float*>(gemm_dyn);
  acc.template finish<AV, BV>();
  acc.template store_tile<AV, BV>(cs);
  __syncthreads();

  tc64_epilogues<P, kTwoLevel>(p, cs, m0, bn, split);
}

template <class Tag, class P, int kTerms>
__global__ void __launch_bounds__(kXThreads, kXBlocksPerSm) gemm_tf32x3_kernel(P p) {
  tc64_tile<P, X3Acc<kTerms, typename P::AView, typename P::BView>>(p);
}

// Picks the split count for the 64 x 64 tile (steps 5 and 6): two blocks fit an SM (shared memory, at most 128 registers a
// thread); a product with fewer tiles than SMs is cut into slices of at least four k-tiles (at most
// 16), as many as fit in one wave of two blocks an SM: one block more than the wave holds runs
// after the others, and the product takes two blocks' time. (At batch 8,192 the first layer's
// forward has 256 tiles: one wave as it is; its weight gradient has 26 tiles, 10 slices: 260 blocks
// of the 264 an H200 holds at once, where rounding the slices up gave 11 and 286 blocks. W1's step
// at batch 2,048-8,192 with a half, a third or a fifth of these slices, or two or three times as
// many (past one wave), was never faster beyond run-to-run noise: logs/splits_693098b/.)
// (max_splits: step 7 may go past kFixupGroup slices, its fix-up then adding in two levels.)
template <class P>
inline void plan_tc64_splits(P& p, int sm_count, int max_splits = kFixupGroup) {
  const int ktiles = (p.K + kXBK - 1) / kXBK;
  const int tiles = x3_tiles(p);
  int s = 1;
  if (tiles < sm_count && ktiles >= 8) {
    s = (kXBlocksPerSm * sm_count) / tiles;  // whole slices that fit one wave
    s = s < max_splits ? s : max_splits;
    s = s < ktiles / 4 ? s : ktiles / 4;
  }
  const int per = ktiles > 0 ? (ktiles + s - 1) / s : 1;
  p.splits = ktiles > 0 ? (ktiles + per - 1) / per : 1;
  p.kchunk = per * kXBK;
}
// Steps 6 and 7's plan: as above, except that a product with fewer tiles than a sixteenth of the
// blocks one wave holds may take up to 16 x 16 slices of at least four k-tiles, added in two levels
// (tc64_tile's kTwoLevel).
template <class P>
inline void plan_tc64_splits_two_level(P& p, int sm_count) {
  const bool few_tiles = x3_tiles(p) * kFixupGroup < kXBlocksPerSm * sm_count;
  plan_tc64_splits(p, sm_count, few_tiles ? kFixupGroup * kFixupGroup : kFixupGroup);
}
template <class P>
inline void plan_tf32x3(P& p, int sm_count) {
  p.rung = GemmRung::TF32x3;
  plan_tc64_splits(p, sm_count);
}

// Launches kernel instance K of the 64 x 64 tile (steps 5-7 and 9) over its (tile, split) blocks
// with kSmem bytes of dynamic shared memory; above 48 KB a kernel must ask for it, once an instance.
template <auto K, int kSmem, class P>
inline void launch_tc64(const P& p, cudaStream_t st, bool pdl) {
  static bool attr_set = false;
  if (!attr_set) {
    CUDA_CHECK(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    attr_set = true;
  }
  launch_kernel(K, x3_tiles(p) * p.splits, kXThreads, kSmem, st, pdl, p);
}

template <class Tag, class P, int kTerms>
inline void launch_tf32x3(const P& p, cudaStream_t st, bool pdl) {
  launch_tc64<gemm_tf32x3_kernel<Tag, P, kTerms>,
              X3Layout<P, X3Acc<kTerms, typename P::AView, typename P::BView>>::kBytes>(p, st, pdl);
}

}  // namespace mlp
}  // namespace nb
