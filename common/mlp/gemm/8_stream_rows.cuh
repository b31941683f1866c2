// common/mlp/gemm/8_stream_rows.cuh — the GEMM ladder, step 8: a product of a few rows is its
// weights' bytes; stream them.
//
// Adds: fp16 products C = A · W^T of at most 32 rows (a batch of 32 activations, or of phase 5's
// gathered images, A [M][K], times a layer's weights W [N][K]) on mma.sync, W read once, straight
// from global memory into the MMAs' B fragments (16-byte loads a stage ahead in registers, not kept
// in L1), never staged in shared memory. Only A, the same for every block, is staged (cp.async,
// three stages of 128 values of k; image bytes become f16x2 integers when read, as in step 6). A
// block takes 128 columns of C (W rows, 16 a warp) and one K slice; the slices fill one wave of two
// blocks an SM and hand over through step 3's fix-up, both 32 x 64 halves of the tile at once, as
// steps 5-7 hand over theirs, or (p.cluster, phase 5's default on sm_90) as one thread-block cluster
// through its shared memory: "the cluster hand-over" below.
// The one design decision: an MMA sums its 16 values of k in any order, so a lane's fragments for
// two k-steps are eight consecutive values of k of its rows: one 16-byte load a W row, one shared
// load a row of A; nothing permuted or moved through shared memory but A. Products of at most 16
// columns (softmax-CE) take a narrow kernel of their own: its card is at stream_rows_narrow.
// The sums are exact to fp32 rounding, as step 6's: each k-step of 32 sums on the tensor cores into
// fresh registers, added to the running sums in fp32.
// Prediction, before measuring (H200; W2's hidden forward at h = 8,192, 32 x 8,192 x 8,192 on the
// 32 x 64 WMMA tile of steps 1-4 in 640 blocks: 51.7 us, 2.6 TB/s, its L2 71% busy with 387 MB,
// logs/fbwaves_5f18f30/ncu-d1-h8192.txt): 134 MB of weights, a quarter of that in A's re-reads
// from L2 and 8 MB of partial tiles, streamed at the copy ceiling's ~4.2 TB/s
// (ceilings__bench-linreg.json): ~34 us; at h = 4,096 (33.5 MB, 23.1 us) ~10 us. W2's step then
// 575.9 -> ~540 us at 8,192, 212 -> ~190 at 4,096.
// Measured (H200, ae47833, logs/stream_rows/kernels-s4.txt: each kernel's own time, PDL off; in
// brackets the 32 x 64 tiles', logs/fbwaves_5f18f30/kernels-d1.txt): the hidden forward 50.1 us at
// h = 8,192 (51.7), 19.4 at 4,096 (23.1), 9.7 at 2,048 (10.3); the gathered first layer 9.8 / 9.0 /
// 8.6 (16.7 / 12.1 / 8.9); softmax-CE 11.8 / 9.8 / 8.5 (12.6 / 10.2 / 9.1). W2's step, step 8 on
// against off in one call (ab-s4.txt): 571.4 -> 559.0 us at 8,192, 210.0 -> 196.3 at 4,096, 95.9 ->
// 94.9 at 2,048, 64.0 -> 62.0 at 1,024. At 8,192 the prediction missed by 1.5x: Nsight Compute
// (ncu-s1-h8192.txt) has DRAM 52% busy, 0.38 instructions a cycle a scheduler, L1TEX waits the top
// stall, 64 bytes a thread spilled under the 128 registers two blocks an SM allow: the W words a
// warp can hold in flight (4 KB, 16 warps an SM) bound it, not the bytes. Tried and dropped: W by
// bulk copies into shared memory (one 256-byte cp.async.bulk a row a stage, four stages, bytes in
// flight without registers) 159.6 us, DRAM 13.5%: the copies, not the bytes, were the limit
// (tma-bulk-copies.patch, call s3); each W word reloaded as soon as it was used, 63 us; bulk
// prefetches of the rows into L2 ahead of the loads, no faster (call s2).
// Staged (--fp16-stream staged, stream_rows_tile's kStaged): W's stages go to shared memory by
// cp.async beside A's, four stages of 128 rows x 128 values deep (200 KB, one block an SM): the
// bytes in flight are three stages, 96 KB an SM, whatever the registers hold, and each copy is a
// 16-byte request of a thread, not one bulk copy a row. Prediction, before measuring (H200): 12.7 MB
// in flight over the chip where ~5 MB keeps 4.8 TB/s busy, so the copy ceiling (~4.2 TB/s) bounds
// it: the hidden forward at h = 8,192 134 MB in ~32 us plus a stage's latency and the hand-over,
// ~35 us (50.1); at 4,096 ~11 (19.4); at 2,048 (two stages a slice) ~5 (9.7); the gathered first
// layer at 8,192 (12.8 MB) ~6 (9.8). W2's step ~35 us shorter at 8,192, ~18 at 4,096, ~10 at 2,048.
// Measured (H100, 1d73719, logs/staged_1d73719/ of the H100; no H200 run yet): each kernel alone,
// PDL off, registers -> staged: the hidden forward 61.63 -> 56.82 us at 8,192 (2.4 TB/s), 22.65 ->
// 19.24 at 4,096, 10.77 -> 11.38 at 2,048; the gathered first layer slower at every width (10.94 ->
// 11.71, 9.45 -> 10.16, 8.76 -> 9.73). W2's step 703.19 -> 686.47, 226.69 -> 218.24, 99.35 -> 98.10,
// and 57.70 -> 59.21 at 1,024 (one block an SM for 2 MB of W). The same reasoning on the H100's
// copy ceiling (~3 TB/s) gives ~45 us at 8,192: 4.8 of the ~17 us predicted came off. The rule
// (fp32_gemm.h): the products of at least 2,048 W rows staged. Under it, the H100's width sweep with
// both twins (d9fc1ae, logs/sweep_d9fc1ae/): W2's step 97.39 / 217.98 / 686.51 us at 2,048 / 4,096 /
// 8,192, 1.26x / 1.49x / 1.60x JAX. The staged copies' evict-first policy is made once a thread, not
// at every copy (with the fused passes' hinted masters, 0b39573: W2's step 79.25 -> 77.06 us at
// 2,048 and 210.72 -> 206.01 at 4,096 on an H100, phase 5's logs/w2onerun_65ee289/).
#pragma once
#include <cuda_fp16.h>
#include <cuda_pipeline.h>

#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "mlp/gemm/3_split_k.cuh"
#include "mlp/gemm/6_f16_mma.cuh"

