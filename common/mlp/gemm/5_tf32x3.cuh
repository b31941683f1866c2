// common/mlp/gemm/5_tf32x3.cuh — the GEMM ladder, step 5: fp32-accurate products on tensor cores.
//
// Adds: a 64 x 64 block tile whose 8 warps each own a 32 x 16 warp tile of mma.sync m16n8k8 TF32
// tiles, with every fp32 operand split into a TF32 high part and a TF32 remainder
// (x = hi + lo, hi = x rounded to TF32, lo = (x - hi) rounded to TF32) and three products summed in
// fp32: lo·hi + hi·lo + hi·hi (lo·lo, about 2^-22 of the product, is dropped). One TF32 product
// keeps 11 significant bits of each operand; the pair keeps about 22, close to fp32's 24, so the
// sums stay inside the fp32 tolerance against float64 while the multiplies run on tensor cores.
// The one design decision: keep every epilogue of steps 0-4 unchanged. The 64 x 64 result tile is
// written to shared memory as two 32 x 64 sub-tiles in the layout those epilogues read (row stride
// kLdc), and each sub-tile goes through the split-K fix-up and the epilogue exactly as a block of
// the 32 x 64 kernel would (same workspace slots and counters, indexed by the 32 x 64 tile).
// Prediction, before measuring (H200, W1 at batch 8,192): the two big products (8,192 x 128 x 784
// forward, 128 x 784 x 8,192 weight gradient, 1.64 GFLOP each) cost 4.9 GFLOP of TF32 work each
// here; at half of the dense TF32 peak that mma.sync reaches (about 250 TFLOP/s) that is about
// 20 us each, against 202 and 273 us for the 32 x 64 SIMT tile.
// Measured: see profiles/<device>/phase5_batched__gemm-b<B>.json (scripts/bench_gemm.sh).
#pragma once
#include <cstdint>

#include "mlp/gemm/4_kernels.cuh"

namespace nb {
namespace mlp {

constexpr int kXBM = 64, kXBN = kBN, kXBK = 32;  // block tile (kXBN = the epilogues' kBN), k-tile
constexpr int kXThreads = 256;                   // 8 warps, 2 (m) x 4 (n), each a 32 x 16 warp tile
constexpr int kXLdK = kXBK + 4;                  // [row][k] operand layout: 36 floats a row
constexpr int kXLdR = kXBM + 8;                  // [k][row] operand layout: 72 floats a row
constexpr int kXOpElems = kXBM * kXLdK;          // one operand stage, either layout
static_assert(kXBM == kXBN && kXBM * kXLdK == kXBK * kXLdR, "one stage size serves both layouts");
static_assert(kXThreads == TileCfg<float>::kThreads, "the fp32 epilogues assume 256 threads");
// Bank check of the fragment reads: a warp reads element (g, t) for g = lane / 4, t = lane % 4;
// at g * 36 + t (banks 4g + t) or t * 72 + g (banks 8t + g): 32 different banks either way.

struct alignas(128) X3Smem {
  union {
    struct {
      float a[2][kXOpElems];
      float b[2][kXOpElems];
    } stage;
    float c[kXBM / kBM][kBM * kLdc];  // the result as two 32 x 64 sub-tiles, as the epilogues read them
  };
};

// A stores its tile the way its memory runs: k-contiguous A as As[m][k], m-contiguous A as As[k][m];
// B alike (n-contiguous Bs[k][n], k-contiguous Bs[n][k]). The stores are then whole float4 chunks.
template <bool kContig>
__device__ __forceinline__ float x3_a(const float* as, int m, int k) {
  return kContig ? as[m * kXLdK + k] : as[k * kXLdR + m];
}
template <bool kContig>
__device__ __forceinline__ float x3_b(const float* bs, int k, int n) {
  return kContig ? bs[k * kXLdR + n] : bs[n * kXLdK + k];
}

// x = hi + lo with both parts TF32 (round to nearest, ties away: cvt.rna). x - hi is exact in fp32.
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
  const float rest = x - __uint_as_float(hi);
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(rest));
}

