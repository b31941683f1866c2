// common/mlp/gemm/8_stream_rows.cuh — the GEMM ladder, step 8: a product of a few rows is its
// weights' bytes; stream them.
//
// Adds: fp16 products C = A · W^T of at most 32 rows (a batch of 32 activations, or of phase 5's
// gathered images, A [M][K], times a layer's weights W [N][K]) on mma.sync, W read once by the
// copy engine: each stage of the block's 128 W rows (128 values of k, 256 bytes a row) is one bulk
// copy a row (cp.async.bulk, completing on the stage's mbarrier), four stages deep, so the bytes in
// flight do not depend on registers or warps. A, the same for every block, comes by cp.async. A
// block takes 128 columns of C (16 a warp) and one K slice; the slices fill one block an SM and
// hand over through step 3's fix-up, both 32 x 64 halves of the tile at once, as steps 5-7 do.
// The one design decision: an MMA sums its 16 values of k in any order, so a lane's fragments for
// two k-steps are eight consecutive values of k of its rows: one 16-byte shared load a W row and a
// row of A (8 bytes for image bytes, made f16x2 integers as in step 6), nothing permuted.
// The sums are exact to fp32 rounding, as step 6's: each k-step of 32 sums on the tensor cores into
// fresh registers, added to the running sums in fp32.
// Prediction, before measuring (H200; W2's hidden forward at h = 8,192, 32 x 8,192 x 8,192 on the
// 32 x 64 WMMA tile of steps 1-4 in 640 blocks: 51.7 us, 2.6 TB/s, its L2 71% busy with 387 MB,
// logs/fbwaves_5f18f30/ncu-d1-h8192.txt): 134 MB of weights, a quarter of that in A's re-reads
// from L2 and a few MB of partial tiles, streamed at the copy ceiling's ~4.2 TB/s
// (ceilings__bench-linreg.json): ~34 us; at h = 4,096 (33.5 MB, 23.1 us) ~10 us. W2's step then
// 575.9 -> ~540 us at 8,192, 212 -> ~190 at 4,096.
// Measured first with W loaded by the warps into registers a stage ahead (two blocks an SM, 128
// registers: no more bytes in flight fit): 50.5 us at 8,192, 20.2 at 4,096; with the words reloaded
// one by one as they were used, 63 us; with bulk prefetches into L2 ahead of those loads, no
// faster (logs/stream_rows/).
#pragma once
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <cstdint>
#include <type_traits>

#include "mlp/gemm/3_split_k.cuh"
#include "mlp/gemm/6_f16_mma.cuh"