namespace nb {
namespace mlp {

constexpr int kSrThreads = 256;                 // 8 warps
constexpr int kSrBN = 128;                      // columns of C (W rows) a block, 16 a warp
constexpr int kSrBM = 32;                       // rows of A at most
constexpr int kSrChunk = 128;                   // values of k a stage (four k-steps of 32)
constexpr int kSrStages = 3;                    // A's stages (W's: two, in registers)
constexpr int kSrLd = kSrChunk + 32;            // A's staged fp16 row stride in halves
constexpr int kSrLdB = kSrChunk + 32;           // A's staged byte row stride in bytes
constexpr int kSrStageBytes = kSrBM * kSrLd * 2;
constexpr int kSrBlocksPerSm = 2;               // __launch_bounds__: at most 128 registers a thread
constexpr int kSrMinChunks = 2;                 // a slice takes at least 256 values of k
// The staged variant (--fp16-stream staged): W's stages in shared memory too, by cp.async, four
// deep (a W stage 128 rows of kSrLd halves, then its A stage), one block an SM.
constexpr int kSrStStages = 4;
constexpr int kSrStWBytes = kSrBN * kSrLd * 2;
constexpr int kSrStStageBytes = kSrStWBytes + kSrStageBytes;
constexpr int kSrStSmem = kSrStStages * kSrStStageBytes;  // 200 KB
static_assert(kSrLd * 2 % 128 == 64, "rows g and g + 1 of a quarter warp's 16-byte reads on other banks");
static_assert(kSrLdB % 128 == 32, "rows g .. g + 3 of a half warp's 8-byte reads on other banks");
static_assert(kSrStages * kSrStageBytes >= 3 * kBM * kLdc * static_cast<int>(sizeof(float)),
              "the result's two 32 x 64 halves (and the cluster hand-over's sums of one) overlay the stages");
static_assert(kSrStSmem >= 3 * kBM * kLdc * static_cast<int>(sizeof(float)), "the same, staged");
static_assert(kLdc % 4 == 0, "16-byte rows of the result tile");
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

// A W word: 16 bytes read once, not kept in L1 (the stream would only evict what is there).
__device__ __forceinline__ uint4 ldg_stream(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// An evict-first L2 cache policy for the .L2::cache_hint forms below (also the fused backward
// pass's masters): made once a thread before its copies, since asm volatile would execute a
// createpolicy at every copy that made its own.
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
// 16 bytes by cp.async past L1 under an L2 policy.
__device__ __forceinline__ void cp_async16_hint(void* dst, const void* src, uint64_t pol) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "l"(pol) : "memory");
}

// d = a · b on one m16n8k16 tile, fresh sums (the accumulator input is zero); d += a · b is step 6's
// mma_f16.
__device__ __forceinline__ void mma_f16_fresh(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const float z = 0.f;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(z));
}

// A k-step of 32 as two m16n8k16 steps h = 0, 1 with the lanes' slots dealt along k: lane 4g + t's
// slots 2t, 2t+1 stand for k = 8t + 4h, +1 and slots 2t+8, 2t+9 for 8t + 4h + 2, +3 (in A and in W
// alike). A lane's eight values of k, 8t ... 8t + 7, are then one 16-byte word q of its row: words
// q.x, q.y feed h = 0 (slots 2t.. and 2t+8..), q.z, q.w feed h = 1. For A (rows g and g + 8 of an
// m16 tile, words ra and rb): a0..a3 = ra.x, rb.x, ra.y, rb.y at h = 0; for W (row g of an n8
// tile, word w): b0, b1 = w.x, w.y.

// An epilogue with `static constexpr bool kBiasFrom = true` (phase 5's FwdHiddenEpi) adds a bias
// and takes it from a pointer given to run_from_bias(): step 8 loads the tile's 128 values into
// shared memory while the slice's first stages are in flight, so that its epilogue, which runs
// after the slices' hand-over in the last block only, does not wait for them there (twice: one
// round trip each 64-column half). Prediction, before measuring (H100; the stamps of
// nvidia-h100-80gb-hbm3/logs/sweep_d9fc1ae/probe/ put the epilogue at 1.6-1.9 us after the hand-over
// in the staged kernels): ~0.5-1 us off each of a W2 step's three 128-column step 8 kernels, its
// step ~1.5-3 us shorter from h = 1,024 (where they stream W through registers) to 8,192. Measured
// (H100, 821baba against 1a38a69, 2 rounds alternating, nvidia-h100-80gb-hbm3/logs/bias_821baba/):
// 57.84 -> 57.60, 97.39 -> 95.72, 217.19 -> 215.29, 678.05 -> 676.33 us at h = 1,024 / 2,048 /
// 4,096 / 8,192, the same checksums; at 1,024, where W streams through registers, 0.2 us.
template <class E, class = void>
struct BiasFrom : std::false_type {};
template <class E>
struct BiasFrom<E, std::void_t<decltype(E::kBiasFrom)>> : std::integral_constant<bool, E::kBiasFrom> {};
__device__ __forceinline__ float* sr_bias_tile() {
  __shared__ __align__(16) float s[kSrBN];
  return s;
}
static_assert(kSrThreads == 256, "FwdHiddenEpi::run_from_bias takes 256-thread blocks");

// ------------------------------------------------------------------ the cluster hand-over
// A tile's K slices as one thread-block cluster (p.cluster; plan_stream_rows): each slice leaves its
// 32 x 128 partial tile in its own shared memory; after one cluster barrier, the block of rank r < 2
// adds half r (32 x 64) of every slice's tile, read through distributed shared memory in slice
// order (the fix-up's order: the same sums, bit for bit), and runs that half's epilogue. Where the
// global hand-over (splitk_fixup_rows) stores 16 KB of partials a slice, fences, counts on an atomic
// and lets the last block read them all back from L2 and run both halves' epilogues in turn.
// Prediction, before measuring (H100; the stamps of nvidia-h100-80gb-hbm3/logs/sweep_d9fc1ae/probe/:
// the staged hidden forward at h = 4,096 spends 3.1 us from its loop's end to its partials summed
// and 1.6 us in the epilogues of its two halves): ~2 us off each 128-column step 8 kernel of W2's
// step (the hand-over ~1 us where it took ~3, the halves' epilogues side by side), the step ~4-6 us
// shorter from h = 2,048 to 8,192.
// Measured (H100, nvidia-h100-80gb-hbm3/logs/handover_30c7108/; PDL off, us): the gathered first
// layer 11.23 -> 8.08 at h = 2,048 and 11.34 -> 8.17 at 4,096; the staged hidden forward, whose
// clusters of 8 and 4 slices do not all fit an H100 at once (15 and 30 of the 16 and 32 needed, its
// GPCs of 14-18 SMs) and run 6 and 3 slices instead, 11.31 -> 8.59 and 19.20 -> 18.13. W2's step,
// global -> cluster, 2 rounds alternating: 58.92 -> 54.44 / 98.46 -> 90.71 / 219.21 -> 213.79 /
// 685.33 -> 682.06 us at h = 1,024 / 2,048 / 4,096 / 8,192 (replan_1be6b3c/).
constexpr int kSrMaxCluster = 8;  // slices a cluster (the portable cluster size)

