// common/mlp/gemm/1_register_loop.cuh — the GEMM ladder, step 1: the register-staged mainloop.
// One k-tile of A and B in registers while the previous one is multiplied from shared memory, and
// the two accumulators it feeds: fp32 SIMT (a 2x4 micro-tile per thread) and fp16 WMMA (two 16x16
// fragments per warp) — the same loop, the precision chosen by the operand type.
#pragma once
#include <cuda_fp16.h>
#include <mma.h>

#include "mlp/gemm/0_problem.cuh"

namespace nb {
namespace mlp {

// ------------------------------------------------------------------ the mainloop
template <class T>
struct Regs {  // one k-tile of A and B in registers, V elements per chunk
  static constexpr int kBK = TileCfg<T>::kBK, V = TileCfg<T>::kV, NT = TileCfg<T>::kThreads;
  static constexpr int kA = kBM * kBK / V / NT, kB = kBK * kBN / V / NT;
  T a[kA][V];
  T b[kB][V];
};

template <class T, class AV>
__device__ __forceinline__ void load_a_regs(const AV& a, int m0, int k0, int M, int kend, Regs<T>& rg) {
  constexpr int V = TileCfg<T>::kV, NT = TileCfg<T>::kThreads, BK = TileCfg<T>::kBK;
#pragma unroll
  for (int i = 0; i < Regs<T>::kA; ++i) {
    const int c = threadIdx.x + i * NT;
    if (AV::kContig) {  // chunks along k: row m, k .. k+V-1
      const int r = c / (BK / V), kk = (c % (BK / V)) * V;
      a.template load<V>(m0 + r, k0 + kk, M, kend, rg.a[i]);
    } else {            // chunks along m: column k, m .. m+V-1
      const int kk = c / (kBM / V), r = (c % (kBM / V)) * V;
      a.template load<V>(m0 + r, k0 + kk, M, kend, rg.a[i]);
    }
  }
}

template <class T, class BV>
__device__ __forceinline__ void load_b_regs(const BV& b, int n0, int k0, int N, int kend, Regs<T>& rg) {
  constexpr int V = TileCfg<T>::kV, NT = TileCfg<T>::kThreads, BK = TileCfg<T>::kBK;
#pragma unroll
  for (int i = 0; i < Regs<T>::kB; ++i) {
    const int c = threadIdx.x + i * NT;
    if (BV::kContig) {  // chunks along n: row k, n .. n+V-1
      const int kk = c / (kBN / V), nn = (c % (kBN / V)) * V;
      b.template load<V>(k0 + kk, n0 + nn, kend, N, rg.b[i]);
    } else {            // chunks along k: column n, k .. k+V-1
      const int nn = c / (BK / V), kk = (c % (BK / V)) * V;
      b.template load<V>(k0 + kk, n0 + nn, kend, N, rg.b[i]);
    }
  }
}

// Writes the register chunks into shared memory in the layout of TileCfg<T>.
template <class T, bool kAContig, bool kBContig>
__device__ __forceinline__ void store_regs(T* as, T* bs, const Regs<T>& rg) {
  using C = TileCfg<T>;
  constexpr int V = C::kV, NT = C::kThreads, BK = C::kBK;
  constexpr bool kSimt = std::is_same<T, float>::value;
#pragma unroll
  for (int i = 0; i < Regs<T>::kA; ++i) {
    const int c = threadIdx.x + i * NT;
    int r, kk;
    if (kAContig) r = c / (BK / V), kk = (c % (BK / V)) * V;
    else kk = c / (kBM / V), r = (c % (kBM / V)) * V;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int rr = kAContig ? r : r + j, kj = kAContig ? kk + j : kk;
      if (kSimt) as[kj * C::kLdA + rr] = rg.a[i][j];
      else as[rr * C::kLdA + kj] = rg.a[i][j];
    }
  }
#pragma unroll
  for (int i = 0; i < Regs<T>::kB; ++i) {
    const int c = threadIdx.x + i * NT;
    int kk, nn;
    if (kBContig) kk = c / (kBN / V), nn = (c % (kBN / V)) * V;
    else nn = c / (BK / V), kk = (c % (BK / V)) * V;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int kj = kBContig ? kk : kk + j, nj = kBContig ? nn + j : nn;
      bs[kj * C::kLdB + nj] = rg.b[i][j];
    }
  }
}