namespace nb {
namespace mlp {

constexpr int kSrThreads = 256;                 // 8 warps
constexpr int kSrBN = 128;                      // columns of C (W rows) a block, 16 a warp
constexpr int kSrBM = 32;                       // rows of A at most
constexpr int kSrChunk = 128;                   // values of k a stage (four k-steps of 32)
constexpr int kSrStages = 4;
constexpr int kSrLd = kSrChunk + 32;            // a staged fp16 row's stride in halves (W and A)
constexpr int kSrLdB = kSrChunk + 32;           // a staged byte row's stride in bytes (A)
constexpr int kSrWBytes = kSrBN * kSrLd * 2;    // a stage of W: 40 KB
constexpr int kSrABytes = kSrBM * kSrLd * 2;    // a stage of A: 10 KB (bytes: half of it used)
constexpr int kSrStageBytes = kSrWBytes + kSrABytes;
constexpr int kSrSmem = kSrStages * kSrStageBytes + kSrStages * 8;  // + the stages' mbarriers
constexpr int kSrBlocksPerSm = 1;
constexpr int kSrMinChunks = 2;                 // a slice takes at least 256 values of k
static_assert(kSrLd * 2 % 128 == 64, "rows g and g + 1 of a quarter warp's 16-byte reads on other banks");
static_assert(kSrLdB % 128 == 32, "rows g .. g + 3 of a half warp's 8-byte reads on other banks");
static_assert(kSrLd * 2 % 16 == 0 && kSrWBytes % 128 == 0 && kSrABytes % 128 == 0, "bulk copies land 16-byte aligned");
static_assert(kSrStages * kSrStageBytes >= 2 * kBM * kLdc * static_cast<int>(sizeof(float)),
              "the result's two 32 x 64 halves overlay the stages");
static_assert(kSrBN == 2 * kBN && kSrBM == kBM, "a block's tile is two of the split-K fix-up's 32 x 64 tiles");

// The products step 8 can take: A an fp16 matrix along k (activations) or rows of bytes (phase 5's
// gathered images, ByteRows: multiplied as the integers they are, the sums divided by 255 once, as
// steps 5 and 6 do), B a weight matrix [N][K].
template <class V, class = void>
struct SrByteA : std::false_type {};
template <class V>
struct SrByteA<V, std::enable_if_t<ByteRows<V>::value>>
    : std::integral_constant<bool, V::kContig && std::is_same<typename V::Elem, __half>::value> {};
template <class P>
struct StreamRowsViews
    : std::integral_constant<bool, (std::is_same<typename P::AView, MatView<__half, true>>::value ||
                                    SrByteA<typename P::AView>::value) &&
                                       std::is_same<typename P::BView, MatView<__half, false>>::value> {};
// ... and at run time: at most 32 rows, K a multiple of 8 (16-byte W rows; 8-byte byte rows) and
// aligned rows.
template <class P>
inline bool stream_rows_ok(const P& p) {
  if constexpr (!StreamRowsViews<P>::value) {
    return false;
  } else {
    bool a_ok;
    if constexpr (SrByteA<typename P::AView>::value)
      a_ok = p.a.ld % 8 == 0 && reinterpret_cast<uintptr_t>(p.a.data) % 8 == 0;
    else
      a_ok = p.a.vec_ok;
    return p.M >= 1 && p.M <= kSrBM && p.K % 8 == 0 && a_ok && p.b.vec_ok;
  }
}

template <class P>
__host__ __device__ inline int sr_tiles(const P& p) {
  return (p.N + kSrBN - 1) / kSrBN;
}

// ------------------------------------------------------------------ the copy engine's pieces
// A stage's mbarrier: one arrival (the thread that issues the stage's copies, announcing their
// bytes), then complete when those bytes have landed; phase parity flips with every use.
__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_u32(b)),
      "r"(parity)
      : "memory");
}
// `bytes` (a multiple of 16) from global src to shared dst (both 16-byte aligned), completing on b.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(b))
               : "memory");
}
// Orders this thread's earlier shared-memory accesses (generic proxy) before later bulk copies.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Shared loads as volatile asm, like the MMAs, so that they keep their place among them.
__device__ __forceinline__ uint4 lds128(const void* p) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_u32(p)));
  return v;
}
__device__ __forceinline__ uint2 lds64(const void* p) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(smem_u32(p)));
  return v;
}

