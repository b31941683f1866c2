// common/mlp/gemm/9_f16_wgmma.cuh — the GEMM ladder, step 9: the first layer's fp16 products on
// wgmma, Hopper's warpgroup MMA.
//
// Adds: step 6's 64 x 64 tile, pipeline, split-K hand-over and epilogues, with each warpgroup (4
// warps) computing a 64 x 32 half of the tile by one wgmma.m64n32k16 a k-step, where step 6's 8 warps
// execute 32 mma.sync m16n8k16 for the same 64 x 64 x 16 and read both operands' fragments for them.
// One operand stays in registers, read as step 6 reads it (fp16 by ldmatrix, the gathered images'
// bytes as f16x2 integers); the other, fp16, is read by the tensor cores from shared memory, copied
// there by 16-byte cp.async straight into wgmma's canonical layout (8 x 8 core matrices of 16-byte
// rows, no swizzle). The forward: A (the bytes, or activations) in registers, W [n][k] K-major. The
// first layer's weight gradient, dZ^T X, with the roles swapped so that the bytes are the register
// operand: X^T (by ldmatrix.trans on the staged bytes) times dZ [k][m] MN-major, stored transposed.
// The one design decision: change only the inner k-tile. The shared-memory operand is copied into
// the canonical layout as it arrives and the bytes never go to shared memory as fp16, so every tile,
// split and epilogue of steps 5-6 is reused as it is.
// Runs where it can (plan_f16wgmma's callers check wgmma_ok; the operand types: WgmmaFits): the
// forward's A fp16 (either orientation) or bytes [m][k] with B fp16 [n][k]; the weight gradient's A
// fp16 [k][m] with B bytes [k][n]; the copied operand's rows 16-byte aligned. Built for sm_90a (the
// Makefile's default gencode); elsewhere the kernel body is empty and the plan refuses it.
// The pipeline: four stages of two k-tiles in flight (one wait, proxy fence and barrier a stage).
// The sums are exact to fp32 rounding as step 6's: each stage (four wgmma k-steps) sums on the
// tensor cores into fresh registers, added to the running sums in fp32.
// Prediction, before measuring (H200, W1 at batch 8,192; step 6 25.2 and 31.5 us, issue-bound at ~176
// instructions a warp a k-tile in the forward: phase5_batched__gemm-b8192-fp16.json, e802857). Read
// in this build's SASS (nvdisasm, the fast path): the gathered forward ~100 instructions a warp a
// k-tile (A's 8 16-bit loads, 4 permutes and 16 conversion instructions, 8 FADDs of the second
// level, three copies, half a stage's wait, proxy fence (MEMBAR.ALL.CTA) and barrier, 2 HGMMA):
// ~14 us if time follows instructions, against ~6 us of L2 -> SM traffic (32 MB: W re-read by each
// of the 128 row tiles); the weight gradient ~165 (the gathered rows' copies and their ids a stage
// ahead most of them), ~26 us at the forward's rate over 10 slices of ~26 k-tiles. W1's fp16 step
// 88.35 -> ~72 us, ~1.8x our fp32 (131.4); if time follows instructions only half way, as step 6's
// staging change did, ~80 us and ~1.65x. A risk: if the proxy fence's MEMBAR waits for the copies
// still in flight, the stages act as one and nothing gains.
// Measured (H200, c3c7d16, logs/next_c3c7d16/): correct (GPU tests, memcheck, --validate) and slower:
// at batch 8,192 the forward 28.1 us against step 6's 23.2, the weight gradient 31.3 against 29.0; W1's
// fp16 step 86.29 -> 95.84 us (faster only at 1,024, 57.86 -> 55.62, against the WMMA tile). The
// weight gradient executes 11.60 M warp instructions to step 6's 11.35 M: the MMAs were not the
// instruction count, the copies, row ids and conversions are. So it stays a rung to choose.
// The risk named above, measured (H100, nvidia-h100-80gb-hbm3/logs/wgbulk_3d30910/): without the
// proxy fence the forward at 8,192 takes 30.7-31.0 us against 31.3-31.6, so the fence is not what
// holds a stage; MMAs left in flight across k-tiles and bulk copies in the fence's place ran slower
// (phase 5 notes, "Tried and dropped").
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "mlp/gemm/6_f16_mma.cuh"