__device__ __forceinline__ void sr_cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void sr_cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void sr_cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
// 16 bytes at the same shared-memory address in the block of cluster rank `rank`.
__device__ __forceinline__ float4 sr_dsmem_f4(const float* p, int rank) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
  asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(r)
               : "memory");
#else
  (void)p, (void)rank;
#endif
  return v;
}

// Every block of the cluster calls it with its partial tile in cs (two 32 x 64 halves, row stride
// kLdc, each thread's stores done and a block barrier passed). The sums of half r go to the 32 x 64
// tile after the two halves (the stages are dead; stream_rows_tile's static_asserts keep it inside).
template <class P>
__device__ __forceinline__ void sr_cluster_handover(const P& p, float* cs, int n0, int subs, int rank) {
  using Epi = typename std::decay<decltype(p.epi)>::type;
  constexpr int kE4 = kBM * kBN / 4 / kSrThreads;  // float4 of a half a thread
  float* sum = cs + 2 * kBM * kLdc;
  sr_cluster_arrive_release();  // this slice's partial tile is written ...
  sr_cluster_wait();            // ... and every other slice's
  if (rank < subs) {
    float4 v[kSrMaxCluster][kE4];
#pragma unroll
    for (int z = 0; z < kSrMaxCluster; ++z)
#pragma unroll
      for (int i = 0; i < kE4; ++i) {
        const int e = (threadIdx.x + i * kSrThreads) * 4;
        v[z][i] = z < p.splits ? sr_dsmem_f4(cs + rank * (kBM * kLdc) + (e / kBN) * kLdc + e % kBN, z)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
    for (int i = 0; i < kE4; ++i) {
      float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int z = 0; z < kSrMaxCluster; ++z)
        if (z < p.splits) s.x += v[z][i].x, s.y += v[z][i].y, s.z += v[z][i].z, s.w += v[z][i].w;
      const int e = (threadIdx.x + i * kSrThreads) * 4;
      *reinterpret_cast<float4*>(&sum[(e / kBN) * kLdc + e % kBN]) = s;
    }
  }
  sr_cluster_arrive_relaxed();  // done reading the other blocks' shared memory
  if (rank < subs) {
    p.epi.prefetch(0, n0 + rank * kBN, p.M, p.N);
    __syncthreads();
    if constexpr (BiasFrom<Epi>::value)
      p.epi.run_from_bias(sum, 0, n0 + rank * kBN, p.M, p.N, sr_bias_tile() + rank * kBN);
    else p.epi(sum, 0, n0 + rank * kBN, p.M, p.N);
  }
  sr_cluster_wait();  // no block leaves while another may still read its tile
}