// d = a · b (fresh sums: the accumulator input is zero), and d += a · b.
__device__ __forceinline__ void mma_f16_fresh(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
  const float z = 0.f;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(z));
}
__device__ __forceinline__ void mma_f16_acc(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A k-step of 32 as two m16n8k16 steps h = 0, 1 with the lanes' slots dealt along k: lane 4g + t's
// slots 2t, 2t+1 stand for k = 8t + 4h, +1 and slots 2t+8, 2t+9 for 8t + 4h + 2, +3 (in A and in W
// alike). A lane's eight values of k, 8t ... 8t + 7, are then one 16-byte word q of its row: words
// q.x, q.y feed h = 0 (slots 2t.. and 2t+8..), q.z, q.w feed h = 1. For A (rows g and g + 8 of an
// m16 tile, words ra and rb): a0..a3 = ra.x, rb.x, ra.y, rb.y at h = 0; for W (row g of an n8
// tile, word w): b0, b1 = w.x, w.y.

// One (128-column tile, K slice): W's stages by bulk copies, A's by cp.async, the MMAs, then the
// split-K hand-over and the epilogue of each 32 x 64 half.
template <class P>
__device__ __forceinline__ void stream_rows_tile(const P& p) {
  extern __shared__ __align__(128) unsigned char sr_smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(sr_smem + kSrStages * kSrStageBytes);
  auto w_stage = [&](int st) { return sr_smem + st * kSrStageBytes; };
  auto a_stage = [&](int st) { return sr_smem + st * kSrStageBytes + kSrWBytes; };
  constexpr bool kBytes = SrByteA<typename P::AView>::value;
  const int tiles = sr_tiles(p);
  const int split = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int n0 = tile * kSrBN;
  const int kbeg = split * p.kchunk, kend = min(p.K, kbeg + p.kchunk);
  const int nch = kend > kbeg ? (kend - kbeg + kSrChunk - 1) / kSrChunk : 0;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int wrows = min(kSrBN, p.N - n0);  // W rows inside N

  // The mbarriers; W rows past N (never copied) as zeros in every stage, once.
  if (threadIdx.x < kSrStages) mbar_init(&full[threadIdx.x], 1);
  for (int e = threadIdx.x; e < (kSrBN - wrows) * kSrStages * (kSrLd / 8); e += kSrThreads) {
    const int per = (kSrBN - wrows) * (kSrLd / 8), st = e / per, r = wrows + (e % per) / (kSrLd / 8), c = e % (kSrLd / 8);
    reinterpret_cast<uint4*>(w_stage(st) + r * kSrLd * 2)[c] = make_uint4(0u, 0u, 0u, 0u);
  }
  fence_proxy_async();
  __syncthreads();

  // Stage c's W: warp 0 issues one bulk copy a row (its lanes four rows each) after lane 0 has
  // announced their bytes. The slice's last stage may be short: its bytes past kend stay as the
  // stage's last use left them, and the MMAs skip them (live, below).
  auto issue_w = [&](int c, int st) {
    if (warp != 0) return;
    const int k0 = kbeg + c * kSrChunk;
    const unsigned bytes = static_cast<unsigned>(min(kSrChunk, kend - k0)) * 2u;
    if (lane == 0) mbar_expect_tx(&full[st], bytes * static_cast<unsigned>(wrows));
    __syncwarp();
    for (int r = lane; r < wrows; r += 32)
      bulk_copy(w_stage(st) + r * kSrLd * 2, p.b.p + static_cast<size_t>(n0 + r) * p.b.ld + k0, bytes, &full[st]);
  };
  // Stage c of A into buffer st by cp.async: 32 rows x 128 values, rows past M and values past kend
  // as zeros. fp16: 512 copies of 16 bytes, two a thread. Bytes: 512 copies of 8, two a thread, each
  // thread's row (and its image, looked up once after the PDL wait) fixed.
  const int my_row = threadIdx.x / (kSrChunk / 16);
  const uint8_t* my_bytes = nullptr;
  auto issue_a = [&](int c, int st) {
    const int k0 = kbeg + c * kSrChunk;
    if constexpr (kBytes) {
      uint8_t* dst = a_stage(st);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int kk = (threadIdx.x % (kSrChunk / 16)) * 16 + 8 * i;
        uint8_t* d = dst + my_row * kSrLdB + kk;
        if (my_bytes && k0 + kk < kend) __pipeline_memcpy_async(d, my_bytes + k0 + kk, 8);
        else *reinterpret_cast<uint2*>(d) = make_uint2(0u, 0u);
      }
    } else {
      __half* dst = reinterpret_cast<__half*>(a_stage(st));
#pragma unroll
      for (int i = 0; i < kSrBM * (kSrChunk / 8) / kSrThreads; ++i) {
        const int e = threadIdx.x + i * kSrThreads, r = e / (kSrChunk / 8), kk = (e % (kSrChunk / 8)) * 8;
        __half* d = dst + r * kSrLd + kk;
        if (r < p.M && k0 + kk < kend) __pipeline_memcpy_async(d, p.a.p + static_cast<size_t>(r) * p.a.ld + k0 + kk, 16);
        else *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  // A's eight values 8t .. 8t + 7 of k-step s in row rr, as four f16x2 words (bytes: an 8-byte
  // load, each pair made an f16x2 of its integers by a byte permute and a subtraction).
  auto a_word = [&](int st, int rr, int s) -> uint4 {
    if constexpr (kBytes) {
      const uint2 b = lds64(a_stage(st) + rr * kSrLdB + 32 * s + 8 * t);
      return make_uint4(bytes_as_f16x2<0, 1>(b.x), bytes_as_f16x2<2, 3>(b.x), bytes_as_f16x2<0, 1>(b.y),
                        bytes_as_f16x2<2, 3>(b.y));
    } else {
      return lds128(reinterpret_cast<const __half*>(a_stage(st)) + rr * kSrLd + 32 * s + 8 * t);
    }
  };

  float acc[2][2][4];  // [m16 tile i][n8 tile j][fragment]: the running fp32 sums
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
  // Stage c's products. A lane's values past kend (a short last stage: kend is a multiple of 8, so
  // eight values are all inside or all outside) are taken as zeros.
  auto multiply = [&](int c, int st) {
    const int k0 = kbeg + c * kSrChunk;
    const __half* ws = reinterpret_cast<const __half*>(w_stage(st));
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      if (k0 + 32 * s >= kend) break;
      const bool live = k0 + 32 * s + 8 * t < kend;
      uint4 a[4], w[2];
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = live ? a_word(st, g + 8 * r, s) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
      for (int j = 0; j < 2; ++j)
        w[j] = live ? lds128(ws + (16 * warp + 8 * j + g) * kSrLd + 32 * s + 8 * t) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint4 ra = a[2 * i], rb = a[2 * i + 1];
          float d[4];
          mma_f16_fresh(d, ra.x, rb.x, ra.y, rb.y, w[j].x, w[j].y);
          mma_f16_acc(d, ra.z, rb.z, ra.w, rb.w, w[j].z, w[j].w);
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] += d[e];
        }
    }
  };

  // The weights' first stages go out before the PDL wait (the kernel just before does not write
  // them) unless p.b_fresh; A, the kernel before's output, after it.
  if (!p.b_fresh)
    for (int c = 0; c < kSrStages - 1 && c < nch; ++c) issue_w(c, c);
  pdl_wait();
  pdl_launch_dependents();
  if constexpr (kBytes) {  // the row's image (the permutation is read after the wait, as step 5 reads it)
    if (my_row < p.M) my_bytes = p.a.id_bytes(p.a.row_id(my_row));
  }
  if (p.b_fresh)
    for (int c = 0; c < kSrStages - 1 && c < nch; ++c) issue_w(c, c);
#pragma unroll
  for (int c = 0; c < kSrStages - 1; ++c) {
    if (c < nch) issue_a(c, c);
    __pipeline_commit();
  }
  // Stage c: every warp is done with stage c - 1 (the barrier), whose buffer then takes stage
  // c + 3 (W by warp 0's bulk copies, A by everyone's cp.async); wait for stage c's A (this thread's
  // copies, then everyone's: a second barrier) and its W (the mbarrier), multiply.
  int st = 0, nx = kSrStages - 1;
  for (int c = 0; c < nch; ++c) {
    __syncthreads();
    if (c + kSrStages - 1 < nch) {
      fence_proxy_async();
      issue_w(c + kSrStages - 1, nx);
      issue_a(c + kSrStages - 1, nx);
    }
    __pipeline_commit();
    __pipeline_wait_prior(kSrStages - 1);
    __syncthreads();
    mbar_wait(&full[st], static_cast<unsigned>(c / kSrStages) & 1u);
    multiply(c, st);
    st = st == kSrStages - 1 ? 0 : st + 1;
    nx = nx == kSrStages - 1 ? 0 : nx + 1;
  }
  __pipeline_wait_prior(0);
  __syncthreads();  // the stages are dead: the result overlays them

  if constexpr (kBytes) {  // the bytes were multiplied as integers: the sums / 255, once
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = over_255(acc[i][j][e]);
  }
  // The sums into the two 32 x 64 halves (warps 0-3: columns 0-63, warps 4-7: 64-127), C fragment
  // (row g, columns 2t, 2t+1) and row g + 8.
  float* cs = reinterpret_cast<float*>(sr_smem);
  {
    float* half_tile = cs + (warp / 4) * (kBM * kLdc);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int col = 16 * (warp % 4) + 8 * j + 2 * t, row = 16 * i + g;
        half_tile[row * kLdc + col] = acc[i][j][0];
        half_tile[row * kLdc + col + 1] = acc[i][j][1];
        half_tile[(row + 8) * kLdc + col] = acc[i][j][2];
        half_tile[(row + 8) * kLdc + col + 1] = acc[i][j][3];
      }
  }
  __syncthreads();
  using Epi = typename std::decay<decltype(p.epi)>::type;
  const int subs = min(2, (p.N - n0 + kBN - 1) / kBN);  // halves inside N
  const int tile0 = n0 / kBN;                           // the first half's 32 x 64 tile (row tile 0)
  if (p.splits > 1 &&
      !splitk_fixup_rows<kSrThreads, VecFixup<Epi>::value, 2>(cs, p.ws, p.counters, tile0, 1, subs, split, p.splits))
    return;
