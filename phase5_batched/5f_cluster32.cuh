// phase5_batched/5f_cluster32.cuh — rung 5f, `--launch cluster32`: a whole epoch of W1's fp32 MLP (784-H1-H2-C,
// Adam, dropout) in ONE 16-block thread-block cluster, the first layer and its weight gradient on tensor cores.
// BUILDS ON 5e (W1's rung; a step is a chain of latencies) and 5d (the model in one cluster's shared memory).
// WHAT IT ADDS: W1 on 16 SMs, 8 first-layer and 4 second-layer units a block (5f_cluster32_layout.cuh), and
//   * h1 and h2 travel by st.async into every block's shared memory, each completing its bytes on the
//     receiver's mbarrier: a block waits for its data, not for a barrier every block must reach;
//   * the first layer (32 x 8 outputs over 784 pixels) and W1's gradient (784 x 8 over 32 rows) are
//     m16n8k8 TF32 MMAs. The pixels are bytes, exact in TF32, so W (or dz1) split into a TF32 high
//     part and the rounded rest gives fp32-level sums in two products ("3xTF32" less its third term);
//   * no exchange in the backward pass: every block repeats the last layer and all of dz2 (10 x 64)
//     and keeps a column copy of W2 for its own units, updated from the same numbers as the owner's
//     rows (bit-identical: the GPU tests count mismatches); the small layers' updates run in the waits;
//   * Adam with explicit roundings and the hardware's approximate root and reciprocal (RoundedOpt).
// THE DESIGN DECISION: spend SMs to buy latency: two exchanges a step and block-local phases made
// short by tensor cores, at the price of 8x the arithmetic (and instructions) on each SM.
// MEASURED (H100, bench_mlp.sh at a7140e0): 26.44 ms an epoch, 14.1 us a step (phase5_batched__w1-cluster32.json),
// 1.41x SLOWER than 5e in the same run: issue-bound on 16 SMs (the phase notes hold the breakdown and ncu).
#pragma once
#include <cooperative_groups.h>
#include <cuda/ptx>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "check.cuh"
#include "cluster_launch.cuh"
#include "errors.h"
#include "mlp/kernels.cuh"
#include "mlp/mlp_common.h"
#include "onchip_segment_clock.cuh"
#include "5f_cluster32.h"
#include "5f_cluster32_layout.cuh"
#include "onchip_cluster.cuh"
#include "onchip_optimizer.cuh"
#include "onchip_pixels.cuh"
#include "onchip_softmax_loss.cuh"

namespace nb {
namespace mlp {

namespace c32 {

namespace cg = cooperative_groups;

// ---- tensor-core helpers: m16n8k8 TF32 products with fp32 sums, and the split of an fp32 operand
// into two TF32 parts (hi*b + lo*b is within ~2^-21 of x*b), are the GEMM ladder's step 5
// (split_tf32, mma_tf32: common/mlp/gemm/5_tf32x3.cuh).
// Byte i of w as the bits of an exact float (byte_value, onchip_pixels.cuh): a valid TF32 operand.
__device__ __forceinline__ uint32_t byte_tf32(uint32_t w, int i) { return __float_as_uint(byte_value(w, i)); }

// ---- the exchanges: a block's mbarrier for an activation buffer (h1 or h2, by step parity) completes
// a phase when its own thread 0 has armed it with the bytes the step brings (one arrival) and every
// producer's st.async has landed (each completes its bytes on the receiver's mbarrier): a receiver
// waits for the data it needs, not for every block of the cluster to arrive somewhere, and no fence
// is needed (a release arrive at a cluster barrier costs a MEMBAR a warp: phase notes).
__device__ __forceinline__ void arm(uint64_t* bar, uint32_t bytes) {
  (void)cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared, bar, bytes);
}
__device__ __forceinline__ void wait_phase(uint64_t* bar, uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(cuda::ptx::sem_acquire, cuda::ptx::scope_cluster, bar, parity)) {
  }
}

// Sum over the batch rows of a[b * lda], in row order.
__device__ __forceinline__ float sum_rows(const float* a, int lda, int B) {
  float g = 0.f;
#pragma unroll 8
  for (int b = 0; b < B; ++b) g = __fadd_rn(g, a[b * lda]);
  return g;
}

// ------------------------------------------------------------------ the kernel, stage by stage
// The shape: from the parameters, or W1's constants (kW1).
template <bool kW1>
struct C32Shape {
  const C32Dims d;
  const C32Layout L;
  __device__ __forceinline__ C32Shape(const PersistParams& p, int NB, int Bp, bool adam)
      : d(c32_dims(p.B, p.D, p.H1, p.H2, p.C, NB, Bp)), L(c32_layout(d, adam, false)) {}
};
template <>
struct C32Shape<true> {
  C32DimsW1 d;    // empty: every member a constant
  C32LayoutW1 L;  // (the offsets do not depend on the optimizer; only the total does)
  __device__ __forceinline__ C32Shape(const PersistParams&, int, int, bool) {}
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// One block of the cluster as one of its threads sees it. MT: the batch's 16-row tiles (2 or 4).
template <int MT, bool kW1>
struct C32Block : C32Shape<kW1> {
  using C32Shape<kW1>::d;
  using C32Shape<kW1>::L;
  static constexpr int nt = kC32Threads, nw = nt / 32, U = kC32Units;
  static constexpr int Bp = 16 * MT, KC = nw / MT;  // the first layer's warps: MT row tiles x KC slices of K
  static constexpr int KS = Bp / 8;                               // the gradient's k-steps (batch rows)
  static constexpr int kChunks = (Bp * 1024 / 16 + nt - 1) / nt;  // the next batch's 16-byte chunks a thread (D <= 1024)
  static constexpr bool kX2 = kW1;  // the next batch by cp.async into a second buffer (else in registers)
  const PersistParams& p;
  cg::cluster_group cluster;
  const int r, tid, lane, wid;
  int c0, own1, j0, own2;  // own units: first layer c0 .. c0 + own1, second layer j0 .. j0 + own2
  bool keep_grads;
  unsigned char* const base;
  const size_t total;  // the shared memory in use (with or without Adam's state)

