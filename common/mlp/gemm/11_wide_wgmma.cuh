// common/mlp/gemm/11_wide_wgmma.cuh — the GEMM ladder, step 11: the gathered forward's fp16 product
// in 128 x 64 tiles on wgmma, the tile's slice of the weights resident in shared memory.
//
// Adds: a block tile twice step 9's height, split between its two warpgroups by rows. Each
// warpgroup computes a 64 x 64 half with one wgmma.m64n64k16 a k-step: its own 64 rows of the
// gathered images in registers (read as step 9 reads them: two 16-bit loads a row and k-step, made
// f16x2 integers by byte permutes), W's 64 columns from shared memory, shared by both warpgroups.
// W's slice (64 columns x the block's K range, in wgmma's canonical K-major layout) is copied once,
// before the loop, so the loop stages only the images' bytes and no k-step waits for a proxy fence;
// the tensor cores of stage t run while the warps wait for, copy and convert stage t + 1 (two sets
// of A registers).
// The one design decision: split the tile between the warpgroups by rows, not columns. In step 9
// each warpgroup multiplies all 64 rows by half the columns, so both read and convert the same
// bytes; here each converts only its own rows, and each wgmma is twice as wide (N = 64).
// Prediction, before measuring (H200, W1's first layer at batch 8,192: 8,192 x 128 x 784, 128
// blocks, one an SM): per 64 values of k a warp issues ~106 instructions (56 loads and conversions
// of its A fragments, 4 wgmma, 32 fp32 additions of the second level, 2 copies, the wait and
// barrier), ~850 an SM, against step 6's ~4,200 for the same work; the tensor cores ~260 cycles
// and the bytes (8 KB an SM from L2) ~300: a stage ~300 cycles, the loop ~2 us, W's 100 KB an SM
// ~2 us before it, the epilogue ~1.5: ~6 us against step 6's 21.2 inside W1's fp16 step (PDL off),
// which would take that step from ~86 to ~72 us.
// Measured: not yet (the rung is planned only by --fp16-gemm wide).
#pragma once
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "mlp/gemm/9_f16_wgmma.cuh"

namespace nb {
namespace mlp {

constexpr int kWdBM = 128, kWdBN = kBN, kWdBK = 64;  // block tile; k values a stage
constexpr int kWdThreads = 256;                       // two warpgroups: rows 64 h .. +63
constexpr int kWdStages = 5;                          // A's stage buffers, kWdStages - 1 in flight
constexpr int kWdALd = 80;                            // bytes a staged A row: 64, +16 (conflict-free reads)
constexpr int kWdA = kWdBM * kWdALd;                  // one stage of A, 10,240 bytes
constexpr int kWdMaxK = 1024;                         // the most values of k a block's W slice holds
constexpr int kWdSubs = kWdBM / kBM;                  // the epilogues' 32 x 64 sub-tiles
constexpr int kWdKeep = kWdSubs * kWdThreads * 4;     // dropout words drawn ahead (EarlyDraw epilogues)
constexpr int kWdResult = kWdSubs * kBM * kLdc * static_cast<int>(sizeof(float));
static_assert(kWdBN == 64 && kWgLbo == (kWdBN / 8) * kWgSbo, "W's canonical layout: 8 core matrices along n");
static_assert(kWdA % 128 == 0 && kWdKeep % 128 == 0, "stages 128-byte aligned");
static_assert(kWdBK / 8 * kWgLbo + kWdStages * kWdA >= kWdResult, "the result tile overlays W and A");

// What the rung takes: A the gathered bytes [m][k], B fp16 [n][k] (a layer's weights).
template <class AV, class BV>
struct WideFits
    : std::integral_constant<bool, ByteRows<AV>::value && AV::kContig && f16_staged<BV>() && !BV::kContig> {};

// A block's W slice: kchunk values of k (a multiple of kWdBK), 1,024 bytes a group of 8.
__host__ __device__ constexpr int wd_w_bytes(int kchunk) { return kchunk / 8 * kWgLbo; }
template <class P>
inline int wd_smem_bytes(const P& p) {
  return kWdKeep + wd_w_bytes(p.kchunk) + kWdStages * kWdA;
}
template <class P>
__host__ __device__ inline int wd_tiles(const P& p) {
  return ((p.M + kWdBM - 1) / kWdBM) * p.tiles_n();
}

// d (=, or += when kAccumulate) A · B on a 64 x 64 x 16 step: A (this warp's 16 rows) in the four
// f16x2 registers of an m16n8k16 A fragment, B K-major at desc. d[4 j + e] is C's (16 w + g +
// 8 (e / 2), 8 j + 2 t + e % 2) for warp w of the warpgroup, lane 4 g + t.
template <bool kAccumulate>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
#if NB_WGMMA_DEVICE
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
      "%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, %37;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(0), "n"(kAccumulate ? 1 : 0));
#else
  (void)a, (void)desc;
#pragma unroll
  for (int e = 0; e < 32; ++e) d[e] = kAccumulate ? d[e] : 0.f;
#endif
}
template <int N>
__device__ __forceinline__ void wd_hold(float (&d)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) asm volatile("" : "+f"(d[e])::"memory");
}
__device__ __forceinline__ void wd_hold(uint32_t (&a)[4][4]) {
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[s][e])::"memory");
}

