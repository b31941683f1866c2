// common/mlp/gemm/9_f16_wgmma.cuh — the GEMM ladder, step 9: the first layer's fp16 products on
// wgmma, Hopper's warpgroup MMA.
//
// Adds: step 6's 64 x 64 tile, pipeline, split-K hand-over and epilogues, with each warpgroup (4
// warps) computing a 64 x 32 half of the tile by one wgmma.m64n32k16 a k-step, where step 6's 8 warps
// issue 32 mma.sync m16n8k16 for the same 64 x 64 x 16 and read both operands' fragments for them.
// A stays in registers (what step 6 reads for one MMA: fp16 by ldmatrix, the gathered images' bytes
// as f16x2 integers); B is read by the tensor cores from shared memory, staged in wgmma's canonical
// K-major layout (8 x 8 core matrices of 16-byte rows): fp16 weights W [n][k] by 16-byte cp.async
// straight into it; the gathered images (B of the first layer's weight gradient, bytes [k][n])
// staged as bytes as in step 6 and converted by the block into it once a k-tile.
// The one design decision: keep B's layout canonical without swizzle and put the conversion of the
// bytes where it costs once a k-tile (A in registers, B by the block), so every tile, split and
// epilogue of steps 5-6 is reused as it is and only the inner k-tile changes.
// Runs where it can (plan_f16wgmma's callers check wgmma_ok; the operand types: WgmmaFits): A fp16 (either
// orientation) or bytes [m][k]; B fp16 [n][k] with 16-byte aligned rows, or bytes [k][n]. Built for
// sm_90a (the Makefile's default gencode); elsewhere the kernel body is empty and the plan refuses it.
// The sums are exact to fp32 rounding as step 6's: each k-tile (two wgmma k-steps) sums on the
// tensor cores into fresh registers, added to the running sums in fp32.
// Prediction, before measuring (H200, W1 at batch 8,192; step 6 25.2 and 31.5 us, issue-bound at ~176
// instructions a warp a k-tile in the forward: phase5_batched__gemm-b8192-fp16.json, e802857). Counted
// in this build's SASS (nvdisasm, the fast path of a k-tile): the gathered forward ~116 (A's 8 16-bit
// loads, 4 permutes and 16 conversion instructions, 16 FADDs of the second level, the proxy fence's
// MEMBAR.ALL.CTA, 2 HGMMA with their arrive and wait, 3 copies): ~17 us if time follows instructions,
// against ~6 us of L2 -> SM traffic (32 MB: W re-read by each of the 128 row tiles). The weight
// gradient ~205, about what step 6 executes for it (the bytes' conversion moves from the fragments to
// one pass a k-tile, with a second barrier): ~31 us, no gain predicted. W1's fp16 step 88.35 -> ~80 us,
// ~1.64x our fp32 (131.4). A risk: if the proxy fence's MEMBAR waits for the copies still in flight,
// the four stages act as one and the forward gains nothing.
// Measured: not yet; the call that will: profiles/nvidia-h200/logs/next_839f03c/ (README).
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
// A: fp16 staged either way (read by ldmatrix, step 6) or bytes [m][k] (the gathered forward);
// B: fp16 [n][k] (a layer's weights in the forward) or bytes [k][n] (the gathered weight gradient).
// Not both operands bytes; fp32 never.
template <class AV, class BV>
struct WgmmaFits
    : std::integral_constant<bool, (f16_staged<AV>() || (ByteRows<AV>::value && AV::kContig)) &&
                                       ((f16_staged<BV>() && !BV::kContig) || (ByteRows<BV>::value && BV::kContig)) &&
                                       !(ByteRows<AV>::value && ByteRows<BV>::value)> {};

// B's canonical K-major layout, no swizzle: k-tile element (n, k) of the 64 x 32 tile at byte
// (k / 8) * 1024 + (n / 8) * 128 + (n % 8) * 16 + (k % 8) * 2: core matrix (n / 8, k / 8) is 128
// contiguous bytes, one 16-byte row of 8 values of k for each of its 8 n. Along k the core matrices
// lie kWgLbo apart (the descriptor's leading-dimension byte offset), along n kWgSbo (its stride
// byte offset): PTX ISA, "Shared Memory Matrix Layout", K-major, ((8,m),(T,2k)):((1T,SBO),(1,LBO)).
constexpr int kWgLbo = 1024, kWgSbo = 128;
constexpr int kWgBTile = kXBN * kXBK * 2;  // 4,096 bytes of fp16
static_assert(kWgLbo == (kXBN / 8) * kWgSbo && kWgBTile == (kXBK / 8) * kWgLbo, "the core matrices tile the k-tile");
__host__ __device__ constexpr int wg_b_offset(int n, int k) {
  return (k / 8) * kWgLbo + (n / 8) * kWgSbo + (n % 8) * 16 + (k % 8) * 2;
}
constexpr int kWgStages = 4;  // k-tiles in flight
// A's staged rows: step 5's strides, but 40 bytes for a byte A [m][k] (wg_a_frags' 16-bit loads of a
// warp then hit 16 distinct banks; step 5's 36 puts two of them on one).
template <class AV>
constexpr int wg_a_ld32() {
  return ByteRows<AV>::value ? 40 : 0;  // (0: X3Tile's own)
}