// One (128-column tile, K slice): W's 16-byte words into registers a stage ahead, A's stages by
// cp.async, the MMAs, then the split-K hand-over and the epilogue of each 32 x 64 half.
// kStaged (--fp16-stream staged): W's stages by cp.async into shared memory beside A's, kSrStStages
// deep, so that the bytes in flight are the stages', not what the registers hold.
template <class P, bool kStaged = false>
__device__ __forceinline__ void stream_rows_tile(const P& p) {
  constexpr int kSt = kStaged ? kSrStStages : kSrStages;          // stages in the ring
  constexpr int kStBytes = kStaged ? kSrStStageBytes : kSrStageBytes;
  constexpr int kAOff = kStaged ? kSrStWBytes : 0;                  // a stage's A after its W
  unsigned char* smem;
  if constexpr (kStaged) {
    extern __shared__ __align__(128) unsigned char sr_staged_smem[];
    smem = sr_staged_smem;
  } else {
    __shared__ __align__(128) unsigned char sr_smem[kSrStages * kSrStageBytes];
    smem = sr_smem;
  }
  constexpr bool kBytes = SrByteA<typename P::AView>::value;
  const int tiles = sr_tiles(p);
  // (p.cluster: a tile's slices are consecutive blocks, one cluster, slice = the block's rank in it.)
  const int split = p.cluster ? blockIdx.x % p.splits : blockIdx.x / tiles;
  const int tile = p.cluster ? blockIdx.x / p.splits : blockIdx.x % tiles;
  const int n0 = tile * kSrBN;
  const int kbeg = split * p.kchunk, kend = min(p.K, kbeg + p.kchunk);
  const int nch = kend > kbeg ? (kend - kbeg + kSrChunk - 1) / kSrChunk : 0;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;

  // The lane's two W rows (n8 tiles j = 0, 1 of the warp's 16), at k = 8t; rows past N read row 0
  // and are dropped (their columns of C are never stored).
  const __half* wrow[2];
  bool wok[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int n = n0 + 16 * warp + 8 * j + g;
    wok[j] = n < p.N;
    wrow[j] = p.b.p + static_cast<size_t>(wok[j] ? n : 0) * p.b.ld + 8 * t;
  }
  // Stage c's W words: four k-steps of 32, two n8 tiles. k = 8t + 32 s past kend: zeros (K and the
  // slices are multiples of 8, so a lane's eight values are all inside or all outside).
  auto load_w = [&](int c, uint4 (&q)[4][2]) {
    const int k0 = kbeg + c * kSrChunk;
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int k = k0 + 32 * s;
        q[s][j] = (wok[j] && k + 8 * t < kend) ? ldg_stream(wrow[j] + k) : make_uint4(0u, 0u, 0u, 0u);
      }
  };
  // Stage c of A into buffer st: 32 rows x 128 values, rows past M and values past kend as zeros.
  // fp16: 512 copies of 16 bytes, two a thread. Bytes: 512 copies of 8, two a thread, each thread's
  // row (and its image, looked up once after the PDL wait) fixed.
  const int my_row = threadIdx.x / (kSrChunk / 16);
  const uint8_t* my_bytes = nullptr;
  auto stage_a = [&](int c, int st) {
    const int k0 = kbeg + c * kSrChunk;
    if constexpr (kBytes) {
      uint8_t* dst = smem + st * kStBytes + kAOff;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int kk = (threadIdx.x % (kSrChunk / 16)) * 16 + 8 * i;
        uint8_t* d = dst + my_row * kSrLdB + kk;
        if (my_bytes && k0 + kk < kend) __pipeline_memcpy_async(d, my_bytes + k0 + kk, 8);
        else *reinterpret_cast<uint2*>(d) = make_uint2(0u, 0u);
      }
    } else {
      __half* dst = reinterpret_cast<__half*>(smem + st * kStBytes + kAOff);
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
  // load, each pair made an f16x2 of its integers by a byte permute and a subtraction, as in step 6).
  // Rows 64 bytes apart mod 128 (fp16: a quarter warp reads rows g, g + 1) or 32 (bytes: a half warp
  // reads rows g .. g + 3): no bank conflict.
  auto a_word = [&](int st, int rr, int s) -> uint4 {
    if constexpr (kBytes) {
      const uint2 b = *reinterpret_cast<const uint2*>(smem + st * kStBytes + kAOff + rr * kSrLdB + 32 * s + 8 * t);
      return make_uint4(bytes_as_f16x2<0, 1>(b.x), bytes_as_f16x2<2, 3>(b.x), bytes_as_f16x2<0, 1>(b.y),
                        bytes_as_f16x2<2, 3>(b.y));
    } else {
      return *reinterpret_cast<const uint4*>(reinterpret_cast<const __half*>(smem + st * kStBytes + kAOff) +
                                             rr * kSrLd + 32 * s + 8 * t);
    }
  };
  float acc[2][2][4];  // [m16 tile i][n8 tile j][fragment]: the running fp32 sums
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
  // Stage st's products: per k-step, A's four rows g + 8r (r = 0..3: m16 tiles 0 and 1).
  auto multiply = [&](int st, const uint4 (&q)[4][2]) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint4 a[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = a_word(st, g + 8 * r, s);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint4 ra = a[2 * i], rb = a[2 * i + 1], w = q[s][j];
          const uint32_t a0[4] = {ra.x, rb.x, ra.y, rb.y}, a1[4] = {ra.z, rb.z, ra.w, rb.w};
          float d[4];
          mma_f16_fresh(d, a0, w.x, w.y);
          mma_f16(d, a1, w.z, w.w);
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] += d[e];
        }
    }
  };

  // Staged: stage c of W into buffer st, 128 rows x 128 values, 2,048 copies of 16 bytes, eight a
  // thread (a row's sixteen by sixteen consecutive threads); rows past N and values past kend as zeros.
  // The staged W words, read once, are marked first to leave L2 (A, which every tile's blocks read,
  // should stay).
  uint64_t w_pol = 0;
  if constexpr (kStaged) w_pol = l2_policy_evict_first();
  auto stage_w = [&](int c, int st) {
    const int k0 = kbeg + c * kSrChunk;
    __half* dst = reinterpret_cast<__half*>(smem + st * kStBytes);
#pragma unroll
    for (int i = 0; i < kSrBN * (kSrChunk / 8) / kSrThreads; ++i) {
      const int e = threadIdx.x + i * kSrThreads, r = e / (kSrChunk / 8), kk = (e % (kSrChunk / 8)) * 8;
      __half* d = dst + r * kSrLd + kk;
      if (n0 + r < p.N && k0 + kk < kend)
        cp_async16_hint(d, p.b.p + static_cast<size_t>(n0 + r) * p.b.ld + k0 + kk, w_pol);
      else
        *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
    }
  };
  // Staged: stage st's W words of the lane (rows 16 warp + 8 j + g, values 32 s + 8 t: rows g and
  // g + 1 of a quarter warp 64 bytes apart mod 128, no bank conflict).
  auto w_words = [&](int st, uint4 (&q)[4][2]) {
    const __half* ws = reinterpret_cast<const __half*>(smem + st * kStBytes);
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        q[s][j] = *reinterpret_cast<const uint4*>(ws + (16 * warp + 8 * j + g) * kSrLd + 32 * s + 8 * t);
  };

  // The weights' first stage goes out before the PDL wait (the kernel just before does not write
  // them) unless p.b_fresh; A, the kernel before's output, after it. Registers: stage 0's words into
  // q0. Staged: W's first kSt - 1 stages, a copy group each; with A's groups after them and then one
  // group a stage (its W and its A), stage c's group is always the (kSt - 1 + c)-th, so waiting until
  // at most kSt - 2 groups are pending finds it landed (A's alone, the same count).
  uint4 q0[4][2], q1[4][2];  // (registers: the W words of the stage multiplied and of the next)
  auto w_first = [&] {
    if constexpr (kStaged) {
#pragma unroll
      for (int c = 0; c < kSt - 1; ++c) {
        if (c < nch) stage_w(c, c);
        __pipeline_commit();
      }
    } else {
      if (nch > 0) load_w(0, q0);
    }
  };
  if (!p.b_fresh) w_first();
  pdl_wait();
  pdl_launch_dependents();
  if constexpr (kBytes) {  // the row's image (the permutation is read after the wait, as step 5 reads it)
    if (my_row < p.M) my_bytes = p.a.id_bytes(p.a.row_id(my_row));
  }
  if (p.b_fresh) w_first();