// One (128 x 64 tile, split): warpgroup h (threads 128 h .. +127) computes rows 64 h .. +63.
template <class P>
__device__ __forceinline__ void wd_tile(const P& p) {
  extern __shared__ __align__(128) unsigned char gemm_dyn[];
  using AV = typename P::AView;
  using BV = typename P::BView;
  using Epi = typename std::decay<decltype(p.epi)>::type;
  static_assert(WideFits<AV, BV>::value, "step 11 takes the gathered bytes times fp16 weights only");
  const int tn = p.tiles_n(), nt = wd_tiles(p);
  const int split = blockIdx.x / nt, tile = blockIdx.x % nt;
  const int bn = tile % tn, bm = tile / tn;
  const int m0 = bm * kWdBM, n0 = bn * kWdBN;
  const int kbeg = split * p.kchunk, kend = min(p.K, kbeg + p.kchunk);
  const int nst = (kend - kbeg + kWdBK - 1) / kWdBK;  // stages (the plan leaves no slice empty)
  uint32_t* keep = reinterpret_cast<uint32_t*>(gemm_dyn);
  unsigned char* wsm = gemm_dyn + kWdKeep;
  unsigned char* as0 = wsm + wd_w_bytes(nst * kWdBK);
  auto smem = [](const void* x) { return static_cast<unsigned>(__cvta_generic_to_shared(x)); };

  // A's copies: thread i moves 16 bytes (piece i % 4 of a stage's 64 values of k) of rows i / 4 and
  // 64 + i / 4; the rows' images looked up once. Past M or K: zeros (a copy of nothing).
  const int piece = threadIdx.x % 4;
  const uint8_t* arow[2];
  bool ain[2];
  unsigned adst[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = threadIdx.x / 4 + 64 * i;
    ain[i] = m0 + r < p.M;
    arow[i] = ain[i] ? p.a.id_bytes(p.a.row_id(m0 + r)) + kbeg + 16 * piece : p.a.data;
    adst[i] = smem(as0) + r * kWdALd + 16 * piece;
  }
  // The block's stages in a rotated order (its k range from stage rot on, then the rest), so that
  // the blocks running together read different slices of W.
  const int rot = nst > 1 ? bm % nst : 0;
  auto phys = [&](int s) { return s + rot < nst ? s + rot : s + rot - nst; };
  auto issue_a = [&](int s) {  // the block's s-th stage into its buffer
    const int ps = phys(s);
    const int k = kbeg + ps * kWdBK + 16 * piece;
    const int nb = max(0, min(16, kend - k));
    const unsigned buf = (s % kWdStages) * kWdA;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int n = ain[i] ? nb : 0;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(adst[i] + buf),
                   "l"(n > 0 ? arow[i] + ps * kWdBK : p.a.data), "r"(n));
    }
  };
  // W's slice, a stage at a time, into the canonical K-major layout (9_f16_wgmma.cuh's
  // wg_b_offset; each stage its own 8 KB, resident to the end): thread i copies column n = i / 4's
  // groups of 8 values of k c = i % 4 and c + 4 (16 bytes each), zeros past N and past the slice.
  // Needs W's rows 16-byte aligned (wide_ok).
  const int wn = threadIdx.x / 4;
  const bool win = n0 + wn < p.N;
  const __half* wsrc = win ? p.b.p + static_cast<size_t>(n0 + wn) * p.b.ld + kbeg : p.b.p;
  const unsigned wdst = smem(wsm) + (wn / 8) * kWgSbo + (wn % 8) * 16;
  auto issue_w = [&](int s) {  // the block's s-th stage
    const int ps = phys(s);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = ps * (kWdBK / 8) + threadIdx.x % 4 + 4 * j;
      const int nb = win ? 2 * max(0, min(8, kend - (kbeg + 8 * c))) : 0;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(wdst + c * kWgLbo),
                   "l"(nb > 0 ? wsrc + 8 * c : p.b.p), "r"(nb));
    }
  };

  // Before the PDL wait: the dropout bits of the four sub-tiles (EarlyDraw epilogues), A's first
  // stages (the images and the epoch's order: no step kernel writes them) and, unless p.b_fresh,
  // W's slice. After it: W's slice when fresh. Then everything lands before the loop.
  if constexpr (EarlyDraw<Epi>::value) {
#pragma unroll 1
    for (int s = 0; s < kWdSubs; ++s) p.epi.draw_into(m0 + s * kBM, n0, p.M, p.N, keep + s * kWdThreads);
  }
  // One commit group a stage (stage s is group s): the first holds A's early stages too.
  for (int s = 0; s < kWdStages && s < nst; ++s) issue_a(s);
  if (!p.b_fresh) issue_w(0);
  pdl_wait();
  pdl_launch_dependents();
  if (p.b_fresh) issue_w(0);
  x3_commit();
  for (int s = 1; s < kWdStages; ++s) {
    if (s < nst) issue_w(s);
    x3_commit();
  }
  if constexpr (!EarlyDraw<Epi>::value) p.epi.prefetch(m0, n0, p.M, p.N);
  x3_wait<kWdStages - 1>();
  wg_fence_proxy();  // stage 0's W, read by the tensor cores
  __syncthreads();

  const int lane = threadIdx.x % 32, q = (threadIdx.x / 32) % 4, h = threadIdx.x / 128;
  const int g = lane / 4, tq = lane % 4;
  const uint8_t* afrag = as0 + (64 * h + 16 * q + g) * kWdALd + 2 * tq;  // this lane's first row and k pair
  const uint64_t desc0 = wg_desc(wsm);
  // Stage t's A fragments (4 k-steps): rows g, g + 8 of the warp's 16, k pairs 2t and 2t + 8.
  auto frags = [&](int t, uint32_t (&a)[4][4]) {
    const uint8_t* base = afrag + (t % kWdStages) * kWdA;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint8_t* row = base + 8 * r * kWdALd + 16 * ks;
        const uint32_t lo = *reinterpret_cast<const uint16_t*>(row);
        const uint32_t hi = *reinterpret_cast<const uint16_t*>(row + 8);
        const uint32_t w = __byte_perm(lo, hi, 0x5410);
        a[ks][r] = bytes_as_f16x2<0, 1>(w);
        a[ks][2 + r] = bytes_as_f16x2<2, 3>(w);
      }
  };
  float d[32];  // the running sums (the second level, fp32 round to nearest)