  __device__ __forceinline__ C32Block(const PersistParams& params, unsigned char* sm)
      : C32Shape<kW1>(params, static_cast<int>(cg::this_cluster().num_blocks()), 16 * MT, params.adam && params.adam_m != nullptr),
        p(params),
        cluster(cg::this_cluster()), r(static_cast<int>(cluster.block_rank())), tid(threadIdx.x), lane(tid & 31),
        wid(tid >> 5), base(sm),
        total(params.adam && params.adam_m != nullptr ? L.total_adam : L.total_sgd) {
    // (W1's split gives every block U1 and U2 units: constants in its instance)
    c0 = r * d.U1, own1 = kW1 ? d.U1 : max(0, min(d.U1, d.H1 - c0));
    j0 = r * d.U2, own2 = kW1 ? d.U2 : max(0, min(d.U2, d.H2 - j0));
    keep_grads = p.grads_out != nullptr;
  }
  __device__ __forceinline__ float* F(size_t off) const { return reinterpret_cast<float*>(base + off); }
  __device__ __forceinline__ uint64_t* bar(int k) const { return reinterpret_cast<uint64_t*>(base + L.bars) + k; }  // h1: 0, 1; h2: 2, 3
  __device__ __forceinline__ bool adam() const { return p.adam && p.adam_m != nullptr; }

  // ---- zero everything (pads stay 0 for the whole launch), then load what this block holds
  __device__ __forceinline__ void zero_and_load() {
    for (size_t o = static_cast<size_t>(tid) * 16; o < total; o += 16 * nt)
      *reinterpret_cast<uint4*>(base + o) = make_uint4(0, 0, 0, 0);
    __syncthreads();
    if (tid == 0) {
      for (int k = 0; k < 4; ++k) cuda::ptx::mbarrier_init(bar(k), 1);
      cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);  // before the cluster sync
    }
    move_state<true>();
  }

  // One tensor and its Adam state between global memory (p.params, p.adam_m, p.adam_v at index g of
  // element e) and shared memory (w, m, v at index sh): loaded (kLoad) or written back; a: with the
  // Adam state. at(e) gives {g, sh}.
  template <bool kLoad, class At>
  __device__ __forceinline__ void move(bool a, int n, size_t w, size_t m, size_t v, At at) const {
    for (int e = tid; e < n; e += nt) {
      const auto [g, sh] = at(e);
      if constexpr (kLoad) {
        F(w)[sh] = p.params[g];
        if (a) F(m)[sh] = p.adam_m[g], F(v)[sh] = p.adam_v[g];
      } else {
        p.params[g] = F(w)[sh];
        if (a) p.adam_m[g] = F(m)[sh], p.adam_v[g] = F(v)[sh];
      }
    }
  }
  struct At {
    size_t g;
    int sh;
  };
  // What this block holds, loaded before the first step (kLoad) or written back after the last: its
  // W1 and W2 rows, b1 and b2 of its units; the W2 column copy (loaded only: the owners' rows are
  // written); W3 and b3 (every block loads the replica, block 0 writes it back).
  template <bool kLoad>
  __device__ __forceinline__ void move_state() {
    const bool a = adam();
    move<kLoad>(a, own1 * d.D, L.w1, L.m1, L.v1, [&](int e) {
      const int u = e / d.D, k = e - u * d.D;
      return At{p.w0 + static_cast<size_t>(c0 + u) * d.D + k, u * d.ldw + k};
    });
    move<kLoad>(a, own1, L.b1, L.mb1, L.vb1, [&](int u) { return At{p.b0 + c0 + u, u}; });
    move<kLoad>(a, own2 * d.H1, L.w2r, L.m2r, L.v2r, [&](int e) {
      const int j = e / d.H1, k = e - j * d.H1;
      return At{p.w1 + static_cast<size_t>(j0 + j) * d.H1 + k, j * d.ld1 + k};
    });
    move<kLoad>(a, own2, L.b2, L.mb2, L.vb2, [&](int j) { return At{p.b1 + j0 + j, j}; });
    if constexpr (kLoad)  // the column copy: W2[j][c0 + c] at w2c[j * U + c]
      move<kLoad>(a, d.H2 * own1, L.w2c, L.m2c, L.v2c, [&](int e) {
        const int j = e / own1, c = e - j * own1;
        return At{p.w1 + static_cast<size_t>(j) * d.H1 + c0 + c, j * U + c};
      });
    if (kLoad || r == 0) {
      move<kLoad>(a, d.C * d.H2, L.w3, L.m3, L.v3, [&](int e) {
        const int c = e / d.H2, k = e - c * d.H2;
        return At{p.w2 + e, c * d.ld3 + k};
      });
      move<kLoad>(a, d.C, L.b3, L.mb3, L.vb3, [&](int c) { return At{p.b2 + c, c}; });
    }
  }

  // Adam's constants of global step s into slot `slot` of shared memory (one thread, inside a wait;
  // read after the next block barrier by opt(slot), so no phase waits for the global load)
  __device__ __forceinline__ void stage_hyper(int64_t s, int slot) const {
    AdamHyper h{};
    if (adam()) h = (p.hyper != nullptr && s + 1 < p.hyper_n) ? p.hyper[s + 1] : adam_hyper(p.lr, s + 1);
    float* w = F(L.hyp) + 8 * slot;
    w[0] = h.omb1, w[1] = h.b2, w[2] = h.omb2, w[3] = h.eps, w[4] = h.step_size, w[5] = h.bc2_sqrt;
    w[6] = adam() ? 1.f / h.bc2_sqrt : 1.f;
  }
  __device__ __forceinline__ RoundedOpt opt(int slot) const {
    RoundedOpt o;
    o.adam = adam(), o.lr = p.lr;
    const float* w = F(L.hyp) + 8 * slot;
    o.h.omb1 = w[0], o.h.b2 = w[1], o.h.omb2 = w[2], o.h.eps = w[3], o.h.step_size = w[4], o.h.bc2_sqrt = w[5];
    o.inv_bc2 = w[6];
    return o;
  }
  __device__ __forceinline__ unsigned char* xbuf(int par) const { return base + (kX2 && par ? L.x2 : L.x); }
  __device__ __forceinline__ int* labels(int par) const { return reinterpret_cast<int*>(base + L.lab) + par * Bp; }