#pragma unroll
  for (int s = 0; s < kSt - 1; ++s) {
    if (s < nch) stage_a(s, s);
    __pipeline_commit();
  }
  // BiasFrom: the tile's bias, under the first stages' copies (after the wait: the kernel just
  // before may have written it); the loop's barriers order it before the epilogue's reads.
  using Epi = typename std::decay<decltype(p.epi)>::type;
  if constexpr (BiasFrom<Epi>::value) {
    const int n = n0 + static_cast<int>(threadIdx.x);
    if (threadIdx.x < kSrBN) sr_bias_tile()[threadIdx.x] = n < p.N ? p.epi.bias[n] : 0.f;
  }
  int rs = 0, ws = kSt - 1;
  if constexpr (kStaged) {
    // Stage c: everyone's copies of it landed, every warp done with stage c - 1 (the barrier), whose
    // buffer takes stage c + kSt - 1's W and A; then stage c's W words from shared memory, multiply.
    for (int c = 0; c < nch; ++c) {
      __pipeline_wait_prior(kSt - 2);
      __syncthreads();
      if (c + kSt - 1 < nch) stage_w(c + kSt - 1, ws), stage_a(c + kSt - 1, ws);
      __pipeline_commit();
      uint4 q[4][2];
      w_words(rs, q);
      multiply(rs, q);
      rs = rs == kSt - 1 ? 0 : rs + 1;
      ws = ws == kSt - 1 ? 0 : ws + 1;
    }
  } else {
    // Stage c: wait for its A (this thread's copies, then everyone's), put stage c + 2's A and stage
    // c + 1's W in flight, multiply. Two stages an iteration, so that the W words' registers are named.
    auto step = [&](int c, const uint4 (&cur)[4][2], uint4 (&nxt)[4][2]) {
      __pipeline_wait_prior(kSt - 2);
      __syncthreads();  // stage c's A is everyone's; every warp is done with stage c - 1
      if (c + kSt - 1 < nch) stage_a(c + kSt - 1, ws);
      __pipeline_commit();
      if (c + 1 < nch) load_w(c + 1, nxt);
      multiply(rs, cur);
      rs = rs == kSt - 1 ? 0 : rs + 1;
      ws = ws == kSt - 1 ? 0 : ws + 1;
    };
    for (int c = 0; c < nch; c += 2) {
      step(c, q0, q1);
      if (c + 1 < nch) step(c + 1, q1, q0);
    }
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
  float* cs = reinterpret_cast<float*>(smem);
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
  const int subs = min(2, (p.N - n0 + kBN - 1) / kBN);  // halves inside N
  if (p.cluster) {
    sr_cluster_handover(p, cs, n0, subs, split);
    return;
  }
  const int tile0 = n0 / kBN;                           // the first half's 32 x 64 tile (row tile 0)
  if (p.splits > 1 &&
      !splitk_fixup_rows<kSrThreads, VecFixup<Epi>::value, 2>(cs, p.ws, p.counters, tile0, 1, subs, split, p.splits))
    return;
#pragma unroll 1
  for (int s = 0; s < subs; ++s) {
    if (s > 0) __syncthreads();  // the previous half's epilogue is done with the per-block scratch
    p.epi.prefetch(0, n0 + s * kBN, p.M, p.N);
    __syncthreads();
    if constexpr (BiasFrom<Epi>::value)
      p.epi.run_from_bias(cs + s * (kBM * kLdc), 0, n0 + s * kBN, p.M, p.N, sr_bias_tile() + s * kBN);
    else p.epi(cs + s * (kBM * kLdc), 0, n0 + s * kBN, p.M, p.N);
  }
}

template <class Tag, class P>
__global__ void __launch_bounds__(kSrThreads, kSrBlocksPerSm) gemm_stream_rows_kernel(P p) {
  stream_rows_tile<P>(p);
}
template <class Tag, class P>
__global__ void __launch_bounds__(kSrThreads, 1) gemm_stream_rows_staged_kernel(P p) {
  stream_rows_tile<P, true>(p);
}

// ------------------------------------------------------------------ narrow products (N <= 16)
// The last layer's product (softmax-CE: 10 columns over a hidden width of K) fills one warp's two
// n8 tiles of the 128-column tile: the other seven warps idle, and the one that works waits for a
// stage of A and its W words once per 128 values of k (~1.6 us a stage at h = 8,192, four stages a
// slice). Here the eight warps deal the work along k instead: warp w takes n8 tile j = w % 2 and
// k-step s = w / 2 of every stage, a lane reads its A rows' and its W row's 16-byte words for up to
// kSrNarrowGroup stages at once, straight from global memory (A, a few KB, is in L2; nothing is
// staged in shared memory), so a slice waits for its loads once. The four k-steps' sums are added
// in shared memory in k-step order, the slices hand over only their 32 x 16 partials (in slice
// order), and the epilogue gets the usual 32 x 64 tile (its first N columns).
// Prediction, before measuring (H200, PDL-off kernel times of logs/stream_rows/kernels-s4.txt):
// softmax-CE took 8.5 / 9.8 / 11.8 us at h = 2,048 / 4,096 / 8,192 on 8 / 16 / 16 slices of 2 / 2
// / 4 stages: ~1 us a further stage over ~6.5 us of launch, first loads, hand-over (16 slices of a
// whole 32 x 64 tile, 128 KB read by the last block) and epilogue. Single-stage slices, a slice's
// loads at once and 2 KB partials: ~6.7 / ~8 / ~7.5 us, W2's step 2-4 us shorter at each width.
// Measured (H100, 1be175e against 3fe2cee, logs/narrow_1be175e/ of the H100): 8.57 -> 6.82, 9.86 ->
// 7.13, 11.69 -> 7.41 us; W2's step 100.68 -> 98.77, 229.44 -> 226.57, 708.31 -> 703.32 us.
// Then the epilogue's prefetch() moved from after the hand-over to the kernel's start. Stamped
// (%globaltimer in the last block, PDL off, H100, d9fc1ae + a probe: nvidia-h100-80gb-hbm3/logs/
// sweep_d9fc1ae/probe/), us after the PDL wait at h = 2,048 / 4,096 / 8,192: the slice's loads and
// MMAs 0.70 / 0.98 / 1.41, its partial stored 0.98 / 1.20 / 1.60, found last (fence and counter)
// 2.50 / 2.82 / 3.18, the partials summed 3.01 / 3.30 / 3.65, the prefetch (bias, labels through
// the row map, step) 4.37 / 4.62 / 4.94, the epilogue 5.74 / 5.97 / 6.22. Prediction, before
// measuring: the prefetch's ~1.3 us leave the last block's chain, softmax-CE and W2's step ~1.3 us
// shorter at every width that runs it. Measured (H100, 1a38a69 against d9fc1ae, 2 rounds alternating,
// nvidia-h100-80gb-hbm3/logs/prefetch_1a38a69/): W2's step 57.82 -> 57.41, 97.69 -> 97.61, 216.66 ->
// 216.07, 678.10 -> 677.39 us at h = 1,024 / 2,048 / 4,096 / 8,192, the same checksums; softmax-CE
// alone (PDL off) ~0.7 us shorter at 4,096 (across two machines): about half the prediction, which
// counted all of the loads' time as leaving the chain (where the rest went is not stamped).
constexpr int kSrNarrowN = 16;      // columns: two n8 tiles
constexpr int kSrNarrowGroup = 4;   // stages whose words a lane holds at once (5 x 16 bytes each)

template <class P>
struct SrNarrowViews : std::is_same<typename P::AView, MatView<__half, true>> {};  // A fp16 along k
template <class P>
__host__ __device__ inline bool sr_narrow(const P& p) {
  return SrNarrowViews<P>::value && p.N <= kSrNarrowN;
}