namespace nb {
namespace mlp {

// wgmma (and this step's kernel body) exists in sm_90a device code only.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define NB_WGMMA_DEVICE 1
#else
#define NB_WGMMA_DEVICE 0
#endif

// ------------------------------------------------------------------ what the rung takes
// Two forms. The forward's: A fp16 staged either way (read by ldmatrix, step 6) or bytes [m][k] (the
// gathered forward) in registers, B fp16 [n][k] (a layer's weights) from shared memory. The
// gathered weight gradient's, dW = dZ^T X with X the images' bytes [k][n]: the roles swapped, so
// that the bytes are the register operand (wgmma reads no bytes from shared memory): it computes
// dW^T's 64 x 64 tile, X^T (the tile's 64 columns of pixels as the MMA's rows) in registers times
// dZ (fp16 [k][m], the tile's 64 rows as the MMA's columns) from shared memory in the canonical
// MN-major layout, and stores the result transposed. fp32 never.
template <class AV, class BV>
struct WgmmaSwapped
    : std::integral_constant<bool, f16_staged<AV>() && !AV::kContig && ByteRows<BV>::value && BV::kContig> {};
template <class AV, class BV>
struct WgmmaFits
    : std::integral_constant<bool, ((f16_staged<AV>() || (ByteRows<AV>::value && AV::kContig)) && f16_staged<BV>() &&
                                    !BV::kContig) ||
                                       WgmmaSwapped<AV, BV>::value> {};

// The shared-memory operand's canonical layouts, no swizzle (PTX ISA, "Shared Memory Matrix
// Layout"): a k-tile of 64 (n) x 32 (k) fp16 in 8 x 8 core matrices of 128 contiguous bytes, core
// matrix (n / 8, k / 8) at byte (k / 8) * kWgLbo + (n / 8) * kWgSbo. K-major (the forward's W,
// ((8,m),(T,2k)):((1T,SBO),(1,LBO))): its 16-byte rows are the 8 values of k of one n, element
// (n, k) at + (n % 8) * 16 + (k % 8) * 2. MN-major (the weight gradient's dZ,
// ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))): its rows are 8 values of n at one k, element (n, k) at
// + (k % 8) * 16 + (n % 8) * 2. In both, kWgLbo (the descriptor's leading-dimension byte offset)
// steps along k and kWgSbo (its stride byte offset) along n.
constexpr int kWgLbo = 1024, kWgSbo = 128;
constexpr int kWgBTile = kXBN * kXBK * 2;  // 4,096 bytes of fp16
static_assert(kWgLbo == (kXBN / 8) * kWgSbo && kWgBTile == (kXBK / 8) * kWgLbo, "the core matrices tile the k-tile");
__host__ __device__ constexpr int wg_b_offset(int n, int k, bool k_major = true) {
  return (k / 8) * kWgLbo + (n / 8) * kWgSbo + (k_major ? (n % 8) * 16 + (k % 8) * 2 : (k % 8) * 16 + (n % 8) * 2);
}
// The pipeline: kWgStages stages in flight, each of kWgTiles k-tiles (one wait, proxy fence and
// barrier, and one round of the second level's additions, for 64 values of k).
constexpr int kWgStages = 4, kWgTiles = 2;
// A's staged rows: step 5's strides, but 40 bytes for a byte A [m][k] (wg_a_frags' 16-bit loads of a
// warp then hit 16 distinct banks; step 5's 36 puts two of them on one).
template <class AV>
constexpr int wg_a_ld32() {
  return ByteRows<AV>::value ? 40 : 0;  // (0: X3Tile's own)
}

// Dynamic shared memory: kWgStages * kWgTiles slots of a k-tile's A tile and B tile, and the
// result's two 32 x 64 sub-tiles over them once the loop is done. The forward: A staged as step 5 stages it
// (byte rows 40 apart), B canonical K-major. The weight gradient: A (dZ) canonical MN-major, B (the
// bytes) as step 5 stages them ([k][n], rows 80 apart).
template <class P>
struct WgLayout {
  using AV = typename P::AView;
  using BV = typename P::BView;
  static constexpr bool kSwapped = WgmmaSwapped<AV, BV>::value;
  static constexpr int kA =
      kSwapped ? kWgBTile
               : x3_round128(x3_tile_bytes<AV, wg_a_ld32<AV>() ? wg_a_ld32<AV>() : X3Tile<AV>::kLd32>());
  static constexpr int kB = kSwapped ? x3_round128(x3_tile_bytes<BV>()) : kWgBTile;
  static constexpr int kSlot = kA + kB;  // one k-tile
  static constexpr int kLoop = kWgStages * kWgTiles * kSlot;
  static constexpr int kResult = 2 * kBM * kLdc * static_cast<int>(sizeof(float));
  static constexpr int kBytes = kLoop > kResult ? kLoop : kResult;
};

// ------------------------------------------------------------------ wgmma and its fences
// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): the start address, the
// leading- and stride-dimension byte offsets, each >> 4 in 14 bits; base offset 0, no swizzle.
__device__ __forceinline__ uint64_t wg_desc(const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<uint64_t>((a & 0x3FFFF) >> 4) | static_cast<uint64_t>(kWgLbo >> 4) << 16 |
         static_cast<uint64_t>(kWgSbo >> 4) << 32;
}
// What the threads' copies wrote to shared memory made visible to the tensor cores' reads, which go
// through the async proxy (cp.async writes through the generic one); each thread fences its own
// writes before the barrier that publishes them.
__device__ __forceinline__ void wg_fence_proxy() {
#if NB_WGMMA_DEVICE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_fence() {
#if NB_WGMMA_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#if NB_WGMMA_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_wait_all() {
#if NB_WGMMA_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
// A's registers, computed by ordinary instructions, pinned before wgmma.fence (so that none of
// their conversions moves past it).
__device__ __forceinline__ void wg_pin(uint32_t (&a)[2][4]) {
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[s][e])::"memory");
}
// The accumulators and A's registers are read and written by the tensor cores until the wait: these
// empty asm, after the wait, keep the compiler from reading the one or reusing the other before.
__device__ __forceinline__ void wg_hold(float (&d)[16]) {
#pragma unroll
  for (int e = 0; e < 16; ++e) asm volatile("" : "+f"(d[e])::"memory");
}
__device__ __forceinline__ void wg_hold(uint32_t (&a)[2][4]) { wg_pin(a); }

// d (=, or += when kAccumulate) A · B on a 64 x 32 x 16 step: A (64 x 16, this warp's 16 rows) in the
// four f16x2 registers of an m16n8k16 A fragment, B (16 x 32) from the canonical layout at desc.
// d's 16 registers a thread: d[4j + e] is C's (16 w + g + 8 (e / 2), 8 j + 2 t + e % 2) for warp w
// of the warpgroup, lane 4 g + t (PTX ISA, wgmma .m64nNk16 D fragment).
// kTransB: B in the MN-major layout (imm-trans-b = 1), else K-major.
template <bool kAccumulate, bool kTransB>
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[16], const uint32_t (&a)[4], uint64_t desc) {
#if NB_WGMMA_DEVICE
  if constexpr (kAccumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, %21;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(kTransB ? 1 : 0));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, %21;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]),
          "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(kTransB ? 1 : 0));
  }