#pragma unroll 1
  for (int s = 0; s < subs; ++s) {
    if (s > 0) __syncthreads();  // the previous half's epilogue is done with the per-block scratch
    p.epi.prefetch(0, n0 + s * kBN, p.M, p.N);
    __syncthreads();
    p.epi(cs + s * (kBM * kLdc), 0, n0 + s * kBN, p.M, p.N);
  }
}

template <class Tag, class P>
__global__ void __launch_bounds__(kSrThreads, kSrBlocksPerSm) gemm_stream_rows_kernel(P p) {
  stream_rows_tile<P>(p);
}

// Slices: as many as fit one wave of one block an SM, each at least kSrMinChunks stages long, at
// most kFixupGroup (one-level fix-up). On 132 SMs: h = 8,192 64 tiles x 2 slices of 4,096; h =
// 4,096 32 x 4 of 1,024; h = 2,048 16 x 8 of 256; the gathered first layer (K = 784) at h = 8,192
// 64 x 2 of 512.
template <class P>
inline void plan_stream_rows(P& p, int sm_count) {
  p.rung = GemmRung::F16Stream;
  const int chunks = (p.K + kSrChunk - 1) / kSrChunk;
  int s = (kSrBlocksPerSm * sm_count) / sr_tiles(p);
  const int by_k = chunks / kSrMinChunks;
  s = s < by_k ? s : by_k;
  s = s < kFixupGroup ? s : kFixupGroup;
  if (s < 1) s = 1;
  const int per = chunks > 0 ? (chunks + s - 1) / s : 1;
  p.splits = chunks > 0 ? (chunks + per - 1) / per : 1;
  p.kchunk = per * kSrChunk;
}

template <class Tag, class P>
inline void launch_stream_rows(const P& p, cudaStream_t st, bool pdl) {
  if constexpr (StreamRowsViews<P>::value) {
    static bool attr_set = false;  // per instance: above 48 KB a kernel must ask for its shared memory
    if (!attr_set) {
      CUDA_CHECK(cudaFuncSetAttribute(gemm_stream_rows_kernel<Tag, P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      kSrSmem));
      attr_set = true;
    }
    launch_kernel(gemm_stream_rows_kernel<Tag, P>, sr_tiles(p) * p.splits, kSrThreads, kSrSmem, st, pdl, p);
  } else {
    throw Error(kExitInternal, "GEMM step 8 planned for a product it cannot take (internal error)");
  }
}

}  // namespace mlp
}  // namespace nb