#pragma unroll
  for (int e = 0; e < 32; ++e) d[e] = 0.f;
  float part[32];  // a stage's sums on the tensor cores (the first level: 64 values of k)
  uint32_t a[2][4][4];
  frags(0, a[0]);
  // Stage t from a[b]: four wgmma; under them the barrier that lands stage t + 1, the copies of
  // stage t + kWdStages into stage t's buffer (its bytes are in registers) and stage t + 1's
  // fragments into a[b ^ 1]; then the sums, added once the group is done (no instruction reads
  // the accumulators while the tensor cores write them).
  auto stage = [&](int t, auto bc) {
    constexpr int b = decltype(bc)::value;
    wd_hold(a[b]);
    wg_fence();
    const uint64_t dt = desc0 + static_cast<uint64_t>((phys(t) * (kWdBK / 8) * kWgLbo) >> 4);
    wgmma_m64n64k16<false>(part, a[b][0], dt);
    wgmma_m64n64k16<true>(part, a[b][1], dt + ((2 * kWgLbo) >> 4));
    wgmma_m64n64k16<true>(part, a[b][2], dt + ((4 * kWgLbo) >> 4));
    wgmma_m64n64k16<true>(part, a[b][3], dt + ((6 * kWgLbo) >> 4));
    wg_commit();
    if (t + 1 < nst) {
      x3_wait<kWdStages - 2>();  // stage t + 1's copies (this thread's) ...
      wg_fence_proxy();          // ... its W for the tensor cores ...
      __syncthreads();           // ... and everyone's; every warp has read stage t's bytes
      if (t + kWdStages < nst) issue_a(t + kWdStages), issue_w(t + kWdStages);
      x3_commit();
      frags(t + 1, a[b ^ 1]);
    }
    wg_wait_all();
    wd_hold(part), wd_hold(a[b]);
#pragma unroll
    for (int e = 0; e < 32; ++e) d[e] += part[e];
  };
  for (int t = 0; t < nst; t += 2) {
    stage(t, std::integral_constant<int, 0>{});
    if (t + 1 < nst) stage(t + 1, std::integral_constant<int, 1>{});
  }
  x3_wait<0>();
  __syncthreads();  // every warpgroup done with W and A: the result overlays them

  // The sums / 255 (the bytes were multiplied as integers), into the four 32 x 64 sub-tiles: warp
  // q of warpgroup h holds rows 64 h + 16 q + g (+8), sub-tile 2 h + q / 2.
  float* cs = reinterpret_cast<float*>(wsm);
  {
    float* sub = cs + (2 * h + q / 2) * (kBM * kLdc);
    const int r = (16 * q) % kBM + g;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = 8 * j + 2 * tq;
      *reinterpret_cast<float2*>(&sub[r * kLdc + col]) = make_float2(over_255(d[4 * j]), over_255(d[4 * j + 1]));
      *reinterpret_cast<float2*>(&sub[(r + 8) * kLdc + col]) =
          make_float2(over_255(d[4 * j + 2]), over_255(d[4 * j + 3]));
    }
  }
  __syncthreads();
  const int subs = min(kWdSubs, (p.M - m0 + kBM - 1) / kBM);
  if (p.splits > 1 && !splitk_fixup_rows<kWdThreads, VecFixup<Epi>::value, kWdSubs>(
                          cs, p.ws, p.counters, (m0 / kBM) * tn + bn, tn, subs, split, p.splits))
    return;