  // ---- the batch. W1's instance (kX2): the image indices of batch i early in the step before
  // (fetch_indices), the images by cp.async into the other buffer inside the first wait
  // (copy_batch), waited for at the step's end. The others: bytes into registers early in the step
  // before (fetch_batch), into the one buffer at its end (store_batch).
  __device__ __forceinline__ void fetch_indices(int i, int (&img)[kChunks], int& nlab) const {
    const int cpr = d.D / 16, n = d.B * cpr;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int q = tid + j * nt;
      if (q < n) img[j] = __ldg(p.perm + static_cast<size_t>(i) * d.B + q / cpr);
    }
    if (tid < d.B) nlab = __ldg(p.labels + __ldg(p.perm + static_cast<size_t>(i) * d.B + tid));
  }
  __device__ __forceinline__ void copy_batch(const int (&img)[kChunks], int nlab, int par) const {
    const int cpr = d.D / 16, n = d.B * cpr;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int q = tid + j * nt;
      if (q < n) {
        const int row = q / cpr, c = q - row * cpr;
        __pipeline_memcpy_async(xbuf(par) + static_cast<size_t>(row) * d.xs + 16 * c,
                                p.images + static_cast<size_t>(img[j]) * d.D + 16 * c, 16);
      }
    }
    __pipeline_commit();
    if (tid < d.B) labels(par)[tid] = nlab;
  }
  __device__ __forceinline__ void fetch_batch(int i, uint4 (&nx)[kChunks], int& nlab) const {
    const int cpr = d.D / 16, n = d.B * cpr;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int q = tid + j * nt;
      if (q < n) {
        const int row = q / cpr, c = q - row * cpr;
        const int img = __ldg(p.perm + static_cast<size_t>(i) * d.B + row);
        nx[j] = __ldg(reinterpret_cast<const uint4*>(p.images + static_cast<size_t>(img) * d.D) + c);
      }
    }
    if (tid < d.B) nlab = __ldg(p.labels + __ldg(p.perm + static_cast<size_t>(i) * d.B + tid));
  }
  __device__ __forceinline__ void store_batch(const uint4 (&nx)[kChunks], int nlab, int par) const {
    const int cpr = d.D / 16, n = d.B * cpr;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int q = tid + j * nt;
      if (q < n) {
        const int row = q / cpr, c = q - row * cpr;
        *reinterpret_cast<uint4*>(xbuf(par) + static_cast<size_t>(row) * d.xs + 16 * c) = nx[j];
      }
    }
    if (tid < d.B) labels(par)[tid] = nlab;
  }

  // ---- dropout masks of step s (scale or 0; 1 without dropout and for padding units): h1's own
  // units, h2's own units
  __device__ __forceinline__ void mask_h1(int64_t s) const { draw_mask(F(L.mask1), U, own1, c0, d.H1, 0u, s); }
  __device__ __forceinline__ void mask_h2(int64_t s) const { draw_mask(F(L.mask2), d.U2, own2, j0, d.H2, 1u, s); }
  // out[b][u] (n a row) for the units first .. first + own of hidden layer `layer` (width H)
  __device__ __forceinline__ void draw_mask(float* out, int n, int own, int first, int H, uint32_t layer, int64_t s) const {
    for (int e = tid; e < d.B * n; e += nt) {
      const int b = e / n, u = e - b * n;
      float m = 1.f;
      if (p.dropout && u < own)
        m = dropout_bits_dev(p.key, layer, static_cast<uint64_t>(s), static_cast<uint32_t>(b * H + first + u)) >= p.threshold ? p.scale : 0.f;
      out[e] = m;
    }
  }

  // Copies own[b][0 .. n) (row stride ldo) into columns col0 .. col0 + n of buf (row stride ld) in every
  // block of the cluster, as st.async completing on that block's mbarrier `mb`: 16-byte stores where
  // whole float4s line up, 4-byte ones otherwise.
  __device__ __forceinline__ void push(const float* own, int ldo, int n, float* buf, int ld, int col0, uint64_t* mb) {
    if (n % 4 == 0 && ldo % 4 == 0 && col0 % 4 == 0) {
      for_each_push_element(tid, nt, d.NB, d.B, n / 4, [&](int q, int b, int c) {
        const float4 x4 = *reinterpret_cast<const float4*>(own + b * ldo + 4 * c);
        const float x[4] = {x4.x, x4.y, x4.z, x4.w};
        cuda::ptx::st_async(cluster.map_shared_rank(buf + b * ld + col0 + 4 * c, q), x, cluster.map_shared_rank(mb, q));
      });
    } else {
      for_each_push_element(tid, nt, d.NB, d.B, n, [&](int q, int b, int c) {
        cuda::ptx::st_async(cluster.map_shared_rank(buf + b * ld + col0 + c, q), own[b * ldo + c], cluster.map_shared_rank(mb, q));
      });
    }
  }

  // ---- A: first layer, own units. Z[Bp][8] = X[Bp][D] W1own^T on tensor cores: warp (mt, kc) takes
  // the rows of m16 tile mt and the kc-th slice of the pixels. In a group of 16 pixels, lane (g, t)
  // reads one word (4 pixels) of rows g and g + 8 and the float4 of W1's row g at the same 4 pixels:
  // MMA k-step 0 takes pixels 0 and 1 of each lane's 4 (as k = t and t + 4), k-step 1 pixels 2 and 3
  // (the order of K is free; A and B agree on it). The slices' sums go to `part`, then each output is
  // their sum in slice order / 255 + b1, ReLU, dropout -> h1o, sent into every block's h1.
  __device__ __forceinline__ void first_layer(int par) {
    const int mt = wid / KC, kc = wid - mt * KC, g = lane >> 2, t = lane & 3;
    const int q0 = kc * d.ng16 / KC, q1 = (kc + 1) * d.ng16 / KC;
    const uint32_t* x32 = reinterpret_cast<const uint32_t*>(xbuf(par));
    const int xw = d.xs / 4, row = 16 * mt + g;
    const float* w1 = F(L.w1);
    float acc[2][4];  // [hi, lo][fragment]
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[h][e] = 0.f;
    for (int q = q0; q < q1; ++q) {
      const float4 w4 = *reinterpret_cast<const float4*>(w1 + g * d.ldw + 16 * q + 4 * t);
      uint32_t bh[4], bl[4];
      split_tf32(w4.x, bh[0], bl[0]), split_tf32(w4.y, bh[1], bl[1]), split_tf32(w4.z, bh[2], bl[2]), split_tf32(w4.w, bh[3], bl[3]);
      const uint32_t r0 = x32[row * xw + 4 * q + t], r1 = x32[(row + 8) * xw + 4 * q + t];
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        const uint32_t a[4] = {byte_tf32(r0, 2 * ks), byte_tf32(r1, 2 * ks), byte_tf32(r0, 2 * ks + 1), byte_tf32(r1, 2 * ks + 1)};
        mma_tf32(acc[0], a, bh[2 * ks], bh[2 * ks + 1]);
        mma_tf32(acc[1], a, bl[2 * ks], bl[2 * ks + 1]);
      }
    }
    float* part = F(L.part);  // fragment: (row g, cols 2t, 2t+1), (row g + 8, the same cols)
    *reinterpret_cast<float2*>(part + (kc * Bp + row) * U + 2 * t) = make_float2(acc[0][0] + acc[1][0], acc[0][1] + acc[1][1]);
    *reinterpret_cast<float2*>(part + (kc * Bp + row + 8) * U + 2 * t) = make_float2(acc[0][2] + acc[1][2], acc[0][3] + acc[1][3]);
    __syncthreads();
    float* h1o = F(L.h1o);
    for (int e = tid; e < d.B * U; e += nt) {
      const int b = e / U, c = e - b * U;
      float z = 0.f;
#pragma unroll
      for (int k = 0; k < KC; ++k) z += part[(k * Bp + b) * U + c];
      h1o[e] = c < own1 ? fmaxf(z / 255.f + F(L.b1)[c], 0.f) * F(L.mask1)[e] : 0.f;
    }
    __syncthreads();
    push(h1o, U, own1, F(L.h1) + par * Bp * d.ld1, d.ld1, c0, bar(par));
  }

  // ---- B: second layer, own units: four lanes an output, each a quarter of H1 in float4s, added by
  // two shuffles; ReLU, dropout -> h2o, pushed into every block's h2
  __device__ __forceinline__ void second_layer(int par) {
    const float* h1 = F(L.h1) + par * Bp * d.ld1;
    const float* w2r = F(L.w2r);
    float* h2o = F(L.h2o);
    const int n4 = (d.H1 + 3) / 4, total = 4 * d.B * d.U2;
    for (int e0 = tid - lane; e0 < total; e0 += nt) {  // warp-uniform bound: every lane shuffles
      const int e = e0 + lane, o = e >> 2, kq = e & 3;
      const bool on = e < total;
      const int b = on ? o / d.U2 : 0, j = on ? o - b * d.U2 : 0;
      float s = 0.f;
      if (on && j < own2)
        for (int i = kq; i < n4; i += 4) {
          const float4 a = *reinterpret_cast<const float4*>(h1 + b * d.ld1 + 4 * i);
          const float4 w = *reinterpret_cast<const float4*>(w2r + j * d.ld1 + 4 * i);
          s = fmaf(a.x, w.x, s), s = fmaf(a.y, w.y, s), s = fmaf(a.z, w.z, s), s = fmaf(a.w, w.w, s);
        }
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if (on && kq == 0) h2o[o] = j < own2 ? fmaxf(s + F(L.b2)[j], 0.f) * F(L.mask2)[o] : 0.f;
    }
    __syncthreads();
    push(h2o, d.U2, own2, F(L.h2) + par * Bp * d.ld2, d.ld2, j0, bar(2 + par));
  }

  // ---- the deferred updates of the step before (its h1, h2 of parity pp; dz2, dz3 still in shared
  // memory). Window 1 (while h1 travels; the second layer reads W2's rows after it, and no producer can
  // overwrite h1 of parity pp before this block's next h2 has reached it): W2's own rows (a task a
  // column k, every own row in registers), b2, W2's column copy (a task a row j and half the own
  // units). Window 2 (while h2 travels): W3 (a task a hidden unit k and half of the 12 class slots),
  // b3. Every gradient is a sum over the batch rows in row order, one FMA each, so a column-copy
  // element and the owner's row element get the same bits.
  __device__ __forceinline__ void deferred_w2(int pp, const RoundedOpt& o) {
    const float* h1 = F(L.h1) + pp * Bp * d.ld1;
    const float* dz2 = F(L.dz2);
    const bool a = adam();
    float dm = 0.f, dv = 0.f;
    const int JP = (own2 + 1) / 2, nr = d.H1 * JP, nc = d.H2 * (U / 2), nb2 = own2;
    for (int e = tid; e < nr + nc + nb2; e += nt) {  // (W1: 256 + 256 + 4 tasks, two outputs each)
      if (e < nr) {  // W2[j0 + j][k] for own rows j = 2 jp, 2 jp + 1
        const int k = e / JP, jp = e - k * JP;
        float g[2] = {0.f, 0.f};
        for (int b = 0; b < d.B; ++b) {
          const float x = h1[b * d.ld1 + k];
          const float* dr = dz2 + b * d.ld2 + j0 + 2 * jp;  // (past own2: the next units or the pad, unused)
          g[0] = __fmaf_rn(dr[0], x, g[0]), g[1] = __fmaf_rn(dr[1], x, g[1]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int j = 2 * jp + i;
          if (j >= own2) break;
          const int sidx = j * d.ld1 + k;
          if (keep_grads) p.grads_out[p.w1 + static_cast<size_t>(j0 + j) * d.H1 + k] = g[i];
          o.apply(F(L.w2r)[sidx], g[i], a ? F(L.m2r)[sidx] : dm, a ? F(L.v2r)[sidx] : dv);
        }
      } else if (e < nr + nc) {  // W2[j][c0 + c] for own units c = 2 cp, 2 cp + 1
        const int e2 = e - nr, j = e2 / (U / 2), cp = e2 - j * (U / 2);
        if (2 * cp >= own1) continue;
        float g[2] = {0.f, 0.f};
        for (int b = 0; b < d.B; ++b) {
          const float x = dz2[b * d.ld2 + j];
          const float* hr = h1 + b * d.ld1 + c0 + 2 * cp;
          g[0] = __fmaf_rn(x, hr[0], g[0]), g[1] = __fmaf_rn(x, hr[1], g[1]);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int c = 2 * cp + i;
          if (c >= own1) break;
          const int sidx = j * U + c;
          o.apply(F(L.w2c)[sidx], g[i], a ? F(L.m2c)[sidx] : dm, a ? F(L.v2c)[sidx] : dv);
        }
      } else {  // b2
        const int j = e - nr - nc;
        const float g = sum_rows(dz2 + j0 + j, d.ld2, d.B);
        if (keep_grads) p.grads_out[p.b1 + j0 + j] = g;
        o.apply(F(L.b2)[j], g, a ? F(L.mb2)[j] : dm, a ? F(L.vb2)[j] : dv);
      }
    }
  }
  __device__ __forceinline__ void deferred_w3(int pp, const RoundedOpt& o) {
    const float* h2 = F(L.h2) + pp * Bp * d.ld2;
    const float* z3 = F(L.z3);
    const bool a = adam();
    float dm = 0.f, dv = 0.f;
    constexpr int CS = kC32MaxClasses, CH = CS / 2;
    const int nw = 2 * d.H2;
    for (int e = tid; e < nw + d.C; e += nt) {
      if (e < nw) {  // W3[c][k] for the classes c of half hh
        const int k = e >> 1, hh = e & 1;
        if (CH * hh >= d.C) continue;
        float g[CH];
#pragma unroll
        for (int i = 0; i < CH; ++i) g[i] = 0.f;
        for (int b = 0; b < d.B; ++b) {
          const float x = h2[b * d.ld2 + k];
          const float2* zr = reinterpret_cast<const float2*>(z3 + b * CS + CH * hh);
#pragma unroll
          for (int i = 0; i < CH / 2; ++i) {
            const float2 z = zr[i];
            g[2 * i] = __fmaf_rn(z.x, x, g[2 * i]), g[2 * i + 1] = __fmaf_rn(z.y, x, g[2 * i + 1]);
          }
        }
#pragma unroll
        for (int i = 0; i < CH; ++i) {
          const int c = CH * hh + i;
          if (c >= d.C) break;
          const int sidx = c * d.ld3 + k;
          if (keep_grads && r == 0) p.grads_out[p.w2 + static_cast<size_t>(c) * d.H2 + k] = g[i];
          o.apply(F(L.w3)[sidx], g[i], a ? F(L.m3)[sidx] : dm, a ? F(L.v3)[sidx] : dv);
        }
      } else {  // b3
        const int c = e - nw;
        const float g = sum_rows(z3 + c, CS, d.B);
        if (keep_grads && r == 0) p.grads_out[p.b2 + c] = g;
        o.apply(F(L.b3)[c], g, a ? F(L.mb3)[c] : dm, a ? F(L.vb3)[c] : dv);
      }
    }
  }

  // ---- C, in every block: logits (two rows a warp, a class a lane: float4s of h2 and W3's row),
  // softmax cross-entropy, dz3 (kept for W3's update) and the row's loss; dz2 = relu'(dz3 W3) * scale
  // for every hidden unit (lanes over the units, dz3 broadcast by shuffles). 5c's arithmetic.
  __device__ __forceinline__ void last_layer(int par) {
    const float* h2 = F(L.h2) + par * Bp * d.ld2;
    const float* w3 = F(L.w3);
    const int* lab = labels(par);
    float* dz2 = F(L.dz2);
    const int half = lane >> 4, j = lane & 15, n4 = d.ld2 / 4;
    const float inv = 1.f / static_cast<float>(d.B);
    for (int r0 = 2 * wid; r0 < d.B; r0 += 2 * nw) {
      const int rr = r0 + half;
      const bool row = rr < d.B, on = row && j < d.C;
      float z = -INFINITY;
      if (on) {
        float a4[4] = {0.f, 0.f, 0.f, 0.f};
        for (int i = 0; i < n4; ++i) {
          const float4 x = *reinterpret_cast<const float4*>(h2 + rr * d.ld2 + 4 * i);
          const float4 w = *reinterpret_cast<const float4*>(w3 + j * d.ld3 + 4 * i);
          a4[0] = fmaf(x.x, w.x, a4[0]), a4[1] = fmaf(x.y, w.y, a4[1]);
          a4[2] = fmaf(x.z, w.z, a4[2]), a4[3] = fmaf(x.w, w.w, a4[3]);
        }
        z = F(L.b3)[j] + ((a4[0] + a4[1]) + (a4[2] + a4[3]));
      }
      const SoftmaxRow sr = softmax_xent_half_warp(z, on, half, j, [&] { return row ? lab[rr] : 0; }, inv);
      const float dz = sr.dz;
      if (on) F(L.z3)[rr * kC32MaxClasses + j] = dz;
      if (row && j == 0) F(L.rloss)[rr] = sr.lse - sr.zy;
      float dd[kC32MaxClasses];  // 0 past C
#pragma unroll
      for (int n = 0; n < kC32MaxClasses; ++n) dd[n] = __shfl_sync(0xffffffffu, dz, (half << 4) + n);
      if (row)
        for (int u = j; u < d.H2; u += 16) {
          float acc = 0.f;
          if (h2[rr * d.ld2 + u] > 0.f) {
#pragma unroll
            for (int n = 0; n < kC32MaxClasses; ++n)
              if (n < d.C) acc = fmaf(dd[n], w3[n * d.ld3 + u], acc);
            acc *= p.scale;
          }
          dz2[rr * d.ld2 + u] = acc;
        }
    }
    __syncthreads();
  }

  // ---- D: dz1 for the own units, relu'(dz2 W2[:, own]) * scale: two lanes an output (halves of the
  // float4s of dz2's row), one shuffle. Kept three ways for the gradient's MMAs, transposed: fp32 (for
  // b1), and its TF32 high and low parts, column n of the MMA holding unit t for n = 2t, t + 4 for 2t + 1
  // (so a lane's accumulators hold the same 4 pixels of two units). Then block 0's batch loss.
  __device__ __forceinline__ void first_layer_grad_in(int64_t s) {
    const float* dz2 = F(L.dz2);
    const float* w2c = F(L.w2c);
    const float* h1o = F(L.h1o);
    const int n4 = d.ld2 / 4, total = 2 * d.B * U;
    for (int e0 = tid - lane; e0 < total; e0 += nt) {
      const int e = e0 + lane, o = e >> 1, kh = e & 1;
      const bool on = e < total;
      const int b = o / U, c = o - b * U;
      float acc = 0.f;
      if (on)
        for (int i = kh; i < n4; i += 2) {
          const float4 x = *reinterpret_cast<const float4*>(dz2 + b * d.ld2 + 4 * i);
          acc = fmaf(x.x, w2c[(4 * i) * U + c], acc);
          acc = fmaf(x.y, w2c[(4 * i + 1) * U + c], acc);
          acc = fmaf(x.z, w2c[(4 * i + 2) * U + c], acc);
          acc = fmaf(x.w, w2c[(4 * i + 3) * U + c], acc);
        }
      acc += __shfl_xor_sync(0xffffffffu, acc, 1);
      if (on && kh == 0) {
        const float v = c < own1 && h1o[b * U + c] > 0.f ? acc * p.scale : 0.f;
        const int n = c < 4 ? 2 * c : 2 * (c - 4) + 1;
        uint32_t hi, lo;
        split_tf32(v, hi, lo);
        F(L.dz1f)[c * d.ldz + b] = v;
        reinterpret_cast<uint32_t*>(F(L.dz1h))[n * d.ldz + b] = hi;
        reinterpret_cast<uint32_t*>(F(L.dz1l))[n * d.ldz + b] = lo;
      }
    }
    if (r == 0 && wid == nw - 1) batch_mean_loss(F(L.rloss), d.B, lane, p.step_loss, p.bad_step, s);  // (5c's)
    __syncthreads();
  }

  // ---- E: the own W1 rows' gradient dW1^T[pixel][unit] = X^T dz1 / 255 on tensor cores (m = pixels,
  // n = units, k = batch rows), Adam straight from the accumulators. Warp w takes groups of 32 pixels
  // w, w + 16, ...: lane (g, t) reads the word of pixels 32P + 4g .. +3 in rows 2t and 2t + 1 of each
  // 8-row k-step (conflict-free: xs / 16 is odd); tile 0 of the group takes pixels 0 and 1 of each
  // lane's 4 (m = g and g + 8), tile 1 pixels 2 and 3. A lane's accumulators then hold the gradient of
  // its 4 pixels for units t and t + 4: one float4 of W1, m and v each. b1 by the last warp.
  __device__ __forceinline__ void update_first_layer(const RoundedOpt& o, int par) {
    const int g = lane >> 2, t = lane & 3;
    const uint32_t* x32 = reinterpret_cast<const uint32_t*>(xbuf(par));
    const uint32_t* dzh = reinterpret_cast<const uint32_t*>(F(L.dz1h));
    const uint32_t* dzl = reinterpret_cast<const uint32_t*>(F(L.dz1l));
    const int xw = d.xs / 4;
    uint2 bh[KS], bl[KS];
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      bh[ks] = *reinterpret_cast<const uint2*>(dzh + g * d.ldz + 8 * ks + 2 * t);
      bl[ks] = *reinterpret_cast<const uint2*>(dzl + g * d.ldz + 8 * ks + 2 * t);
    }
    const bool a = adam();
    float* w1 = F(L.w1);
    float* m1 = a ? F(L.m1) : w1;
    float* v1 = a ? F(L.v1) : w1;
    for (int P = wid; P < d.ng32; P += nw) {
      float acc[2][2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][h][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        const int ra = 8 * ks + 2 * t;
        const bool in = 32 * P + 4 * g < d.D;  // (the last group's words past the row: never read)
        const uint32_t wa = in ? x32[ra * xw + 8 * P + g] : 0u, wb = in ? x32[(ra + 1) * xw + 8 * P + g] : 0u;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const uint32_t af[4] = {byte_tf32(wa, 2 * i), byte_tf32(wa, 2 * i + 1), byte_tf32(wb, 2 * i), byte_tf32(wb, 2 * i + 1)};
          mma_tf32(acc[i][0], af, bh[ks].x, bh[ks].y);
          mma_tf32(acc[i][1], af, bl[ks].x, bl[ks].y);
        }
      }
      const int px = 32 * P + 4 * g;
#pragma unroll
      for (int uu = 0; uu < 2; ++uu) {
        const int u = t + 4 * uu;
        if (u >= own1) continue;
        float gr[4];  // pixels px .. px + 3 of unit u: (tile 0: m = g, g + 8), (tile 1: the same)
        gr[0] = acc[0][0][uu] + acc[0][1][uu], gr[1] = acc[0][0][2 + uu] + acc[0][1][2 + uu];
        gr[2] = acc[1][0][uu] + acc[1][1][uu], gr[3] = acc[1][0][2 + uu] + acc[1][1][2 + uu];
        float4* wp = reinterpret_cast<float4*>(w1 + u * d.ldw + px);
        float4* mp = reinterpret_cast<float4*>(m1 + u * d.ldw + px);
        float4* vp = reinterpret_cast<float4*>(v1 + u * d.ldw + px);
        float4 w = *wp, m = a ? *mp : make_float4(0, 0, 0, 0), v = a ? *vp : make_float4(0, 0, 0, 0);
        float* wv = &w.x;
        float* mv = &m.x;
        float* vv = &v.x;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int k = px + i;
          const float gk = gr[i] * (1.f / 255.f);
          if (k < d.D) {
            if (keep_grads) p.grads_out[p.w0 + static_cast<size_t>(c0 + u) * d.D + k] = gk;
            o.apply(wv[i], gk, mv[i], vv[i]);
          }
        }
        *wp = w;
        if (a) *mp = m, *vp = v;
      }
    }
    if (wid == nw - 1 && lane < own1) {
      const int c = lane;
      const float gb = sum_rows(F(L.dz1f) + c * d.ldz, 1, d.B);
      if (keep_grads) p.grads_out[p.b0 + c0 + c] = gb;
      float dm = 0.f, dv = 0.f;
      o.apply(F(L.b1)[c], gb, a ? F(L.mb1)[c] : dm, a ? F(L.vb1)[c] : dv);
    }
    __syncthreads();
  }

  // ---- tests: every column copy of W2 against the owner's rows, every W3/b3 replica against block 0's
  __device__ __forceinline__ void count_copy_mismatches() {
    cluster.sync();
    const bool a = adam();
    unsigned bad = 0;
    for (int e = tid; e < d.H2 * own1; e += nt) {
      const int j = e / own1, c = e - j * own1, q = j / d.U2, jj = j - q * d.U2;
      const int s = jj * d.ld1 + c0 + c;
      bad += bits_differ(F(L.w2c)[j * U + c], cluster.map_shared_rank(F(L.w2r), q)[s]);
      if (a) {
        bad += bits_differ(F(L.m2c)[j * U + c], cluster.map_shared_rank(F(L.m2r), q)[s]);
        bad += bits_differ(F(L.v2c)[j * U + c], cluster.map_shared_rank(F(L.v2r), q)[s]);
      }
    }
    for (int e = tid; e < d.C * d.ld3; e += nt) bad += bits_differ(F(L.w3)[e], cluster.map_shared_rank(F(L.w3), 0)[e]);
    for (int c = tid; c < d.C; c += nt) bad += bits_differ(F(L.b3)[c], cluster.map_shared_rank(F(L.b3), 0)[c]);
    report_mismatches(bad, p.copy_mismatches);
  }

  // ---- write back what this block owns (block 0 also the W3/b3 replica)
  __device__ __forceinline__ void write_back() { move_state<false>(); }
};
#endif  // !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

}  // namespace c32