// Dynamic shared memory: kWgStages stages of A's tile (step 5's staging) and B's (canonical fp16,
// or bytes as step 6 stages them), B's converted tile for a byte B, and the result's two 32 x 64
// sub-tiles over them once the loop is done.
template <class P>
struct WgLayout {
  using BV = typename P::BView;
  static constexpr bool kBBytes = ByteRows<BV>::value;
  static constexpr int kA = x3_round128(x3_tile_bytes<typename P::AView, wg_a_ld32<typename P::AView>() ? wg_a_ld32<typename P::AView>() : X3Tile<typename P::AView>::kLd32>());
  static constexpr int kB = kBBytes ? x3_round128(x3_tile_bytes<BV>()) : kWgBTile;
  static constexpr int kStage = kA + kB;
  static constexpr int kCvt = kBBytes ? kWgBTile : 0;
  static constexpr int kLoop = kWgStages * kStage + kCvt;
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
// What the threads wrote to shared memory (their copies, the converted bytes) made visible to the
// tensor cores' reads, which go through the async proxy; each thread fences its own writes before
// the barrier that publishes them.
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
// The accumulators and A's registers are read and written by the tensor cores until the wait: this
// empty asm, after the wait, keeps the compiler from reading the one or reusing the other before.
__device__ __forceinline__ void wg_hold(float (&d)[16], uint32_t (&a)[2][4]) {
#pragma unroll
  for (int e = 0; e < 16; ++e) asm volatile("" : "+f"(d[e])::"memory");
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[s][e])::"memory");
}

// d (=, or += when kAccumulate) A · B on a 64 x 32 x 16 step: A (64 x 16, this warp's 16 rows) in the
// four f16x2 registers of an m16n8k16 A fragment, B (16 x 32) from the canonical layout at desc.
// d's 16 registers a thread: d[4j + e] is C's (16 w + g + 8 (e / 2), 8 j + 2 t + e % 2) for warp w
// of the warpgroup, lane 4 g + t (PTX ISA, wgmma .m64nNk16 D fragment).
template <bool kAccumulate>
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[16], const uint32_t (&a)[4], uint64_t desc) {
#if NB_WGMMA_DEVICE
  if constexpr (kAccumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]),
          "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
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
  const __half* src = nullptr;  // the slice's first k-tile's 8 values (the matrix's base when n >= N)
  int k = 0;                    // their first k
  int soff = 0;                 // byte offset in a stage
  int full = 0;                 // the bytes a k-tile wholly inside the slice copies: 16, or 0 past N
  __device__ __forceinline__ void init(const V& v, int n0, int kbeg, int N) {
    static_assert(kXThreads == 4 * kXBN && kXBK == 32, "one 16-byte chunk a thread a k-tile");
    const int n = threadIdx.x / 4, kc = threadIdx.x % 4;
    const bool inside = n0 + n < N;
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
    const __half* g = nbytes > 0 ? src + s * kXBK : src;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst + soff), "l"(g), "r"(nbytes));
  }
};

// A byte B's staged k-tile ([k][n], rows X3Ld<uint8_t>::k64 = 80 apart) as fp16 integers in the
// canonical layout: thread i takes column n = i % 64 at k = 8 (i / 64) .. +7 (8 byte loads, 6
// permutes, 4 conversions) and writes its 16-byte core-matrix row. A warp's loads read 32
// consecutive bytes of a row; its stores fill 512 consecutive bytes.
__device__ __forceinline__ void wg_bytes_to_f16(const uint8_t* bs, unsigned char* cvt) {
  constexpr int kLd = X3Ld<uint8_t>::k64;
  static_assert(kXThreads == kXBN * (kXBK / 8), "8 values of k a thread");
  const int n = threadIdx.x % kXBN, kc = threadIdx.x / kXBN;
  const uint8_t* col = bs + 8 * kc * kLd + n;
  uint32_t b[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) b[i] = col[i * kLd];
  const uint32_t w0 = __byte_perm(__byte_perm(b[0], b[1], 0x0040), __byte_perm(b[2], b[3], 0x0040), 0x5410);
  const uint32_t w1 = __byte_perm(__byte_perm(b[4], b[5], 0x0040), __byte_perm(b[6], b[7], 0x0040), 0x5410);
  const uint4 v = make_uint4(bytes_as_f16x2<0, 1>(w0), bytes_as_f16x2<2, 3>(w0), bytes_as_f16x2<0, 1>(w1),
                             bytes_as_f16x2<2, 3>(w1));
  *reinterpret_cast<uint4*>(cvt + wg_b_offset(n, 8 * kc)) = v;
}