#else
  (void)a, (void)desc;
#pragma unroll
  for (int e = 0; e < 16; ++e) d[e] = kAccumulate ? d[e] : 0.f;
#endif
}

// ------------------------------------------------------------------ the operands
// A's fragments for the k-tile's two k-steps, this warp's 16 rows of the warpgroup's 64 (rows 16 q ..
// +15, q = warp % 4). fp16: step 6's ldmatrix. Bytes [m][k] (rows wg_a_ld32 = 40 apart): a0..a3
// need the byte pairs (g, 2t..2t+1), (g+8, ..), (g, 2t+8..2t+9), (g+8, ..): two 16-bit loads a row
// and k-step, one byte permute into a word (k = 2t, 2t+1, 2t+8, 2t+9), two conversions
// (bytes_as_f16x2). Banks: a warp's 16-bit loads lie in words 10 g + t / 2 (+ 2, + 4, + 6): 16
// distinct banks, lanes t and t + 1 sharing a word.
template <class AV>
__device__ __forceinline__ void wg_a_frags(const void* as, uint32_t (&a)[2][4]) {
  const int lane = threadIdx.x % 32, q = (threadIdx.x / 32) % 4;
  if constexpr (ByteRows<AV>::value) {
    constexpr int kLd = wg_a_ld32<AV>();
    const int g = lane / 4, t = lane % 4;
    const auto* s = static_cast<const uint8_t*>(as);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t* row = s + (16 * q + 8 * r + g) * kLd + 2 * t;
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        const uint32_t lo = *reinterpret_cast<const uint16_t*>(row + 16 * ks);
        const uint32_t hi = *reinterpret_cast<const uint16_t*>(row + 16 * ks + 8);
        const uint32_t w = __byte_perm(lo, hi, 0x5410);
        a[ks][r] = bytes_as_f16x2<0, 1>(w);
        a[ks][2 + r] = bytes_as_f16x2<2, 3>(w);
      }
    }
  } else {
    f16_a_frag<AV>(as, 16 * q, 0, a[0]);
    f16_a_frag<AV>(as, 16 * q, 16, a[1]);
  }
}