template <int MT, bool kW1>
__global__ void __launch_bounds__(kC32Threads, 1) p5_cluster32_epoch(const __grid_constant__ PersistParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // clusters are compute capability 9.0's; the plan refuses older GPUs before a launch
#else
  extern __shared__ __align__(128) unsigned char sm[];
  using Block = c32::C32Block<MT, kW1>;
  Block blk(p, sm);
  SharedSegmentClock<kC32Segments> clock;  // --breakdown (cluster32_segment_name)
  uint4 nx[kW1 ? 1 : Block::kChunks];      // the next batch's bytes (this thread's 16-byte chunks; not W1's)
  int img[kW1 ? Block::kChunks : 1];       // W1's: the next batch's image of each chunk
  int nlab = 0;
  blk.zero_and_load();
  if (p.count > 0) {  // (zero_and_load's barrier already separates the zeroing from these writes)
    if constexpr (Block::kX2) {
      blk.fetch_indices(p.i0, img, nlab);
      blk.copy_batch(img, nlab, 0);
      __pipeline_wait_prior(0);
    } else {
      blk.fetch_batch(p.i0, nx, nlab);
      blk.store_batch(nx, nlab, 0);
    }
    blk.mask_h1(p.s0);
  }
  blk.cluster.sync();  // every block's shared memory is set before any block writes into another's
  clock.start(p.breakdown != nullptr && blk.r == 0 && blk.tid == 0,
              reinterpret_cast<unsigned long long*>(sm + blk.L.clk));
  const uint32_t h1_bytes = static_cast<uint32_t>(p.B * p.H1 * sizeof(float)), h2_bytes = static_cast<uint32_t>(p.B * p.H2 * sizeof(float));
  for (int t = 0; t < p.count; ++t) {
    const int64_t s = p.s0 + t;
    const int par = t & 1;
    const uint32_t phase = (t >> 1) & 1;  // uses of this parity's buffers so far, mod 2
    const bool more = t + 1 < p.count;
    if (blk.tid == 0) c32::arm(blk.bar(par), h1_bytes), c32::arm(blk.bar(2 + par), h2_bytes);
    if (more) {  // the next batch: indices (W1) or bytes (the others) into registers
      if constexpr (Block::kX2) blk.fetch_indices(p.i0 + t + 1, img, nlab);
      else blk.fetch_batch(p.i0 + t + 1, nx, nlab);
    }
    blk.first_layer(par);  // A
    clock.stamp(0);
    if constexpr (Block::kX2)
      if (more) blk.copy_batch(img, nlab, par ^ 1);  // lands during the step
    if (blk.tid == 32) blk.stage_hyper(s, par);  // read by E, and by the next step's deferred updates
    if (t > 0) blk.deferred_w2(par ^ 1, blk.opt(par ^ 1));  // X1's window
    blk.mask_h2(s);
    __syncthreads();
    c32::wait_phase(blk.bar(par), phase);
    clock.stamp(1);
    blk.second_layer(par);  // B
    clock.stamp(2);
    if (t > 0) blk.deferred_w3(par ^ 1, blk.opt(par ^ 1));  // X2's window
    if (more) blk.mask_h1(s + 1);
    __syncthreads();
    c32::wait_phase(blk.bar(2 + par), phase);
    clock.stamp(3);
    blk.last_layer(par);  // C
    clock.stamp(4);
    blk.first_layer_grad_in(s);  // D
    clock.stamp(5);
    blk.update_first_layer(blk.opt(par), par);  // E
    clock.stamp(6);
    if (more) {  // F
      if constexpr (Block::kX2) __pipeline_wait_prior(0);
      else blk.store_batch(nx, nlab, par ^ 1);
    }
    __syncthreads();
    clock.stamp(7);
  }
  if (p.count > 0) {  // the last step's deferred updates
    const int pp = (p.count - 1) & 1;
    blk.deferred_w2(pp, blk.opt(pp));
    blk.deferred_w3(pp, blk.opt(pp));
  }
  __syncthreads();
  clock.add_to(p.breakdown);
  if (p.copy_mismatches != nullptr) blk.count_copy_mismatches();
  blk.write_back();
  blk.cluster.sync();  // no block leaves while another could still address its shared memory
#endif
}