// d += a · b on one m16n8k8 tile: a (16 x 8, row) in 4 registers, b (8 x 8, col) in 2, d in 4.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The accumulators of one warp tile: 2 (m16) x 2 (n8) mma tiles. kTerms = 3 is the rung; kTerms = 1
// (hi·hi only: plain TF32) exists so that the tests can show a one-term product fails the fp32
// tolerance they hold the rung to.
template <int kTerms = 3>
struct AccumX3 {
  float d[2][2][4];
  __device__ AccumX3() {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[i][j][e] = 0.f;
  }
  // Warp w owns rows 32 (w / 4) .. +31 and columns 16 (w % 4) .. +15 of the block tile. Fragment
  // ownership (PTX ISA, mma.m16n8k8 .tf32): lane = 4g + t holds A (g, t), (g+8, t), (g, t+4),
  // (g+8, t+4); B (t, g), (t+4, g); C (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
  template <bool kAContig, bool kBContig>
  __device__ __forceinline__ void mma(const float* as, const float* bs) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int wm = (warp / 4) * 32, wn = (warp % 4) * 16;
#pragma unroll
    for (int kk = 0; kk < kXBK; kk += 8) {
      uint32_t bh[2][2], bl[2][2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int n = wn + j * 8 + g;
        split_tf32(x3_b<kBContig>(bs, kk + t, n), bh[j][0], bl[j][0]);
        split_tf32(x3_b<kBContig>(bs, kk + t + 4, n), bh[j][1], bl[j][1]);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int m = wm + i * 16 + g;
        uint32_t ah[4], al[4];
        split_tf32(x3_a<kAContig>(as, m, kk + t), ah[0], al[0]);
        split_tf32(x3_a<kAContig>(as, m + 8, kk + t), ah[1], al[1]);
        split_tf32(x3_a<kAContig>(as, m, kk + t + 4), ah[2], al[2]);
        split_tf32(x3_a<kAContig>(as, m + 8, kk + t + 4), ah[3], al[3]);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          if (kTerms == 3) {  // the small terms first
            mma_tf32(d[i][j], al, bh[j]);
            mma_tf32(d[i][j], ah, bl[j]);
          }
          mma_tf32(d[i][j], ah, bh[j]);
        }
      }
    }
  }
  // Into the two 32 x 64 sub-tiles: warp rows 32 (w / 4) .. are exactly sub-tile w / 4.
  __device__ __forceinline__ void store(X3Smem& sm) const {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    float* c = sm.c[warp / 4];
    const int wn = (warp % 4) * 16;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int r = i * 16 + g, col = wn + j * 8 + 2 * t;
        *reinterpret_cast<float2*>(&c[r * kLdc + col]) = make_float2(d[i][j][0], d[i][j][1]);
        *reinterpret_cast<float2*>(&c[(r + 8) * kLdc + col]) = make_float2(d[i][j][2], d[i][j][3]);
      }
  }
};

// One k-tile of A (64 x 32) and B (32 x 64) in registers: two float4 chunks of each a thread.
struct X3Regs {
  float a[2][4];
  float b[2][4];
};

template <class P>
__device__ __forceinline__ void x3_load(const P& p, int m0, int n0, int k0, int kend, X3Regs& rg) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = threadIdx.x + i * kXThreads;
    if (P::AView::kContig) p.a.template load<4>(m0 + c / 8, k0 + (c % 8) * 4, p.M, kend, rg.a[i]);
    else p.a.template load<4>(m0 + (c % 16) * 4, k0 + c / 16, p.M, kend, rg.a[i]);
    if (P::BView::kContig) p.b.template load<4>(k0 + c / 16, n0 + (c % 16) * 4, kend, p.N, rg.b[i]);
    else p.b.template load<4>(k0 + (c % 8) * 4, n0 + c / 8, kend, p.N, rg.b[i]);
  }
}
template <class P>
__device__ __forceinline__ void x3_store(float* as, float* bs, const X3Regs& rg) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = threadIdx.x + i * kXThreads;
    const float4 va = make_float4(rg.a[i][0], rg.a[i][1], rg.a[i][2], rg.a[i][3]);
    const float4 vb = make_float4(rg.b[i][0], rg.b[i][1], rg.b[i][2], rg.b[i][3]);
    if (P::AView::kContig) *reinterpret_cast<float4*>(&as[(c / 8) * kXLdK + (c % 8) * 4]) = va;
    else *reinterpret_cast<float4*>(&as[(c / 16) * kXLdR + (c % 16) * 4]) = va;
    if (P::BView::kContig) *reinterpret_cast<float4*>(&bs[(c / 16) * kXLdR + (c % 16) * 4]) = vb;
    else *reinterpret_cast<float4*>(&bs[(c / 8) * kXLdK + (c % 8) * 4]) = vb;
  }
}