// An epilogue with `static constexpr bool kClusterTail = true` (phase 5's last layer, whose backward
// pass runs in softmax-CE's cluster: 5b_fused_backward.cuh) is run in every slice, not only in one:
// tail_prefetch(kbeg, kend, M, N) after the PDL wait (its first loads, in flight under the slice's),
// then, after the hand-over, tail(cs, kbeg, kend, M, N, rank) in each slice with the whole product's
// sums (32 x 16 in cs, row stride kLdc, the same bits in every slice), the slice's own range of k and
// its rank: the tail runs the epilogue's work itself (its stores in one slice only). Such a product
// always runs as one cluster (one slice: a cluster of one).
template <class E, class = void>
struct SrClusterTail : std::false_type {};
template <class E>
struct SrClusterTail<E, std::void_t<decltype(E::kClusterTail)>> : std::integral_constant<bool, E::kClusterTail> {};

// The narrow product's slices as one cluster (p.cluster; up to kFixupGroup of them, a non-portable
// cluster size above 8): each slice leaves its 32 x 16 partial in its shared memory; after one
// cluster barrier the slice of rank 0 adds them in slice order through distributed shared memory
// (the global hand-over's order and sums, bit for bit) and runs the epilogue. Where the global
// hand-over stores the partials, fences, counts on an atomic and lets the last block read them back
// from L2 (stamped at ~1.5 us from a slice's partial stored to the last block found, at h = 2,048 on
// an H100: the card above). Measured (H100, PDL off, softmax-CE alone; two calls, global then
// cluster): 6.33 -> 6.14 us at h = 2,048, 6.49 -> 6.05 at 4,096 (nvidia-h100-80gb-hbm3/logs/
// handover_30c7108/fused_ac5c4f9/k/, lastpass_2728530/checks_2728530/k/): a fifth of the stamped wait,
// which the DSMEM reads and the cluster barrier mostly pay back. With a cluster tail (SrClusterTail)
// every slice adds them, in the same order, and hands its sums to the tail instead of the
// epilogue: no second barrier for a finished tile to travel.
template <class P>
__device__ __forceinline__ void sr_narrow_cluster_handover(const P& p, const float (&v)[kSrBM * kSrNarrowN / kSrThreads],
                                                           float* cs, int rank, int kbeg, int kend) {
  using Epi = typename std::decay<decltype(p.epi)>::type;
  constexpr bool kTail = SrClusterTail<Epi>::value;
  constexpr int kOut = kSrBM * kSrNarrowN / kSrThreads, kF4 = kSrBM * kSrNarrowN / 4;  // float4 of a tile
  static_assert(kF4 <= kSrThreads, "one float4 of the tile a thread");
  __shared__ __align__(16) float slot[kSrBM * kSrNarrowN];  // this slice's partial
#pragma unroll
  for (int q = 0; q < kOut; ++q) slot[threadIdx.x + q * kSrThreads] = v[q];
  sr_cluster_arrive_release();  // this slice's partial is written ...
  sr_cluster_wait();            // ... and every other slice's
  if ((kTail || rank == 0) && threadIdx.x < kF4) {
    const int f = 4 * static_cast<int>(threadIdx.x);  // elements f .. f + 3: row f / 16
    float4 x[kFixupGroup];
#pragma unroll
    for (int z = 0; z < kFixupGroup; ++z) x[z] = z < p.splits ? sr_dsmem_f4(slot + f, z) : make_float4(0.f, 0.f, 0.f, 0.f);
    float4 s = x[0];
    if (p.splits > 1) {  // (as the fix-up: from zero, in slice order)
      s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int z = 0; z < kFixupGroup; ++z)
        if (z < p.splits) s.x += x[z].x, s.y += x[z].y, s.z += x[z].z, s.w += x[z].w;
    }
    *reinterpret_cast<float4*>(&cs[(f / kSrNarrowN) * kLdc + f % kSrNarrowN]) = s;
  }
  sr_cluster_arrive_relaxed();  // done reading the others' partials
  if constexpr (kTail) {
    __syncthreads();
    p.epi.tail(cs, kbeg, kend, p.M, p.N, rank);
  } else if (rank == 0) {
    __syncthreads();
    p.epi(cs, 0, 0, p.M, p.N);
  }
  sr_cluster_wait();  // no block leaves while another may still read its partial
}