// B's fp16 [n][k] k-tile into the canonical layout: thread i copies row n = i / 4, values of k
// 8 (i % 4) .. +7 (16 bytes, one core-matrix row), zero-filled past K (the copy's source size) and
// past N (nothing read). Needs 16-byte aligned rows (wgmma_ok: ld % 8 == 0, an aligned base).
template <class V>
struct WgBRows {
  const __half* base = nullptr;  // the matrix (the source of a copy of nothing)
  const __half* src = nullptr;   // the slice's first k-tile's 8 values of this thread's row
  int k = 0;                     // their first k
  int soff = 0;                  // byte offset in a stage
  int full = 0;                  // the bytes a k-tile wholly inside the slice copies: 16, or 0 past N
  __device__ __forceinline__ void init(const V& v, int n0, int kbeg, int N) {
    static_assert(kXThreads == 4 * kXBN && kXBK == 32, "one 16-byte chunk a thread a k-tile");
    const int n = threadIdx.x / 4, kc = threadIdx.x % 4;
    const bool inside = n0 + n < N;
    base = v.p;
    k = kbeg + 8 * kc;
    src = inside ? v.p + static_cast<size_t>(n0 + n) * v.ld + k : v.p;
    soff = wg_b_offset(n, 8 * kc);
    full = inside ? 16 : 0;
  }
  // k-tile s of the slice [kbeg, kend) into the stage at dst (its shared address); kWhole: the k-tile
  // lies wholly inside the slice (nothing to work out but the source).
  template <bool kWhole>
  __device__ __forceinline__ void issue(int s, unsigned dst, int kend) const {
    int nbytes = full;
    if constexpr (!kWhole) nbytes = full > 0 ? 2 * max(0, min(8, kend - (k + s * kXBK))) : 0;
    const __half* g = nbytes > 0 ? src + s * kXBK : base;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + soff), "l"(g), "r"(nbytes));
  }
};

// The weight gradient's register operand: X^T's fragments for the k-tile's two k-steps from the
// bytes staged [k][n] (rows X3Ld<uint8_t>::k64 = 80 apart), this warp's 16 pixels 16 q .. +15 (q =
// warp % 4) as the MMA's 16 rows, in the order row r <-> pixel 16 q + 2 r for r < 8, 16 q + 2 (r - 8)
// + 1 for r >= 8. One ldmatrix.x4.trans reads the k-tile's 32 rows (matrix j: k = 8 j .. +7) of the
// warp's 16 bytes as b16 pairs of pixels: register j of lane 4 g + t holds the bytes (k, p), (k, p +
// 1), (k + 1, p), (k + 1, p + 1) with k = 8 j + 2 t, p = 16 q + 2 g (step 6's mma_bytes_b reads them
// so). Bytes 0 and 2 are pixel p's k pair, 1 and 3 pixel p + 1's: a0 (row g, k 2t..) and a1 (row
// g + 8, the same k) of k-step s come from register 2 s, a2 and a3 (k + 8) from register 2 s + 1.
__device__ __forceinline__ void wg_bytes_t_frags(const uint8_t* bs, uint32_t (&a)[2][4]) {
  constexpr int kLd = X3Ld<uint8_t>::k64;
  static_assert(kLd % 16 == 0 && kXBK == 32, "16-byte aligned rows; one x4 covers the k-tile");
  const int lane = threadIdx.x % 32, q = (threadIdx.x / 32) % 4;
  uint32_t r[4];
  ldsm_x4<true>(r, bs + lane * kLd + 16 * q);
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    a[ks][0] = bytes_as_f16x2<0, 2>(r[2 * ks]);
    a[ks][1] = bytes_as_f16x2<1, 3>(r[2 * ks]);
    a[ks][2] = bytes_as_f16x2<0, 2>(r[2 * ks + 1]);
    a[ks][3] = bytes_as_f16x2<1, 3>(r[2 * ks + 1]);
  }
}