// ------------------------------------------------------------------ the tile
// One (64 x 64 tile, split): warpgroup h (threads 128 h .. +127) computes columns 32 h .. +31.
template <class P>
__device__ __forceinline__ void wg_tile(const P& p) {
  extern __shared__ __align__(128) unsigned char gemm_dyn[];
  using AV = typename P::AView;
  using BV = typename P::BView;
  using Lay = WgLayout<P>;
  static_assert(WgmmaFits<AV, BV>::value, "step 9 takes these operands only");
  constexpr bool kBBytes = ByteRows<BV>::value;
  constexpr bool kBytesIn = ByteRows<AV>::value || kBBytes;
  constexpr int kSt = kWgStages;
  const int xt = x3_tiles(p);
  const int split = blockIdx.x / xt, tile = blockIdx.x % xt;
  const int bn = tile % p.tiles_n(), bm = tile / p.tiles_n();
  const int m0 = bm * kXBM, n0 = bn * kXBN;
  const int kbeg = split * p.kchunk, kend = min(p.K, kbeg + p.kchunk);
  const int nst = kend > kbeg ? (kend - kbeg + kXBK - 1) / kXBK : 0;
  auto a_stage = [&](int s) { return gemm_dyn + s * Lay::kStage; };
  auto b_stage = [&](int s) { return gemm_dyn + s * Lay::kStage + Lay::kA; };
  unsigned char* const cvt = gemm_dyn + kSt * Lay::kStage;  // (a byte B's converted k-tile)

  X3Rows<AV> ra;  // a byte operand's row ids for the next stage to issue (as step 5)
  X3Rows<BV> rb;
  constexpr int kALd32 = wg_a_ld32<AV>();
  X3Stream<kXBM, kXBK, true, kALd32, AV> sa{};
  X3Stream<kXBK, kXBN, false, 0, BV> sb{};  // a byte B
  WgBRows<BV> wb{};                         // an fp16 B
  int nfa = 0, nfb = 0;
  const int nfull = (kend - kbeg) / kXBK;
  auto issue_a = [&](int s, int st) {
    const int* ids = decltype(sa)::kIdsAlongK ? ra.ids() : nullptr;
    if (s < nfa) sa.issue(p.a, s, a_stage(st), ids);
    else x3_issue<kXBM, kXBK, kALd32>(p.a, m0, kbeg + s * kXBK, p.M, kend, a_stage(st), ids);
  };
  auto issue_b = [&](int s, int st) {
    if constexpr (kBBytes) {
      const int* ids = decltype(sb)::kIdsAlongK ? rb.ids() : nullptr;
      if (s < nfb) sb.issue(p.b, s, b_stage(st), ids);
      else x3_issue<kXBK, kXBN>(p.b, kbeg + s * kXBK, n0, kend, p.N, b_stage(st), ids);
    } else {
      const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(b_stage(st)));
      if (s < nfull) wb.template issue<true>(s, dst, kend);
      else wb.template issue<false>(s, dst, kend);
    }
  };
  auto fetch_a = [&](int s) {
    if constexpr (decltype(sa)::kIdsAlongK) ra.template fetch<kXBM, kXBK>(p.a, m0, kbeg + s * kXBK, p.M, kend);
  };
  auto fetch_b = [&](int s) {
    if constexpr (kBBytes && decltype(sb)::kIdsAlongK) rb.template fetch<kXBK, kXBN>(p.b, kbeg + s * kXBK, n0, kend, p.N);
  };
  auto init_b = [&]() {
    if constexpr (kBBytes) {
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
    for (int s = 0; s < kSt - 1; ++s)
      if (s < nst) fetch_b(s), issue_b(s, s);
  }
  using Epi = typename std::decay<decltype(p.epi)>::type;
  if constexpr (EarlyDraw<Epi>::value) p.epi.prefetch_pair(m0, n0, p.M, p.N);
  pdl_wait();
  pdl_launch_dependents();
  sa.init(p.a, m0, kbeg, p.M, kend);
  nfa = sa.fast ? nfull : 0;
  if (!early_b) init_b();
#pragma unroll
  for (int s = 0; s < kSt - 1; ++s) {
    if (s < nst) {
      if (!early_b) fetch_b(s), issue_b(s, s);
      fetch_a(s), issue_a(s, s);
    }
    x3_commit();
  }
  if (kSt - 1 < nst) fetch_a(kSt - 1), fetch_b(kSt - 1);
  if constexpr (!EarlyDraw<Epi>::value) p.epi.prefetch(m0, n0, p.M, p.N);

  const int h = threadIdx.x / 128;  // the warpgroup: columns 32 h .. +31 of the tile
  float d[16];                      // the running sums (the second level)
#pragma unroll
  for (int e = 0; e < 16; ++e) d[e] = 0.f;
  // The descriptors of B's stages (one add a k-tile): a descriptor's address field is the byte
  // address >> 4, and no stage's offset carries out of it (dynamic shared memory < 256 KB).
  const uint64_t desc0 = wg_desc(kBBytes ? cvt : b_stage(0)) + static_cast<uint64_t>((h * 4 * kWgSbo) >> 4);
  static_assert(Lay::kStage % 16 == 0 && kWgLbo % 16 == 0, "descriptor offsets in 16-byte units");
  int rs = 0, ws = kSt - 1;
  for (int t = 0; t < nst; ++t) {
    x3_wait<kSt - 2>();  // stage t has landed (this thread's copies) ...
    // ... for the tensor cores' reads too (a byte B: they read the converted tile, fenced below) ...
    if constexpr (!kBBytes) wg_fence_proxy();
    __syncthreads();  // ... and everyone's; every warpgroup is done with stage t - 1
    const int nx = t + kSt - 1;
    if (nx < nst) issue_a(nx, ws), issue_b(nx, ws);
    x3_commit();
    uint32_t a[2][4];
    wg_a_frags<AV>(a_stage(rs), a);
    if constexpr (kBBytes) {  // (the previous k-tile's wgmma read cvt and waited before the barrier above)
      wg_bytes_to_f16(b_stage(rs), cvt);
      wg_fence_proxy();
      __syncthreads();
    }
    const uint64_t desc = kBBytes ? desc0 : desc0 + static_cast<uint64_t>((rs * Lay::kStage) >> 4);
    float part[16];  // this k-tile's sums (the first level)
    wg_pin(a);
    wg_fence();
    wgmma_m64n32k16<false>(part, a[0], desc);
    wgmma_m64n32k16<true>(part, a[1], desc + static_cast<uint64_t>((2 * kWgLbo) >> 4));
    wg_commit();
    // The next stage's row ids (global loads) under the tensor cores' work.
    if (nx < nst && nx + 1 < nst) fetch_a(nx + 1), fetch_b(nx + 1);
    wg_wait_all();
    wg_hold(part, a);
#pragma unroll
    for (int e = 0; e < 16; ++e) d[e] += part[e];
    rs = rs == kSt - 1 ? 0 : rs + 1;
    ws = ws == kSt - 1 ? 0 : ws + 1;
  }
  x3_wait<0>();
  __syncthreads();
  // The byte operand's sums / 255 (as step 5's TcAccum::finish), then the two 32 x 64 sub-tiles:
  // warp q of warpgroup h holds rows 16 q .. +15 (sub-tile q / 2), columns 32 h + 8 j + 2 t.
  float* cs = reinterpret_cast<float*>(gemm_dyn);
  const int lane = threadIdx.x % 32, q = (threadIdx.x / 32) % 4, g = lane / 4, tq = lane % 4;
  float* sub = cs + (q / 2) * (kBM * kLdc);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int r = (16 * q) % kBM + g, col = 32 * h + 8 * j + 2 * tq;
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = kBytesIn ? over_255(d[4 * j + e]) : d[4 * j + e];
    *reinterpret_cast<float2*>(&sub[r * kLdc + col]) = make_float2(v[0], v[1]);
    *reinterpret_cast<float2*>(&sub[(r + 8) * kLdc + col]) = make_float2(v[2], v[3]);
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
// whether a problem's operands allow it: their types (WgmmaFits) and an fp16 B's rows 16-byte
// aligned (the view's vec_ok: ld % 8 == 0, an aligned base).
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
    if constexpr (!ByteRows<BV>::value) return p.b.vec_ok;
    return true;
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
    constexpr int kSmem = WgLayout<P>::kBytes;
    static bool attr_set = false;  // per instance: above 48 KB a kernel must ask for its shared memory
    if (!attr_set) {
      CUDA_CHECK(cudaFuncSetAttribute(gemm_f16wgmma_kernel<Tag, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
      attr_set = true;
    }
    launch_kernel(gemm_f16wgmma_kernel<Tag, P>, x3_tiles(p) * p.splits, kXThreads, kSmem, st, pdl, p);
  } else {
    (void)p, (void)st, (void)pdl;
    throw Error(kExitInternal, "GEMM step 9 planned for operands it does not take (internal error)");
  }
}

}  // namespace mlp
}  // namespace nb