template <class P>
__device__ __forceinline__ void stream_rows_narrow(const P& p) {
  __shared__ __align__(16) float part[4][kSrBM][kSrNarrowN];  // [k-step][row][column]
  __shared__ __align__(16) float cs[kBM * kLdc];
  using Epi = typename std::decay<decltype(p.epi)>::type;
  const int split = blockIdx.x;
  const int kbeg = split * p.kchunk, kend = min(p.K, kbeg + p.kchunk);
  const int nch = kend > kbeg ? (kend - kbeg + kSrChunk - 1) / kSrChunk : 0;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int j = warp % 2, s = warp / 2;
  const int wn = 8 * j + g;  // the lane's W row (its column of C)
  const bool wok = wn < p.N;
  const __half* wrow = p.b.p + static_cast<size_t>(wok ? wn : 0) * p.b.ld + 32 * s + 8 * t;
  const __half* arow[4];  // rows g + 8 r (m16 tile r / 2)
  bool aok[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    aok[r] = g + 8 * r < p.M;
    arow[r] = p.a.p + static_cast<size_t>(aok[r] ? g + 8 * r : 0) * p.a.ld + 32 * s + 8 * t;
  }
  // The lane's words of stage c: k = kbeg + 128 c + 32 s + 8 t ... + 7, all inside or all past kend
  // (K and the slices are multiples of 8): zeros past it.
  auto in_k = [&](int c) { return kbeg + c * kSrChunk + 32 * s + 8 * t < kend; };
  auto load_w = [&](int c) {
    return (wok && in_k(c)) ? ldg_stream(wrow + kbeg + c * kSrChunk) : make_uint4(0u, 0u, 0u, 0u);
  };
  float acc[2][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[i][e] = 0.f;
  uint4 w[kSrNarrowGroup], a[kSrNarrowGroup][4];
  // The weights go out before the PDL wait unless the kernel just before wrote them (p.b_fresh).
  if (!p.b_fresh)
#pragma unroll
    for (int c = 0; c < kSrNarrowGroup; ++c) w[c] = c < nch ? load_w(c) : make_uint4(0u, 0u, 0u, 0u);
  pdl_wait();
  pdl_launch_dependents();
  if constexpr (SrClusterTail<Epi>::value) p.epi.tail_prefetch(kbeg, kend, p.M, p.N);
  // What the epilogue reads besides the tile (softmax-CE: the bias, the rows' labels through the row
  // map, the step) is loaded while the slice's first loads are in flight, in every block, as step 1
  // does (0_problem.cuh's prefetch()); after the hand-over it cost the last block ~1.3 us of
  // dependent loads.
  if (nch == 0) p.epi.prefetch(0, 0, p.M, p.N);
  for (int c0 = 0; c0 < nch; c0 += kSrNarrowGroup) {
    if (p.b_fresh || c0 > 0)
#pragma unroll
      for (int c = 0; c < kSrNarrowGroup; ++c) w[c] = c0 + c < nch ? load_w(c0 + c) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int c = 0; c < kSrNarrowGroup; ++c)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const bool ok = aok[r] && c0 + c < nch && in_k(c0 + c);
        a[c][r] = ok ? *reinterpret_cast<const uint4*>(arow[r] + kbeg + (c0 + c) * kSrChunk) : make_uint4(0u, 0u, 0u, 0u);
      }
    if (c0 == 0) p.epi.prefetch(0, 0, p.M, p.N);
#pragma unroll
    for (int c = 0; c < kSrNarrowGroup; ++c)
#pragma unroll
      for (int i = 0; i < 2; ++i) {  // k-step s of stage c0 + c, m16 tile i (as stream_rows_tile's multiply)
        const uint4 ra = a[c][2 * i], rb = a[c][2 * i + 1];
        const uint32_t a0[4] = {ra.x, rb.x, ra.y, rb.y}, a1[4] = {ra.z, rb.z, ra.w, rb.w};
        float d[4];
        mma_f16_fresh(d, a0, w[c].x, w[c].y);
        mma_f16(d, a1, w[c].z, w[c].w);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][e] += d[e];
      }
  }
  // C fragments (rows g, g + 8 of m16 tile i; columns 2t, 2t + 1 of n8 tile j) into k-step s's part.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = 16 * i + g, col = 8 * j + 2 * t;
    part[s][row][col] = acc[i][0], part[s][row][col + 1] = acc[i][1];
    part[s][row + 8][col] = acc[i][2], part[s][row + 8][col + 1] = acc[i][3];
  }
  __syncthreads();
  // Two outputs a thread (rows o / 16, columns o % 16), the k-steps added in order.
  constexpr int kOut = kSrBM * kSrNarrowN / kSrThreads;
  static_assert(kOut * kSrThreads == kSrBM * kSrNarrowN, "whole outputs a thread");
  float v[kOut];
#pragma unroll
  for (int q = 0; q < kOut; ++q) {
    const int o = threadIdx.x + q * kSrThreads, row = o / kSrNarrowN, col = o % kSrNarrowN;
    v[q] = ((part[0][row][col] + part[1][row][col]) + part[2][row][col]) + part[3][row][col];
  }
  if (p.cluster) {
    sr_narrow_cluster_handover(p, v, cs, split, kbeg, kend);
    return;
  }
  if (p.splits > 1) {  // hand the 32 x 16 partial over; the last slice adds them all in slice order
    float* ws = p.ws;
    constexpr int kSlot = kSrBM * kSrNarrowN;
#pragma unroll
    for (int q = 0; q < kOut; ++q) ws[static_cast<size_t>(split) * kSlot + threadIdx.x + q * kSrThreads] = v[q];
    if (!splitk_arrive_last(p.counters, p.splits)) return;
    float sum[kOut];
#pragma unroll
    for (int q = 0; q < kOut; ++q) sum[q] = 0.f;
    for (int z0 = 0; z0 < p.splits; z0 += kFixupGroup) {  // (one round: at most 16 slices)
      float x[kFixupGroup][kOut];
#pragma unroll
      for (int z = 0; z < kFixupGroup; ++z)
#pragma unroll
        for (int q = 0; q < kOut; ++q)
          x[z][q] = z0 + z < p.splits ? __ldcg(ws + static_cast<size_t>(z0 + z) * kSlot + threadIdx.x + q * kSrThreads) : 0.f;
#pragma unroll
      for (int z = 0; z < kFixupGroup; ++z)
#pragma unroll
        for (int q = 0; q < kOut; ++q)
          if (z0 + z < p.splits) sum[q] += x[z][q];
    }
#pragma unroll
    for (int q = 0; q < kOut; ++q) v[q] = sum[q];
    if (threadIdx.x == 0) *p.counters = 0u;  // ready for the next launch
  }
#pragma unroll
  for (int q = 0; q < kOut; ++q) {
    const int o = threadIdx.x + q * kSrThreads;
    cs[(o / kSrNarrowN) * kLdc + o % kSrNarrowN] = v[q];
  }
  __syncthreads();
  p.epi(cs, 0, 0, p.M, p.N);
}

template <class Tag, class P>
__global__ void __launch_bounds__(kSrThreads, kSrBlocksPerSm) gemm_stream_rows_narrow_kernel(P p) {
  stream_rows_narrow<P>(p);
}

// Slices: as many as fit one wave of kSrBlocksPerSm blocks an SM, each at least kSrMinChunks
// stages long (a narrow product's: one), at most kFixupGroup (one-level fix-up). On 132 SMs: h =
// 8,192 64 tiles x 4 slices of 2,048; h = 4,096 32 x 8 of 512; h = 2,048 16 x 8 of 256; the
// gathered first layer (K = 784) at h = 8,192 64 x 3 of 384; softmax-CE (narrow) 16 slices of 512 /
// 256 / 128.
// staged (--fp16-stream staged): the 128-column tile's products with W staged (one block an SM).
// cluster (sm_90 and up; phase 5's --handover): a 128-column tile's 2 ... 8 slices as
// one cluster, handing over through its shared memory (sr_cluster_handover), a narrow product's 2
// ... 16 (sr_narrow_cluster_handover); launch_stream_rows keeps the global hand-over where the GPU
// cannot hold all the tiles' clusters at once. A product whose epilogue has a cluster tail always
// runs as one cluster (sm_90 and up only).
template <class P>
inline void plan_stream_rows(P& p, int sm_count, bool staged = false, bool cluster = false) {
  staged = staged && !sr_narrow(p);
  p.rung = staged ? GemmRung::F16StreamStaged : GemmRung::F16Stream;
  const int chunks = (p.K + kSrChunk - 1) / kSrChunk;
  int s = ((staged ? 1 : kSrBlocksPerSm) * sm_count) / sr_tiles(p);
  const int by_k = sr_narrow(p) ? chunks : chunks / kSrMinChunks;  // a narrow slice: one stage or more
  s = s < by_k ? s : by_k;
  s = s < kFixupGroup ? s : kFixupGroup;
  if (s < 1) s = 1;
  const int per = chunks > 0 ? (chunks + s - 1) / s : 1;
  p.splits = chunks > 0 ? (chunks + per - 1) / per : 1;
  p.kchunk = per * kSrChunk;
  p.cluster = cluster && p.splits > 1 && p.splits <= (sr_narrow(p) ? kFixupGroup : kSrMaxCluster);
  if constexpr (SrClusterTail<typename std::decay<decltype(p.epi)>::type>::value) p.cluster = true;  // (its tail needs it)
}