// ------------------------------------------------------------------ host side

inline const void* cluster32_kernel(const PersistPlan& pl) {
  if (pl.specialized) return reinterpret_cast<const void*>(&p5_cluster32_epoch<2, true>);
  return pl.NC == 2 ? reinterpret_cast<const void*>(&p5_cluster32_epoch<2, false>)
                    : reinterpret_cast<const void*>(&p5_cluster32_epoch<4, false>);
}

// Checks what the kernel can run (exit 2 otherwise) and picks the cluster: requested_blocks (1 .. 16),
// or 0 = the largest that fits and runs (16 on an H100). pl.NC holds the instance's row tiles (2 or 4).
inline PersistPlan plan_cluster32(PersistParams& p, int requested_blocks, int device, bool specialize = true) {
  const auto refuse = [](const std::string& why) { throw Error(kExitUsage, "--launch cluster32: " + why + " (use --launch graph)"); };
  const ClusterDevice dev(device);
  if (dev.cc < 9) refuse("thread-block clusters need compute capability 9.0");
  if (p.B < 1 || p.B > kC32MaxRows) refuse("--batch at most " + std::to_string(kC32MaxRows));
  if (p.D % 16 != 0 || p.D > 1024) refuse("the input width must be a multiple of 16, at most 1024 (it is " + std::to_string(p.D) + ")");
  if (p.C < 1 || p.C > kC32MaxClasses) refuse("at most " + std::to_string(kC32MaxClasses) + " classes");
  if (requested_blocks < 0 || requested_blocks > kC32MaxBlocks)
    refuse("--blocks between 1 and " + std::to_string(kC32MaxBlocks) + " (the cluster's size)");
  const int MT = p.B <= 32 ? 2 : 4;
  PersistPlan pl;
  pl.NC = MT;
  const ClusterSizes sizes(requested_blocks, kC32MaxBlocks);
  std::string last = "no cluster size fits";
  for (int nb = sizes.hi; nb >= sizes.lo; --nb) {
    const C32Dims d = c32_dims(p.B, p.D, p.H1, p.H2, p.C, nb, 16 * MT);
    if (d.U1 > kC32Units) {
      last = std::to_string(nb) + " blocks would hold " + std::to_string(d.U1) + " first-layer units each (at most " +
             std::to_string(kC32Units) + ")";
      continue;
    }
    const bool w1 = specialize && MT == 2 && nb == kC32W1.NB && p.B == kC32W1.B && p.D == kC32W1.D && p.H1 == kC32W1.H1 &&
                    p.H2 == kC32W1.H2 && p.C == kC32W1.C;
    const size_t smem = c32_layout(d, p.adam && p.adam_m != nullptr, w1).total;
    if (const std::string why = cluster_smem_refusal(nb, smem, dev.smem_optin); !why.empty()) {
      last = why;
      continue;
    }
    pl.specialized = w1;
    const void* k = cluster32_kernel(pl);
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    if (const std::string why = cluster_run_refusal(k, nb, kC32Threads, smem); !why.empty()) {
      last = why;
      continue;
    }
    pl.blocks = nb, pl.nc = d.U1, pl.nj = d.U2, pl.smem = smem;
    p.nc = d.U1, p.nj = d.U2;
    return pl;
  }
  refuse(last);
  return pl;
}