// The weight gradient's shared-memory operand: dZ's k-tile (dZ [k][m], the problem's A viewed
// A(m, k) = dZ[k][m]) into the canonical MN-major layout: thread i copies row k = i / 8, values of m
// 8 (i % 8) .. +7 of the tile (16 bytes, one core-matrix row), zero-filled past M (the copy's
// source size) and past the slice (nothing read). Needs 16-byte aligned rows (wgmma_ok).
template <class V>
struct WgMNRows {
  const __half* base = nullptr;  // the matrix (the source of a copy of nothing)
  const __half* cur = nullptr;   // this thread's row of the next k-tile to issue
  size_t step = 0;               // elements a k-tile moves the source
  int k = 0;                     // that row's k
  int soff = 0;                  // byte offset in a stage
  int nbytes = 0;                // the bytes a row inside the slice copies (16, fewer at M's edge, 0 past it)
  __device__ __forceinline__ void init(const V& v, int m0, int kbeg, int M) {
    static_assert(kXThreads == kXBK * (kXBM / 8), "one 16-byte chunk a thread a k-tile");
    const int kk = threadIdx.x / 8, mc = threadIdx.x % 8;
    base = v.p;
    k = kbeg + kk;
    nbytes = 2 * max(0, min(8, M - (m0 + 8 * mc)));
    cur = v.p + static_cast<size_t>(k) * v.ld + m0 + 8 * mc;
    step = static_cast<size_t>(kXBK) * v.ld;
    soff = wg_b_offset(8 * mc, kk, false);
  }
  // The next k-tile of the slice [kbeg, kend) (the k-tiles are issued once each, in order) into the
  // stage at dst (its shared address); kWhole: the k-tile lies wholly inside the slice.
  template <bool kWhole>
  __device__ __forceinline__ void issue(unsigned dst, int kend) {
    // (Opaque to the compiler, which otherwise works the offset and the byte count out again from
    // the thread index every k-tile.)
    asm volatile("" : "+r"(soff), "+r"(nbytes));
    const int n = kWhole || k < kend ? nbytes : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + soff), "l"(n > 0 ? cur : base), "r"(n));
    cur += step;
    k += kXBK;
  }
};