#pragma unroll 1
  for (int s = 0; s < subs; ++s) {
    const int ms = m0 + s * kBM;
    if constexpr (EarlyDraw<Epi>::value) {
      if (s > 0) __syncthreads();  // (each thread moves and reads its own word; the barrier orders the scratch)
      p.epi.take_keep(keep + s * kWdThreads);
    } else if (s > 0) {
      __syncthreads();  // the previous sub-tile's epilogue is done with the per-block scratch
      p.epi.prefetch(ms, n0, p.M, p.N);
      __syncthreads();
    }
    p.epi(cs + s * (kBM * kLdc), ms, n0, p.M, p.N);
  }
}

template <class Tag, class P>
__global__ void __launch_bounds__(kWdThreads, 1) gemm_wide_kernel(P p) {
#if NB_WGMMA_DEVICE
  if constexpr (WideFits<typename P::AView, typename P::BView>::value) wd_tile<P>(p);
#else
  (void)p;
  __trap();  // never planned: wide_ok refuses a device without sm_90a code
#endif
}

// Whether the rung takes a problem: the operand types, a build and device with wgmma (step 9's
// wgmma_built), K within kWdMaxK, the images' rows and W's rows 16-byte aligned.
template <class P>
inline bool wide_ok(const P& p, int cc) {
  using AV = typename P::AView;
  using BV = typename P::BView;
  if constexpr (!WideFits<AV, BV>::value) {
    (void)p, (void)cc;
    return false;
  } else {
    return wgmma_built(cc) && p.K <= kWdMaxK && p.b.vec_ok && p.a.ld % 16 == 0 &&
           reinterpret_cast<uintptr_t>(p.a.data) % 16 == 0;
  }
}

// One block an SM: a product with fewer tiles than SMs is cut into slices of at least three stages
// (at most kFixupGroup), as many as fill the SMs once.
template <class P>
inline void plan_wide(P& p, int sm_count) {
  static_assert(std::is_same<typename P::Elem, __half>::value, "step 11 multiplies fp16 operands");
  p.rung = GemmRung::F16Wide;
  const int tiles = wd_tiles(p), st = (p.K + kWdBK - 1) / kWdBK;
  int s = 1;
  if (tiles < sm_count) s = std::max(1, std::min({kFixupGroup, sm_count / tiles, st / 3}));
  const int per = (st + s - 1) / s;
  p.splits = (st + per - 1) / per;
  p.kchunk = per * kWdBK;
}

template <class Tag, class P>
inline void launch_wide(const P& p, cudaStream_t st, bool pdl) {
  if constexpr (WideFits<typename P::AView, typename P::BView>::value) {
    constexpr int kMax = kWdKeep + kWdMaxK / 8 * kWgLbo + kWdStages * kWdA;
    static bool attr_set = false;
    if (!attr_set) {
      CUDA_CHECK(cudaFuncSetAttribute(gemm_wide_kernel<Tag, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, kMax));
      attr_set = true;
    }
    launch_kernel(gemm_wide_kernel<Tag, P>, wd_tiles(p) * p.splits, kWdThreads, wd_smem_bytes(p), st, pdl, p);
  } else {
    (void)p, (void)st, (void)pdl;
    throw Error(kExitInternal, "GEMM step 11 planned for operands it does not take (internal error)");
  }
}

}  // namespace mlp
}  // namespace nb