inline void launch_cluster32(const PersistPlan& pl, const PersistParams& p, cudaStream_t st) {
  ClusterLaunch(pl.blocks, kC32Threads, pl.smem, st).launch(cluster32_kernel(pl), p);
}

// Flops and global-memory bytes of one step: the batch's bytes and labels, read by every block;
// parameters and activations stay on chip (the DSMEM traffic is not counted as memory bytes).
inline KernelCost cluster32_step_cost(const PersistParams& p, const PersistPlan& pl) {
  const double B = p.B, D = p.D, H1 = p.H1, H2 = p.H2, C = p.C, G = pl.blocks;
  KernelCost c;
  const double fwd = 2 * B * (D * H1 + H1 * H2 + H2 * C);
  c.flops = fwd /* forward */ + fwd /* weight gradients */ + 2 * B * H1 * H2 /* W2's column copies */ +
            2 * B * (H1 * H2 + H2 * C) * G /* dz1 own units, dz2 in every block */ +
            2 * 2 * B * H2 * C * (G - 1) /* the last layer and dW3 repeated in every block */ +
            2 * B * D * H1 * 2 /* the tensor-core products run twice (high and low parts) */;
  c.bytes = B * D * G + B * (1 + sizeof(int)) * G;
  c.calls = 0;
  return c;
}

}  // namespace mlp
}  // namespace nb