// ------------------------------------------------------------------ the tile
// One (64 x 64 tile, split), warpgroup h (threads 128 h .. +127) computing its 64 x 32 half: the
// forward's columns 32 h .. +31 (the MMA's rows the tile's rows); the swapped weight gradient's rows
// 32 h .. +31 (the MMA's columns; its rows the tile's 64 columns, pixels).
template <class P>
__device__ __forceinline__ void wg_tile(const P& p) {
  extern __shared__ __align__(128) unsigned char gemm_dyn[];
  using AV = typename P::AView;
  using BV = typename P::BView;
  using Lay = WgLayout<P>;
  static_assert(WgmmaFits<AV, BV>::value, "step 9 takes these operands only");
  constexpr bool kSwapped = Lay::kSwapped;
  constexpr bool kBytesIn = ByteRows<AV>::value || ByteRows<BV>::value;
  constexpr int kSt = kWgStages, kT = kWgTiles;
  const int xt = x3_tiles(p);
  const int split = blockIdx.x / xt, tile = blockIdx.x % xt;
  const int bn = tile % p.tiles_n(), bm = tile / p.tiles_n();
  const int m0 = bm * kXBM, n0 = bn * kXBN;
  const int kbeg = split * p.kchunk, kend = min(p.K, kbeg + p.kchunk);
  const int nst = kend > kbeg ? (kend - kbeg + kXBK - 1) / kXBK : 0;
  const int nfull = (kend - kbeg) / kXBK;  // k-tiles wholly inside the slice
  const int nss = (nst + kT - 1) / kT;      // stages
  // Slot j of stage st holds k-tile kT st + j (mod the pipeline): its A tile, then its B tile.
  auto a_stage = [&](int slot) { return gemm_dyn + slot * Lay::kSlot; };
  auto b_stage = [&](int slot) { return gemm_dyn + slot * Lay::kSlot + Lay::kA; };
  auto smem = [](const void* x) { return static_cast<unsigned>(__cvta_generic_to_shared(x)); };

  // The staging: the forward's A as step 5 stages it and its B (W) canonical K-major; the weight
  // gradient's A (dZ) canonical MN-major and its B (the bytes) as step 5 stages them, the rows' ids a
  // stage ahead (X3Rows).
  constexpr int kALd32 = wg_a_ld32<AV>();
  X3Stream<kXBM, kXBK, true, kALd32, AV> sa{};  // the forward's A
  WgMNRows<AV> wa{};                            // the weight gradient's A
  X3Rows<BV> rb[kT];                            // (the weight gradient's B: a stage's k-tiles)
  X3Stream<kXBK, kXBN, false, 0, BV> sb{};      // the weight gradient's B
  WgBRows<BV> wb{};                             // the forward's B
  int nfa = 0, nfb = 0;
  auto issue_a = [&](int s, int st) {
    if constexpr (kSwapped) {
      if (s < nfull) wa.template issue<true>(smem(a_stage(st)), kend);
      else wa.template issue<false>(smem(a_stage(st)), kend);
    } else {
      if (s < nfa) sa.issue(p.a, s, a_stage(st), nullptr);
      else x3_issue<kXBM, kXBK, kALd32>(p.a, m0, kbeg + s * kXBK, p.M, kend, a_stage(st), nullptr);
    }
  };
  // (j: the k-tile's place in its stage, s % kT, which names its row ids.)
  auto issue_b = [&](int s, int st, auto j) {
    if constexpr (kSwapped) {
      if (s < nfb) sb.issue(p.b, s, b_stage(st), rb[j].ids());
      else x3_issue<kXBK, kXBN>(p.b, kbeg + s * kXBK, n0, kend, p.N, b_stage(st), rb[j].ids());
    } else {
      if (s < nfull) wb.template issue<true>(s, smem(b_stage(st)), kend);
      else wb.template issue<false>(s, smem(b_stage(st)), kend);
    }
  };
  auto fetch_b = [&](int s, auto j) {  // the weight gradient's rows' ids, a stage ahead
    if constexpr (kSwapped) rb[j].template fetch<kXBK, kXBN>(p.b, kbeg + s * kXBK, n0, kend, p.N);
  };
  // Stage S (S < nss) into slots kT st ...: B's k-tiles (with their ids first when fetch), A's. A
  // k-tile past the slice (the last stage's second when nst is odd) is copied as zeros (the copies
  // past kend fill their bytes with zeros and read nothing), so every stage runs its four k-steps.
  auto issue_stage_b = [&](int S, int st, bool fetch) {
    static_assert(kT == 2, "a stage's two k-tiles, each named at compile time");
    if (S >= nss) return;
    if (fetch) fetch_b(kT * S, std::integral_constant<int, 0>{}), fetch_b(kT * S + 1, std::integral_constant<int, 1>{});
    issue_b(kT * S, kT * st, std::integral_constant<int, 0>{});
    issue_b(kT * S + 1, kT * st + 1, std::integral_constant<int, 1>{});
  };
  auto fetch_stage = [&](int S) {  // stage S's row ids
    if (S >= nss) return;
    fetch_b(kT * S, std::integral_constant<int, 0>{}), fetch_b(kT * S + 1, std::integral_constant<int, 1>{});
  };
  auto issue_stage_a = [&](int S, int st) {
    if (S >= nss) return;
#pragma unroll
    for (int j = 0; j < kT; ++j) issue_a(kT * S + j, kT * st + j);
  };
  auto init_b = [&]() {
    if constexpr (kSwapped) {
      sb.init(p.b, kbeg, n0, kend, p.N);
      nfb = sb.fast ? nfull : 0;
    } else {
      wb.init(p.b, n0, kbeg, p.N);
    }
  };
  // As step 5: B's first stages before the PDL wait unless p.b_fresh, A's after it.
  const bool early_b = !p.b_fresh;
  if (early_b) {
    init_b();
#pragma unroll
    for (int S = 0; S < kSt - 1; ++S) issue_stage_b(S, S, true);
  }
  using Epi = typename std::decay<decltype(p.epi)>::type;
  if constexpr (EarlyDraw<Epi>::value) p.epi.prefetch_pair(m0, n0, p.M, p.N);
  pdl_wait();
  pdl_launch_dependents();
  if constexpr (kSwapped) {
    wa.init(p.a, m0, kbeg, p.M);
  } else {
    sa.init(p.a, m0, kbeg, p.M, kend);
    nfa = sa.fast ? nfull : 0;
  }
  if (!early_b) init_b();
#pragma unroll
  for (int S = 0; S < kSt - 1; ++S) {
    if (!early_b) issue_stage_b(S, S, true);
    issue_stage_a(S, S);
    x3_commit();
  }
  // The row ids of the first stage the loop issues, fetched now (each iteration issues its stage's
  // copies and fetches the next stage's ids, which land under the MMAs).
  fetch_stage(kSt - 1);
  if constexpr (!EarlyDraw<Epi>::value) p.epi.prefetch(m0, n0, p.M, p.N);

  const int h = threadIdx.x / 128;  // the warpgroup
  float d[16];                      // the running sums (the second level)
#pragma unroll
  for (int e = 0; e < 16; ++e) d[e] = 0.f;
  // The shared-memory operand's descriptor for slot 0 and warpgroup h (its 32 values of n, 4 core
  // matrices along n); a slot and a k-step are one add each (a descriptor's address field is the
  // byte address >> 4, and no offset carries out of it: dynamic shared memory < 256 KB).
  const uint64_t desc0 = wg_desc(kSwapped ? a_stage(0) : b_stage(0)) + static_cast<uint64_t>((h * 4 * kWgSbo) >> 4);
  static_assert(Lay::kSlot % 16 == 0 && kWgLbo % 16 == 0, "descriptor offsets in 16-byte units");
  auto frags = [&](int slot, uint32_t (&a)[2][4]) {  // the register operand of a k-tile's two k-steps
    if constexpr (kSwapped) wg_bytes_t_frags(b_stage(slot), a);
    else wg_a_frags<AV>(a_stage(slot), a);
  };
  auto desc = [&](int slot, int ks) {
    return desc0 + static_cast<uint64_t>((slot * Lay::kSlot + ks * 2 * kWgLbo) >> 4);
  };
  int rs = 0, ws = kSt - 1;
  for (int t = 0; t < nss; ++t) {
    x3_wait<kSt - 2>();  // stage t has landed (this thread's copies) ...
    wg_fence_proxy();    // ... for the tensor cores' reads too ...
    __syncthreads();     // ... and everyone's; every warpgroup is done with stage t - 1
    const int nx = t + kSt - 1;
    issue_stage_b(nx, ws, false), issue_stage_a(nx, ws);
    x3_commit();
    // The register operand (the forward's A, or the weight gradient's bytes X^T) of the stage's
    // two k-tiles.
    uint32_t a[kT][2][4];
    frags(kT * rs, a[0]);
    frags(kT * rs + 1, a[1]);
    float part[16];  // this stage's sums (the first level: 4 k-steps, 64 values of k)
    wg_pin(a[0]), wg_pin(a[1]);
    wg_fence();
    wgmma_m64n32k16<false, kSwapped>(part, a[0][0], desc(kT * rs, 0));
    wgmma_m64n32k16<true, kSwapped>(part, a[0][1], desc(kT * rs, 1));
    wgmma_m64n32k16<true, kSwapped>(part, a[1][0], desc(kT * rs + 1, 0));
    wgmma_m64n32k16<true, kSwapped>(part, a[1][1], desc(kT * rs + 1, 1));
    wg_commit();
    fetch_stage(nx + 1);  // the next stage's row ids (global loads) under the tensor cores' work
    wg_wait_all();
    wg_hold(part), wg_hold(a[0]), wg_hold(a[1]);
#pragma unroll
    for (int e = 0; e < 16; ++e) d[e] += part[e];
    rs = rs == kSt - 1 ? 0 : rs + 1;
    ws = ws == kSt - 1 ? 0 : ws + 1;
  }
  x3_wait<0>();
  __syncthreads();
  // The byte operand's sums / 255 (as step 5's TcAccum::finish), then the two 32 x 64 sub-tiles
  // (sub-tile m / 32, row m % 32, column n). Warp q of warpgroup h holds, for lane 4 g + t, d[4 j + e]
  // at MMA row 16 q + g + 8 (e / 2) and MMA column 32 h + 8 j + 2 t + e % 2. The forward: the tile's
  // (m, n) = (that row, that column). The weight gradient: m = the MMA column, n = the pixel of the
  // MMA row, 16 q + 2 g + e / 2 (wg_bytes_t_frags' order), so e = 0, 2 are one row's two adjacent
  // columns and e = 1, 3 the next row's.
  float* cs = reinterpret_cast<float*>(gemm_dyn);
  const int lane = threadIdx.x % 32, q = (threadIdx.x / 32) % 4, g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = kBytesIn ? over_255(d[4 * j + e]) : d[4 * j + e];
    if constexpr (kSwapped) {
      float* sub = cs + h * (kBM * kLdc);  // rows 32 h .. +31
      const int r = 8 * j + 2 * tq, col = 16 * q + 2 * g;
      *reinterpret_cast<float2*>(&sub[r * kLdc + col]) = make_float2(v[0], v[2]);
      *reinterpret_cast<float2*>(&sub[(r + 1) * kLdc + col]) = make_float2(v[1], v[3]);
    } else {
      float* sub = cs + (q / 2) * (kBM * kLdc);
      const int r = (16 * q) % kBM + g, col = 32 * h + 8 * j + 2 * tq;
      *reinterpret_cast<float2*>(&sub[r * kLdc + col]) = make_float2(v[0], v[1]);
      *reinterpret_cast<float2*>(&sub[(r + 8) * kLdc + col]) = make_float2(v[2], v[3]);
    }
  }
  __syncthreads();
  tc64_epilogues<P>(p, cs, m0, bn, split);
}