// Whether the GPU holds every cluster of kernel K's launch for p at once (else a second wave of
// clusters would follow the first). The clusters it can hold are asked once for each instance and
// cluster size: they depend on how the chip's SMs fall into GPCs (an H100 SXM's 132 SMs sit in
// GPCs of 14 to 18), so four-block clusters of one-block-an-SM kernels may fit 30 at once, not 32.
template <auto K, class P>
inline bool sr_clusters_fit(const P& p, int smem) {
  static int held[kFixupGroup + 1] = {};  // clusters the GPU holds at once, + 1 (0: not asked yet)
  int& h = held[p.splits];
  if (h == 0) {
    if (p.splits > kSrMaxCluster) CUDA_CHECK(cudaFuncSetAttribute(K, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(p.splits), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cfg.gridDim = dim3(static_cast<unsigned>(sr_tiles(p) * p.splits)), cfg.blockDim = dim3(kSrThreads);
    cfg.dynamicSmemBytes = static_cast<size_t>(smem), cfg.attrs = &attr, cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, reinterpret_cast<const void*>(K), &cfg) != cudaSuccess) {
      (void)cudaGetLastError();  // (a cluster size the GPU refuses: none of it fits)
      n = 0;
    }
    h = n + 1;
  }
  return h - 1 >= sr_tiles(p);
}

// A cluster plan the GPU cannot hold at once takes fewer, longer slices (whole stages each) until
// its clusters fit; none fits (or one slice is left): the plan's slices hand over through global
// memory. Noted once an instance on stderr, since the printed plan cannot know the GPC layout.
template <auto K, class P>
inline P sr_fitting_plan(const P& p, int smem) {
  P q = p;
  const int chunks = (p.K + kSrChunk - 1) / kSrChunk;
  while (q.splits > 1 && !sr_clusters_fit<K>(q, smem)) {
    const int per = (chunks + q.splits - 2) / (q.splits - 1);  // at most splits - 1 slices, whole stages
    q.splits = (chunks + per - 1) / per;
    q.kchunk = per * kSrChunk;
  }
  static bool noted = false;
  if (q.splits != p.splits && !noted) {
    noted = true;
    if (q.splits > 1)
      std::fprintf(stderr, "note: GEMM step 8 (%d x %d x %d): %d clusters of %d slices do not fit this GPU at once; %d slices a tile\n",
                   p.M, p.N, p.K, sr_tiles(p), p.splits, q.splits);
    else
      std::fprintf(stderr, "note: GEMM step 8 (%d x %d x %d): no cluster of its slices fits this GPU; they hand over through global memory\n",
                   p.M, p.N, p.K);
  }
  if (q.splits < 2 && !SrClusterTail<typename std::decay<decltype(p.epi)>::type>::value) {
    q = p;
    q.cluster = false;  // (a cluster tail keeps its cluster of one slice)
  }
  return q;
}

// Above 48 KB a kernel must ask for its shared memory: the staged instance, once.
template <class Tag, class P>
inline void sr_staged_smem_attr() {
  static bool attr_set = false;
  if (!attr_set) {
    CUDA_CHECK(cudaFuncSetAttribute(gemm_stream_rows_staged_kernel<Tag, P>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    kSrStSmem));
    attr_set = true;
  }
}

// The plan launch_stream_rows launches for p: p, or where p's clusters do not all fit the GPU at
// once, sr_fitting_plan's (phase 5 records it; the tests compare it with the global hand-over of
// the same slices).
template <class Tag, class P>
inline P stream_rows_launched(const P& p) {
  if constexpr (!StreamRowsViews<P>::value) {
    return p;
  } else {
    if (!p.cluster) return p;
    if constexpr (SrNarrowViews<P>::value) {
      if (sr_narrow(p)) return sr_fitting_plan<&gemm_stream_rows_narrow_kernel<Tag, P>>(p, 0);
    }
    if (p.rung == GemmRung::F16StreamStaged) {
      sr_staged_smem_attr<Tag, P>();
      return sr_fitting_plan<&gemm_stream_rows_staged_kernel<Tag, P>>(p, kSrStSmem);
    }
    return sr_fitting_plan<&gemm_stream_rows_kernel<Tag, P>>(p, 0);
  }
}

template <class Tag, class P>
inline void launch_stream_rows(const P& p, cudaStream_t st, bool pdl) {
  if constexpr (StreamRowsViews<P>::value) {
    if constexpr (SrNarrowViews<P>::value) {
      if (sr_narrow(p)) {
        const P q = stream_rows_launched<Tag>(p);
        launch_kernel(gemm_stream_rows_narrow_kernel<Tag, P>, q.splits, kSrThreads, 0, st,
                      LaunchOpts{pdl, nullptr, q.cluster ? static_cast<unsigned>(q.splits) : 0u}, q);
        return;
      }
    }
    const P q = stream_rows_launched<Tag>(p);
    const LaunchOpts o{pdl, nullptr, q.cluster ? static_cast<unsigned>(q.splits) : 0u};
    if (q.rung == GemmRung::F16StreamStaged) {
      sr_staged_smem_attr<Tag, P>();
      launch_kernel(gemm_stream_rows_staged_kernel<Tag, P>, sr_tiles(q) * q.splits, kSrThreads, kSrStSmem, st, o, q);
      return;
    }
    launch_kernel(gemm_stream_rows_kernel<Tag, P>, sr_tiles(q) * q.splits, kSrThreads, 0, st, o, q);
  } else {
    throw Error(kExitInternal, "GEMM step 8 planned for a product it cannot take (internal error)");
  }
}

}  // namespace mlp
}  // namespace nb