// Output tiles of 64 x 64 (the split-K slots and counters stay those of the 32 x 64 tiles).
template <class P>
__host__ __device__ inline int x3_tiles(const P& p) {
  return ((p.M + kXBM - 1) / kXBM) * p.tiles_n();
}

// One (64 x 64 tile, split): the register-staged loop of step 1 at this tile size, then per 32-row
// sub-tile the fix-up and the epilogue.
template <class Tag, class P, int kTerms>
__global__ void __launch_bounds__(kXThreads, 2) gemm_tf32x3_kernel(P p) {
  extern __shared__ __align__(128) unsigned char gemm_dyn[];
  X3Smem& sm = *reinterpret_cast<X3Smem*>(gemm_dyn);
  const int xt = x3_tiles(p);
  const int split = blockIdx.x / xt, tile = blockIdx.x % xt;
  const int bn = tile % p.tiles_n(), bm = tile / p.tiles_n();
  const int m0 = bm * kXBM, n0 = bn * kXBN;
  const int kbeg = split * p.kchunk, kend = min(p.K, kbeg + p.kchunk);
  const int ntiles = kend > kbeg ? (kend - kbeg + kXBK - 1) / kXBK : 0;

  AccumX3<kTerms> acc;
  X3Regs rg;
  pdl_wait();
  pdl_launch_dependents();
  if (ntiles > 0) x3_load(p, m0, n0, kbeg, kend, rg);
  p.epi.prefetch(m0, n0, p.M, p.N);  // sub-tile 0's; under the first loads
  if (ntiles > 0) {
    x3_store<P>(sm.stage.a[0], sm.stage.b[0], rg);
    __syncthreads();
  }
  for (int t = 0; t < ntiles; ++t) {
    const int cur = t & 1;
    if (t + 1 < ntiles) x3_load(p, m0, n0, kbeg + (t + 1) * kXBK, kend, rg);
    acc.template mma<P::AView::kContig, P::BView::kContig>(sm.stage.a[cur], sm.stage.b[cur]);
    if (t + 1 < ntiles) x3_store<P>(sm.stage.a[cur ^ 1], sm.stage.b[cur ^ 1], rg);
    __syncthreads();
  }
  acc.store(sm);
  __syncthreads();

  using Epi = typename std::decay<decltype(p.epi)>::type;
#pragma unroll 1
  for (int s = 0; s < kXBM / kBM; ++s) {
    const int ms = m0 + s * kBM;
    if (ms >= p.M) break;  // the same for every block of this tile row: fix-ups stay matched
    if (s > 0) {
      __syncthreads();  // the previous sub-tile's epilogue is done with the per-block scratch
      p.epi.prefetch(ms, n0, p.M, p.N);
      __syncthreads();
    }
    if (p.splits > 1 &&
        !splitk_fixup<kXThreads, VecFixup<Epi>::value>(sm.c[s], p.ws, p.counters, (ms / kBM) * p.tiles_n() + bn, split,
                                                       p.splits))
      continue;
    p.epi(sm.c[s], ms, n0, p.M, p.N);
  }
}

// Picks the split count for this rung: about two blocks an SM (2 fit: 36 KB of shared memory and at
// most 128 registers a thread), at least four k-tiles a slice, at most 16 slices.
template <class P>
inline void plan_tf32x3(P& p, int sm_count) {
  p.rung = GemmRung::TF32x3;
  const int ktiles = (p.K + kXBK - 1) / kXBK;
  const int tiles = x3_tiles(p), want = 2 * sm_count;
  int s = 1;
  if (tiles < want && ktiles >= 8) {
    s = (want + tiles - 1) / tiles;
    s = s < 16 ? s : 16;
    s = s < ktiles / 4 ? s : ktiles / 4;
  }
  const int per = ktiles > 0 ? (ktiles + s - 1) / s : 1;
  p.splits = ktiles > 0 ? (ktiles + per - 1) / per : 1;
  p.kchunk = per * kXBK;
}

template <class Tag, class P, int kTerms>
inline void launch_tf32x3(const P& p, cudaStream_t st, bool pdl) {
  launch_kernel(gemm_tf32x3_kernel<Tag, P, kTerms>, x3_tiles(p) * p.splits, kXThreads, sizeof(X3Smem), st, pdl, p);
}

}  // namespace mlp
}  // namespace nb