// Accumulators of one block tile: SIMT (2x4 per thread) or WMMA (two 16x16 fragments per warp).
template <class T>
struct Accum;
template <>
struct Accum<float> {
  float v[2][4];
  __device__ Accum() {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) v[i][j] = 0.f;
  }
  // Thread (ty, tx) = (tid / 16, tid % 16) owns rows 2ty, 2ty+1 and columns tx + 16j.
  __device__ __forceinline__ void mma(const float* as, const float* bs) {
    using C = TileCfg<float>;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll 8
    for (int kk = 0; kk < C::kBK; ++kk) {
      const float2 a = *reinterpret_cast<const float2*>(&as[kk * C::kLdA + ty * 2]);
      float b[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = bs[kk * C::kLdB + tx + 16 * j];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[0][j] = fmaf(a.x, b[j], v[0][j]);
        v[1][j] = fmaf(a.y, b[j], v[1][j]);
      }
    }
  }
  // The 32 x 64 tile into c (row stride ld): the shared tile, or the output itself.
  __device__ __forceinline__ void store(float* c, int ld) const {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) c[static_cast<size_t>(ty * 2 + i) * ld + tx + 16 * j] = v[i][j];
  }
};
template <>
struct Accum<__half> {
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> f[2];
  __device__ Accum() {
    nvcuda::wmma::fill_fragment(f[0], 0.f);
    nvcuda::wmma::fill_fragment(f[1], 0.f);
  }
  // Warp w = (wm, wn) = (w / 2, w % 2) owns rows 16wm..16wm+15 and columns 32wn..32wn+31.
  __device__ __forceinline__ void mma(const __half* as, const __half* bs) {
    using C = TileCfg<__half>;
    const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
#pragma unroll
    for (int kk = 0; kk < C::kBK; kk += 16) {
      nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> a;
      nvcuda::wmma::load_matrix_sync(a, as + (wm * 16) * C::kLdA + kk, C::kLdA);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __half, nvcuda::wmma::row_major> b;
        nvcuda::wmma::load_matrix_sync(b, bs + kk * C::kLdB + wn * 32 + j * 16, C::kLdB);
        nvcuda::wmma::mma_sync(f[j], a, b, f[j]);
      }
    }
  }
  // The 32 x 64 tile into c (row stride ld, a multiple of 4; c 32-byte aligned).
  __device__ __forceinline__ void store(float* c, int ld) const {
    const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
#pragma unroll
    for (int j = 0; j < 2; ++j)
      nvcuda::wmma::store_matrix_sync(c + static_cast<size_t>(wm * 16) * ld + wn * 32 + j * 16, f[j], ld,
                                      nvcuda::wmma::mem_row_major);
  }
};

// The register-staged loop: the loads of k-tile t+1 are in flight while tile t is multiplied.
template <class T, class P>
__device__ __forceinline__ void mainloop_regs(const P& p, int m0, int n0, int kbeg, int kend, int ntiles,
                                              Accum<T>& acc, GemmSmem<T>& sm) {
  constexpr int BK = TileCfg<T>::kBK;
  Regs<T> rg;
  pdl_wait();  // (PDL: everything this loop reads may come from the kernel just before)
  pdl_launch_dependents();
  // The epilogue's prefetch runs while the first k-tile's loads are in flight (its own loads and
  // any arithmetic it does overlap their latency).
  if (ntiles > 0) {
    load_a_regs<T>(p.a, m0, kbeg, p.M, kend, rg);
    load_b_regs<T>(p.b, n0, kbeg, p.N, kend, rg);
  }
  p.epi.prefetch(m0, n0, p.M, p.N);
  if (ntiles > 0) {
    store_regs<T, P::AView::kContig, P::BView::kContig>(sm.stage.a[0], sm.stage.b[0], rg);
    __syncthreads();
  }
  for (int t = 0; t < ntiles; ++t) {
    const int cur = t & 1;
    if (t + 1 < ntiles) {
      const int k0 = kbeg + (t + 1) * BK;
      load_a_regs<T>(p.a, m0, k0, p.M, kend, rg);
      load_b_regs<T>(p.b, n0, k0, p.N, kend, rg);
    }
    acc.mma(sm.stage.a[cur], sm.stage.b[cur]);
    if (t + 1 < ntiles) store_regs<T, P::AView::kContig, P::BView::kContig>(sm.stage.a[cur ^ 1], sm.stage.b[cur ^ 1], rg);
    __syncthreads();
  }
}

}  // namespace mlp
}  // namespace nb