template <class Tag, class P>
__global__ void __launch_bounds__(kXThreads, kXBlocksPerSm) gemm_f16wgmma_kernel(P p) {
#if NB_WGMMA_DEVICE
  wg_tile<P>(p);
#else
  (void)p;
  __trap();  // never planned: wgmma_ok refuses a device without sm_90a code
#endif
}

// Whether this build carries step 9 for a device (host side: the Makefile defines NB_HAVE_WGMMA
// with sm_90a device code; cc, the compute capability as major * 10 + minor, must be 90), and
// whether a problem's operands allow it: their types (WgmmaFits) and the rows of the fp16 operand
// it copies into the canonical layout 16-byte aligned (the view's vec_ok: ld % 8 == 0, an aligned
// base): W in the forward, dZ in the weight gradient.
inline bool wgmma_built(int cc) {
#ifdef NB_HAVE_WGMMA
  return cc == 90;
#else
  (void)cc;
  return false;
#endif
}
template <class P>
inline bool wgmma_ok(const P& p, int cc) {
  using AV = typename P::AView;
  using BV = typename P::BView;
  if constexpr (!WgmmaFits<AV, BV>::value) {
    (void)p, (void)cc;
    return false;
  } else {
    if (!wgmma_built(cc)) return false;
    if constexpr (WgmmaSwapped<AV, BV>::value) return p.a.vec_ok;  // dZ's rows by 16-byte copies
    else return p.b.vec_ok;                                         // W's rows by 16-byte copies
  }
}

// Step 9 on step 5's split plan (the same tile and blocks an SM).
template <class P>
inline void plan_f16wgmma(P& p, int sm_count) {
  static_assert(std::is_same<typename P::Elem, __half>::value, "step 9 multiplies fp16 operands");
  p.rung = GemmRung::F16Wgmma;
  plan_tc64_splits(p, sm_count);
}

template <class Tag, class P>
inline void launch_f16wgmma(const P& p, cudaStream_t st, bool pdl) {
  if constexpr (WgmmaFits<typename P::AView, typename P::BView>::value) {
    launch_tc64<gemm_f16wgmma_kernel<Tag, P>, WgLayout<P>::kBytes>(p, st, pdl);
  } else {
    (void)p, (void)st, (void)pdl;
    throw Error(kExitInternal, "GEMM step 9 planned for operands it does not take (internal error)");
  }
}

}  // namespace mlp
}  // namespace nb
