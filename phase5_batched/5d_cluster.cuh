// phase5_batched/5d_cluster.cuh — rung 5d, `--launch cluster`: a whole epoch of W2's MLP (fp16 operands, fp32
// accumulation and master weights, plain SGD, no dropout) as ONE thread-block cluster of up to 16 blocks on
// 16 SMs that keep every parameter in their shared memory and exchange activations through DSMEM.
// BUILDS ON the graph path's W2 arithmetic (fp16 operands, fp32 sums, SGD as one FMA) and the shared on-chip
// parts (onchip_*.cuh: the carve-up, the push's loop, the cluster plan, the copy check). WHAT IT ADDS: at h = 128
// the graph path's step is 8 dependent kernels of 5-10 us on grids of 2-52 blocks; the ~0.8 MB model fits
// 16 SMs, so a step costs each layer's block-local work plus one cluster barrier per dependency between
// blocks (L-1 forward, L-2 backward).
// WHO HOLDS WHAT (block r of NB; hidden layer l's units split ceil(out_l / NB) a block):
//   * rows W_l[u0 .. u0+U) of each layer (fp32 master + fp16 copy) and their biases; the last layer is
//     replicated in every block and updated identically;
//   * columns W_l[:, own units of layer l-1] (fp32 + fp16), so dZ_{l-1}[:, own] = dZ_l W_l[:, own] needs
//     no reduction between blocks; rows and columns are updated from the same fp16 operands in the same
//     tensor-core k-steps, so they stay bit-identical (the GPU tests count mismatches);
//   * the full activations H_l (fp16) and the hidden layers' dZ_l: every block pushes its own columns into
//     every block's copy, then the cluster barrier (H_0 double-buffered by step parity: the one write of
//     step t+1 that can precede its first barrier).
// One step: forward (WMMA m32n8k16, bias, ReLU, push, barrier) for l = 0 .. L-2; the last layer in every
// block (softmax cross-entropy, dZ in fp16); backward for l = L-1 .. 1 (dZ_{l-1}, pushed; layer l's rows,
// columns and biases updated by WMMA m16n16k16 weight gradients while the others arrive); the first
// layer's update (WMMA m8n32k16); the next batch (in registers since the step's start) becomes X.
// THE DESIGN DECISION: replicate and mirror instead of reducing: column copies and a replicated last
// layer trade duplicate arithmetic for one barrier per dependency. Not bit-identical to the graph path
// (sum order); bit-reproducible itself (no atomics but the divergence flag).
// MEASURED (H200): 27.15 us a step at W2 h = 128 (w2-h128-cluster.json), 1.85x the graph path.
#pragma once
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "check.cuh"
#include "cluster_launch.cuh"
#include "onchip_segment_clock.cuh"
#include "errors.h"
#include "mlp/kernels.cuh"
#include "mlp/mlp_common.h"
#include "5d_cluster.h"
#include "onchip_cluster.cuh"
#include "onchip_optimizer.cuh"
#include "onchip_smem_carve.cuh"

namespace nb {
namespace mlp {

__host__ __device__ inline int cl_round(int x, int m) { return (x + m - 1) / m * m; }


// Units of layer y that block r owns (all of them for the replicated last layer).
__host__ __device__ inline int cl_own(const ClusterLayer& y, int r) {
  const int left = y.out - r * y.U;
  return y.rep ? y.out : left < 0 ? 0 : left < y.U ? left : y.U;
}

// The shared-memory layout for NB blocks; returns the bytes a block needs.
inline size_t cluster_layout(ClusterParams& p) {
  SmemCarve<128> carve;
  const auto take = [&](size_t bytes) { return carve.take(bytes); };
  const int L = p.L, NB = p.NB;
  int scratch_floats = kClWarps * 8 * 32;  // the first layer's update: one 8 x 32 tile per warp
  auto mm_scratch = [](int ntiles, int ksteps) {
    const int kcn = std::max(1, std::min(kClWarps / std::max(1, ntiles), ksteps));
    return kcn * kClRows * ntiles * 8;
  };
  p.xcols = cl_round(p.w[0], 32);
  p.ldx = p.xcols + 8;
  p.x16 = take(sizeof(__half) * kClRows * p.ldx);
  p.xtab = take(sizeof(__half) * 256);
  for (int l = 0; l < L; ++l) {
    ClusterLayer& y = p.ly[l];
    y.in = p.w[l], y.out = p.w[l + 1], y.rep = l == L - 1;
    y.U = y.rep ? y.out : (y.out + NB - 1) / NB;
    y.Upad = cl_round(y.U, 8);
    y.Kpad = cl_round(y.in, 16);
    y.ldr = y.Kpad + 8;
    y.Npad = cl_round(y.out, 16);
    y.ldc = y.Npad + 8;
    y.wr16 = take(sizeof(__half) * y.Upad * y.ldr);
    y.wr32 = take(sizeof(float) * y.U * y.in);
    y.bias = take(sizeof(float) * y.U);
    scratch_floats = std::max(scratch_floats, mm_scratch(y.Upad / 8, y.Kpad / 16));
    if (l >= 1) {
      const ClusterLayer& yp = p.ly[l - 1];
      y.Uc = yp.U, y.Ucpad = yp.Upad;
      y.wc16 = take(sizeof(__half) * y.Ucpad * y.ldc);
      y.wc32 = take(sizeof(float) * y.Uc * y.out);
      y.act = take(sizeof(__half) * (l == 1 ? 2 : 1) * kClRows * y.ldr);
      scratch_floats = std::max(scratch_floats, mm_scratch(y.Ucpad / 8, y.Npad / 16));
    }
    y.dz = l == 0 ? take(sizeof(__half) * y.Upad * kClLdT) : take(sizeof(__half) * kClRows * y.ldc);
    y.U16 = cl_round(y.U, 16);
    if (!y.rep && l >= 1) y.dzt = take(sizeof(__half) * y.U16 * kClLdT);
  }
  p.scratch = take(sizeof(float) * scratch_floats);
  p.logits = take(sizeof(float) * kClRows * p.ly[L - 1].Npad);
  p.lab = take(sizeof(int) * kClRows);
  p.rloss = take(sizeof(float) * kClRows);
  int maxu = 16;
  for (int l = 0; l + 1 < L; ++l) maxu = std::max(maxu, p.ly[l].U16);
  p.ldo = maxu + 8;
  p.own16 = take(sizeof(__half) * kClRows * p.ldo);
  for (int l = 0; l + 1 < L; ++l) p.ly[l].hown = take(sizeof(__half) * kClRows * p.ldo);
  p.total = carve.off;
  return carve.off;
}

namespace cl {

namespace wm = nvcuda::wmma;
namespace cg = cooperative_groups;

// out[32][8 * ntiles] = A[32][16 * ksteps] · B, B given as Bt[n][k] (column-major B, row stride
// ldb): warps split over the column tiles and chunks of K; each stores its fp32 partial to
// scratch[kc][32][8 * ntiles]. Returns the number of chunks (the caller sums them in order).
// Ends with a block barrier: A and Bt may be overwritten after it.
__device__ __forceinline__ int mm32(const __half* A, int lda, int ksteps, const __half* Bt, int ldb, int ntiles,
                                    float* scratch) {
  const int wid = threadIdx.x >> 5;
  const int kcn = max(1, min(kClWarps / ntiles, ksteps));
  const int per = (ksteps + kcn - 1) / kcn, ld = ntiles * 8;
  for (int task = wid; task < ntiles * kcn; task += kClWarps) {
    const int nt = task % ntiles, kc = task / ntiles;
    wm::fragment<wm::accumulator, 32, 8, 16, float> acc;
    wm::fill_fragment(acc, 0.f);
    const int k1 = min(ksteps, (kc + 1) * per);
    for (int ks = kc * per; ks < k1; ++ks) {
      wm::fragment<wm::matrix_a, 32, 8, 16, __half, wm::row_major> a;
      wm::fragment<wm::matrix_b, 32, 8, 16, __half, wm::col_major> b;
      wm::load_matrix_sync(a, A + ks * 16, lda);
      wm::load_matrix_sync(b, Bt + static_cast<size_t>(nt) * 8 * ldb + ks * 16, ldb);
      wm::mma_sync(acc, a, b, acc);
    }
    wm::store_matrix_sync(scratch + static_cast<size_t>(kc) * kClRows * ld + nt * 8, acc, ld, wm::mem_row_major);
  }
  __syncthreads();
  return kcn;
}

// The sum of the kcn <= kClWarps partials of output (b, n), in chunk order; all loads issued first.
__device__ __forceinline__ float part_sum(const float* scratch, int kcn, int ld, int b, int n) {
  float v[kClWarps];
#pragma unroll
  for (int kc = 0; kc < kClWarps; ++kc) v[kc] = kc < kcn ? scratch[kc * kClRows * ld + b * ld + n] : 0.f;
  float z = v[0];
#pragma unroll
  for (int kc = 1; kc < kClWarps; ++kc) z += v[kc];  // + 0 past kcn: the same value
  return z;
}

// Sum over the batch of a column of dZ (a bias gradient): all 32 rows (rows past the batch are
// zero), loads first, added in row order.
__device__ __forceinline__ float col_sum(const __half* dz, int ld) {
  float v[kClRows];
#pragma unroll
  for (int b = 0; b < kClRows; ++b) v[b] = __half2float(dz[b * ld]);
  float g = v[0];
#pragma unroll
  for (int b = 1; b < kClRows; ++b) g += v[b];
  return g;
}

// One weight's step: its fp32 master in w32, the fp16 copy (the master rounded) in w16.
__device__ __forceinline__ void sgd_store(float* w32, __half* w16, float g, float lr) {
  const float w = sgd_fma(*w32, g, lr);
  *w32 = w, *w16 = __float2half_rn(w);
}

// Pushes the block's own columns (own16[b][0 .. own), b < 32) to columns u0 .. u0+own of the
// [32][ld] buffer `dst` in every block of the cluster: 16-byte DSMEM stores where the columns are
// whole 8-column chunks (u0 and own multiples of 8), 2-byte ones otherwise. Starts with a block barrier.
template <class Cluster>
__device__ __forceinline__ void push_own(Cluster& cluster, const __half* own16, int ldo, int own, __half* dst, int ld,
                                         int u0, int NB) {
  __syncthreads();
  if (own % 8 == 0 && u0 % 8 == 0) {
    for_each_push_element(threadIdx.x, kClThreads, NB, kClRows, own / 8, [&](int q, int b, int c) {
      const uint4 v = *reinterpret_cast<const uint4*>(own16 + b * ldo + 8 * c);
      *reinterpret_cast<uint4*>(cluster.map_shared_rank(dst + b * ld + u0 + 8 * c, q)) = v;
    });
  } else {
    for_each_push_element(threadIdx.x, kClThreads, NB, kClRows, own, [&](int q, int b, int u) {
      *cluster.map_shared_rank(dst + b * ld + u0 + u, q) = own16[b * ldo + u];
    });
  }
}

// ------------------------------------------------------------------ the kernel, stage by stage
// p5_cluster_epoch (below these structs) is a short loop over the steps; the stages it calls are the
// member functions of ClusterBlock, in the order a step runs them. Everything is forced inline: the
// structs only name the kernel's locals (they compile to the same registers; see the kernel for the
// two locals kept outside them).

// This block's shared memory, as cluster_layout carved it (byte offsets in p): the buffers of the
// whole block under their names, and those of layer y found through y's offsets.
struct ClusterSmem {
  unsigned char* const base;  // the dynamic shared memory (all of it is zeroed at the start)
  const ClusterParams& p;
  __half* const x16;      // X of the step, fp16: [32][ldx]
  __half* const xtab;     // byte -> fp16 table (x / 255, the graph path's rounding)
  float* const scratch;   // the products' fp32 partials; the updates' per-warp staged tiles
  float* const logits;    // the last layer's logits (before the bias): [32][Npad]
  __half* const own16;    // the block's own columns of dZ_{l-1} (l-1 >= 1) before their push: [32][ldo]
  int* const lab;         // the step's labels

  __device__ __forceinline__ ClusterSmem(unsigned char* sm, const ClusterParams& params)
      : base(sm), p(params), x16(halves_at(p.x16)), xtab(halves_at(p.xtab)), scratch(floats_at(p.scratch)),
        logits(floats_at(p.logits)), own16(halves_at(p.own16)),
        lab(reinterpret_cast<int*>(base + p.lab)) {}

  __device__ __forceinline__ __half* halves_at(size_t off) const { return reinterpret_cast<__half*>(base + off); }
  __device__ __forceinline__ float* floats_at(size_t off) const { return reinterpret_cast<float*>(base + off); }

  // layer y's row copy (fp16 [Upad][ldr], fp32 [U][in]) and its biases
  __device__ __forceinline__ __half* rows16(const ClusterLayer& y) const { return halves_at(y.wr16); }
  __device__ __forceinline__ float* rows32(const ClusterLayer& y) const { return floats_at(y.wr32); }
  __device__ __forceinline__ float* bias(const ClusterLayer& y) const { return floats_at(y.bias); }
  // layer y's column copy (l >= 1: fp16 [Ucpad][ldc], fp32 [Uc][out])
  __device__ __forceinline__ __half* cols16(const ClusterLayer& y) const { return halves_at(y.wc16); }
  __device__ __forceinline__ float* cols32(const ClusterLayer& y) const { return floats_at(y.wc32); }
  // dZ of layer y: [32][ldc] (l >= 1), [Upad][kClLdT] transposed (l = 0)
  __device__ __forceinline__ __half* dz(const ClusterLayer& y) const { return halves_at(y.dz); }
  // hidden l >= 1: the own columns of dZ_l transposed, [U16][kClLdT]
  __device__ __forceinline__ __half* dzt(const ClusterLayer& y) const { return halves_at(y.dzt); }
  // hidden l: the block's own columns of H_l, [32][ldo]
  __device__ __forceinline__ __half* hown(const ClusterLayer& y) const { return halves_at(y.hown); }
  // the input H_{l-1} of layer l >= 1 in step parity par
  __device__ __forceinline__ __half* act(int l, int par) const {
    return halves_at(p.ly[l].act) + (l == 1 ? static_cast<size_t>(par) * kClRows * p.ly[l].ldr : 0);
  }
};

// Layer l >= 1 of the backward pass and the layer l-1 below it: what both halves of its step (the
// backward-data product, layer l's updates) read.
struct BackwardLayer {
  int l;
  const ClusterLayer& y;   // layer l
  const ClusterLayer& yp;  // layer l-1
  const __half* dz;        // dZ_l: [32][ldc]
  const __half* hin;       // H_{l-1}, all units (layer l's input, in this step's parity)
  int ownp, c0;            // layer l-1's units this block owns: ownp of them from c0
};

// (cooperative_groups has cluster_group from compute capability 9.0 only; below it, as the kernel
// traps, ClusterBlock is left out of the device pass.)
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// One block of the cluster as one of its threads sees it: the block's rank r of NB, the thread's
// tid / lane / warp, the shapes, the block's shared memory, the --breakdown clock; and the stages
// of the kernel as member functions.
struct ClusterBlock {
  const ClusterParams& p;
  cg::cluster_group cluster;
  const int r;                  // this block's rank in the cluster
  const int tid, lane, wid;
  const int L, B, D, NB;        // weight matrices, batch, input width, blocks in the cluster
  const bool keep_grads;        // validation: the step's gradients go to p.grads_out too
  const ClusterSmem smem;
  // The batch as 16-byte chunks: chunk q is row q / (D / 16), bytes 16 * (q % (D / 16)).
  const int cpr, nchunks;
  SegmentClock<kClSegments>& clock;

  __device__ __forceinline__ ClusterBlock(const ClusterParams& params, unsigned char* sm, SegmentClock<kClSegments>& breakdown)
      : p(params), cluster(cg::this_cluster()), r(static_cast<int>(cluster.block_rank())),
        tid(threadIdx.x), lane(tid & 31), wid(tid >> 5), L(p.L), B(p.B), D(p.w[0]), NB(p.NB),
        keep_grads(p.grads_out != nullptr), smem(sm, params), cpr(D / 16), nchunks(B * cpr), clock(breakdown) {}

  // ---- zero everything (the pads of every tile stay 0), then load what this block holds
  __device__ __forceinline__ void zero_and_load() {
    for (size_t o = static_cast<size_t>(tid) * 16; o < p.total; o += 16 * kClThreads)
      *reinterpret_cast<uint4*>(smem.base + o) = make_uint4(0, 0, 0, 0);
    __syncthreads();
    if (tid < 256) smem.xtab[tid] = __float2half_rn(static_cast<float>(tid) / 255.0f);
    for (int l = 0; l < L; ++l) {
      const ClusterLayer& y = p.ly[l];
      const int own = cl_own(y, r), u0 = y.rep ? 0 : r * y.U;
      __half* wr16 = smem.rows16(y);
      float* wr32 = smem.rows32(y);
      for (int e = tid; e < own * y.in; e += kClThreads) {
        const int u = e / y.in, k = e - u * y.in;
        const float v = p.params[p.woff[l] + static_cast<size_t>(u0 + u) * y.in + k];
        wr32[e] = v, wr16[u * y.ldr + k] = __float2half_rn(v);
      }
      for (int u = tid; u < own; u += kClThreads) smem.bias(y)[u] = p.params[p.boff[l] + u0 + u];
      if (l >= 1) {
        const int ownp = cl_own(p.ly[l - 1], r), c0 = r * p.ly[l - 1].U;
        __half* wc16 = smem.cols16(y);
        float* wc32 = smem.cols32(y);
        for (int e = tid; e < ownp * y.out; e += kClThreads) {
          const int k = e / y.out, i = e - k * y.out;
          const float v = p.params[p.woff[l] + static_cast<size_t>(i) * y.in + c0 + k];
          wc32[e] = v, wc16[k * y.ldc + i] = __float2half_rn(v);
        }
      }
    }
  }

  // ---- the batch: its bytes into registers (early, consumed at the end of the step) ...
  __device__ __forceinline__ void fetch_batch(int batch, uint4 (&nx)[kClMaxChunks]) const {
#pragma unroll
    for (int j = 0; j < kClMaxChunks; ++j) {
      const int q = tid + j * kClThreads;
      if (q < nchunks) {
        const int row = q / cpr, c = q - row * cpr;
        const int img = __ldg(p.perm + static_cast<size_t>(batch) * B + row);
        nx[j] = __ldg(reinterpret_cast<const uint4*>(p.images + static_cast<size_t>(img) * D) + c);
      }
    }
  }

  // ... and from the registers to the fp16 X
  __device__ __forceinline__ void store_x(const uint4 (&nx)[kClMaxChunks]) const {
#pragma unroll
    for (int j = 0; j < kClMaxChunks; ++j) {
      const int q = tid + j * kClThreads;
      if (q < nchunks) {
        const int row = q / cpr, c = q - row * cpr;
        const uint32_t w4[4] = {nx[j].x, nx[j].y, nx[j].z, nx[j].w};
        uint32_t o[8];  // pixel bytes -> fp16 pairs through the table
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const uint32_t word = w4[e >> 1], sh = 16 * (e & 1);
          const uint32_t lo = __half_as_ushort(smem.xtab[(word >> sh) & 0xFFu]);
          const uint32_t hi = __half_as_ushort(smem.xtab[(word >> (sh + 8)) & 0xFFu]);
          o[e] = lo | (hi << 16);
        }
        uint4* dst = reinterpret_cast<uint4*>(smem.x16 + row * p.ldx + 16 * c);
        dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
        dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
      }
    }
  }

  // the labels of batch i
  __device__ __forceinline__ void load_labels(int i) {
    if (tid < B) smem.lab[tid] = __ldg(p.labels + __ldg(p.perm + static_cast<size_t>(i) * B + tid));
  }

  // --breakdown's clock starts once every block's shared memory is set
  __device__ __forceinline__ void start_clock() { clock.start(p.breakdown != nullptr && r == 0 && tid == 0); }

  // ---- forward: hidden layers (own units, pushed to every block), then the last layer everywhere
  __device__ __forceinline__ void forward(int par, int64_t s) {
    for (int l = 0; l < L; ++l) {
      const ClusterLayer& y = p.ly[l];
      const __half* A = l == 0 ? smem.x16 : smem.act(l, par);
      const int lda = l == 0 ? p.ldx : y.ldr;
      const int nt = y.Upad / 8;
      const int kcn = cl::mm32(A, lda, y.Kpad / 16, smem.rows16(y), y.ldr, nt, smem.scratch);
      if (!y.rep) forward_hidden_epilogue(l, par, kcn);
      else forward_last_layer(y, kcn, s);
    }
  }

  // hidden layer l after its product (kcn partials in scratch): bias, ReLU, fp16 -> own columns of
  // H_l, pushed into every block's H_l; cluster barrier.
  __device__ __forceinline__ void forward_hidden_epilogue(int l, int par, int kcn) {
    const ClusterLayer& y = p.ly[l];
    const ClusterLayer& yn = p.ly[l + 1];
    const int ld = y.Upad;
    const float* bias = smem.bias(y);
    const int own = cl_own(y, r), u0 = r * y.U;
    __half* dst = smem.act(l + 1, par);
    __half* hown = smem.hown(y);  // kept: the column copy's update of layer l+1 reads it
    for (int e = tid; e < kClRows * own; e += kClThreads) {
      const int b = e / own, u = e - b * own;
      const float z = cl::part_sum(smem.scratch, kcn, ld, b, u) + bias[u];
      hown[b * p.ldo + u] = __float2half_rn(b < B ? fmaxf(z, 0.f) : 0.f);
    }
    clock.stamp(0);
    cl::push_own(cluster, hown, p.ldo, own, dst, yn.ldr, u0, NB);
    cluster.sync();
    clock.stamp(1);
  }

  // the last layer y (every block) after its product: logits, softmax cross-entropy, dZ, the step's loss
  __device__ __forceinline__ void forward_last_layer(const ClusterLayer& y, int kcn, int64_t s) {
    const int ld = y.Upad;
    const float* bias = smem.bias(y);
    float* logits = smem.logits;
    const int C = y.out, ldl = y.Npad;
    for (int e = tid; e < B * C; e += kClThreads) {
      const int b = e / C, c = e - b * C;
      logits[b * ldl + c] = cl::part_sum(smem.scratch, kcn, ld, b, c);
    }
    __syncthreads();
    // softmax cross-entropy and dZ = (p - onehot) / B: a warp a row, lanes over the classes
    // (the graph path's SoftmaxCEEpi arithmetic per element; max and sum by shuffle trees)
    __half* dz = smem.dz(y);
    float* rloss = smem.floats_at(p.rloss);  // the loss of each batch row (rows past the batch: 0)
    for (int b = wid; b < kClRows; b += kClWarps) {
      float loss = 0.f;
      if (b < B) {
        const float* z = logits + b * ldl;
        float mx = -INFINITY;
        for (int j = lane; j < C; j += 32) mx = fmaxf(mx, z[j] + bias[j]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float se = 0.f;
        for (int j = lane; j < C; j += 32) se += expf(z[j] + bias[j] - mx);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) se += __shfl_xor_sync(0xffffffffu, se, o);
        const float lse = mx + logf(se);
        const int yl = smem.lab[b];
        loss = lse - (z[yl] + bias[yl]);
        const float inv = 1.f / static_cast<float>(B);
        for (int j = lane; j < C; j += 32) {
          const float pj = expf(z[j] + bias[j] - lse);
          dz[b * y.ldc + j] = __float2half_rn((pj - (j == yl ? 1.f : 0.f)) * inv);
        }
      }
      if (lane == 0) rloss[b] = loss;
    }
    __syncthreads();
    if (wid == 0 && r == 0) {
      float sum = rloss[lane];  // rows past the batch: 0
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      const float mean = static_cast<float>(static_cast<double>(sum) / B);
      if (lane == 0) {  // (each lane's butterfly adds in its own order: lane 0's is the value)
        p.step_loss[s] = mean;
        if (!isfinite(mean)) atomicMin(p.bad_step, static_cast<unsigned long long>(s));
      }
    }
    clock.stamp(2);
  }

  // ---- backward, l = L-1 .. 1: dZ_{l-1} for the own units of layer l-1, then layer l's updates
  __device__ __forceinline__ void backward(int par) {
    for (int l = L - 1; l >= 1; --l) {
      const ClusterLayer& y = p.ly[l];
      const ClusterLayer& yp = p.ly[l - 1];
      const BackwardLayer bl{l, y, yp, smem.dz(y), smem.act(l, par), cl_own(yp, r), r * yp.U};
      const int ownp = bl.ownp, c0 = bl.c0;
      backward_data(bl);
      // Split barrier: arrive right after the pushes, do layer l's updates (nothing another block
      // writes meanwhile: only dZ_{l-1}, which they do not read), then wait.
      if (l - 1 >= 1) {
        cl::push_own(cluster, smem.own16, p.ldo, ownp, smem.dz(yp), yp.ldc, c0, NB);
        cluster.barrier_arrive();
      }
      clock.stamp(4);
      update_layer(bl);
      clock.stamp(5);
      // The block barrier first: the cluster barrier's arrivals came before the updates, so its wait
      // alone would let a warp start the next product (which writes scratch) while another still
      // reads its staged tile there.
      __syncthreads();
      if (l - 1 >= 1) cluster.barrier_wait();
      clock.stamp(4);
    }
  }

  // dZ_{l-1}[:, own] = (dZ_l · W_l[:, own]) * relu'(H_{l-1}) from the column copy; kept in own16 and
  // dZ_{l-1} transposed for the push and the update (l-1 >= 1), or in the transposed dZ_0 (l-1 = 0)
  __device__ __forceinline__ void backward_data(const BackwardLayer& bl) {
    const int l = bl.l, ownp = bl.ownp, c0 = bl.c0;
    const ClusterLayer &y = bl.y, &yp = bl.yp;
    const __half *dz = bl.dz, *hin = bl.hin;
    const int nt = y.Ucpad / 8, ld = y.Ucpad;
    const int kcn = cl::mm32(dz, y.ldc, y.Npad / 16, smem.cols16(y), y.ldc, nt, smem.scratch);
    for (int e = tid; e < kClRows * ownp; e += kClThreads) {
      const int b = e / ownp, k = e - b * ownp;
      const float v = cl::part_sum(smem.scratch, kcn, ld, b, k);
      const bool on = b < B && __half2float(hin[b * y.ldr + c0 + k]) > 0.f;
      const __half d = __float2half_rn(on ? v : 0.f);
      if (l - 1 >= 1) smem.own16[b * p.ldo + k] = d, smem.dzt(yp)[k * kClLdT + b] = d;
      else smem.dz(yp)[k * kClLdT + b] = d;
    }
    clock.stamp(3);
  }

  // layer l's updates: rows (own units; all of them for the last layer), columns (own inputs),
  // biases. dW = dZ_l^T · H_{l-1} in 16 x 16 tiles (m = unit of layer l, n = its input, K = the
  // 32 batch rows, WMMA m16n16k16 in two k-steps), SGD from each warp's staged tile. A weight's
  // tile in the row copy and in the column copy multiplies the same fp16 operands at the same
  // k positions in the same k-step order, so both copies get the same gradient bits (tests
  // count mismatches between them: copy_mismatches).
  __device__ __forceinline__ void update_layer(const BackwardLayer& bl) {
    const int l = bl.l, ownp = bl.ownp;
    const ClusterLayer &y = bl.y, &yp = bl.yp;
    const __half *dz = bl.dz, *hin = bl.hin;
    if (l - 1 == 0) __syncthreads();  // the epilogue's reads of scratch (no push barrier here)
    const int own = cl_own(y, r), u0 = y.rep ? 0 : r * y.U, in = y.in, out = y.out;
    float* wr32 = smem.rows32(y);
    __half* wr16 = smem.rows16(y);
    float* wc32 = smem.cols32(y);
    __half* wc16 = smem.cols16(y);
    const __half* hown = smem.hown(yp);
    const __half* dzt = y.rep ? nullptr : smem.dzt(y);
    const int rmt = y.rep ? y.Npad / 16 : y.U16 / 16, rnt = y.Kpad / 16;  // row tiles
    const int cmt = y.Npad / 16, cnt = cl_round(ownp, 16) / 16;          // column tiles
    const int rtasks = own > 0 ? rmt * rnt : 0, tasks = rtasks + cmt * cnt;
    float* stg = smem.scratch + wid * 256;
    for (int task = wid; task < tasks; task += kClWarps) {
      const bool row = task < rtasks;
      const int tt = row ? task : task - rtasks;
      const int mt = row ? tt % rmt : tt % cmt, nt2 = row ? tt / rmt : tt / cmt;
      wm::fragment<wm::accumulator, 16, 16, 16, float> acc;
      wm::fill_fragment(acc, 0.f);
#pragma unroll
      for (int ks = 0; ks < kClRows / 16; ++ks) {
        wm::fragment<wm::matrix_b, 16, 16, 16, __half, wm::row_major> bf;
        if (row) wm::load_matrix_sync(bf, hin + ks * 16 * y.ldr + nt2 * 16, y.ldr);
        else wm::load_matrix_sync(bf, hown + ks * 16 * p.ldo + nt2 * 16, p.ldo);
        if (row && !y.rep) {
          wm::fragment<wm::matrix_a, 16, 16, 16, __half, wm::row_major> a;
          wm::load_matrix_sync(a, dzt + mt * 16 * kClLdT + ks * 16, kClLdT);
          wm::mma_sync(acc, a, bf, acc);
        } else {  // dZ_l [b][i] read as A (m = i, k = b), column-major
          wm::fragment<wm::matrix_a, 16, 16, 16, __half, wm::col_major> a;
          wm::load_matrix_sync(a, dz + ks * 16 * y.ldc + mt * 16, y.ldc);
          wm::mma_sync(acc, a, bf, acc);
        }
      }
      wm::store_matrix_sync(stg, acc, 16, wm::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int m = mt * 16 + e / 16, n = nt2 * 16 + (e & 15);
        const float g = stg[e];
        if (row) {
          if (m >= own || n >= in) continue;
          if (keep_grads && (!y.rep || r == 0)) p.grads_out[p.woff[l] + static_cast<size_t>(u0 + m) * in + n] = g;
          cl::sgd_store(wr32 + m * in + n, wr16 + m * y.ldr + n, g, p.lr);
        } else {
          if (m >= out || n >= ownp) continue;
          cl::sgd_store(wc32 + n * out + m, wc16 + n * y.ldc + m, g, p.lr);
        }
      }
      __syncwarp();
    }
    float* bias = smem.bias(y);
    for (int u = tid; u < own; u += kClThreads) {
      const float g = cl::col_sum(dz + u0 + u, y.ldc);
      if (keep_grads && (!y.rep || r == 0)) p.grads_out[p.boff[l] + u0 + u] = g;
      bias[u] = sgd_fma(bias[u], g, p.lr);
    }
  }

  // ---- first layer: dW0[own] = dZ0[:, own]^T · X (8 x 32 tiles), SGD from the accumulators
  __device__ __forceinline__ void update_first_layer() {
    const ClusterLayer& y = p.ly[0];
    const int own = cl_own(y, r), u0 = r * y.U;
    const __half* dzt = smem.dz(y);  // [Upad][kClLdT]: dZ0 transposed
    float* wr32 = smem.rows32(y);
    __half* wr16 = smem.rows16(y);
    float* stg = smem.scratch + wid * 8 * 32;
    const int mtn = y.Upad / 8, ntn = p.xcols / 32;
    for (int task = wid; task < mtn * ntn; task += kClWarps) {
      const int mt = task % mtn, n0 = (task / mtn) * 32;
      wm::fragment<wm::accumulator, 8, 32, 16, float> acc;
      wm::fill_fragment(acc, 0.f);
#pragma unroll
      for (int ks = 0; ks < kClRows / 16; ++ks) {
        wm::fragment<wm::matrix_a, 8, 32, 16, __half, wm::row_major> a;
        wm::fragment<wm::matrix_b, 8, 32, 16, __half, wm::row_major> b;
        wm::load_matrix_sync(a, dzt + mt * 8 * kClLdT + ks * 16, kClLdT);
        wm::load_matrix_sync(b, smem.x16 + ks * 16 * p.ldx + n0, p.ldx);
        wm::mma_sync(acc, a, b, acc);
      }
      wm::store_matrix_sync(stg, acc, 32, wm::mem_row_major);
      __syncwarp();
      const int k = n0 + lane;
      for (int m = 0; m < 8; ++m) {
        const int u = mt * 8 + m;
        if (u < own && k < D) {
          const float g = stg[m * 32 + lane];
          if (keep_grads) p.grads_out[p.woff[0] + static_cast<size_t>(u0 + u) * D + k] = g;
          cl::sgd_store(wr32 + u * D + k, wr16 + u * y.ldr + k, g, p.lr);
        }
      }
      __syncwarp();
    }
    float* bias = smem.bias(y);
    for (int u = tid; u < own; u += kClThreads) {
      const float g = cl::col_sum(dzt + u * kClLdT, 1);
      if (keep_grads) p.grads_out[p.boff[0] + u0 + u] = g;
      bias[u] = sgd_fma(bias[u], g, p.lr);
    }
  }

  // ---- tests: every column copy against the row copy it mirrors (in the owner's shared memory),
  // and every block's replica of the last layer against block 0's; the count goes to p.copy_mismatches
  __device__ __forceinline__ void count_copy_mismatches() {
    cluster.sync();  // every block's last updates are done
    unsigned bad = 0;
    for (int l = 1; l < L; ++l) {
      const ClusterLayer& y = p.ly[l];
      const int ownp = cl_own(p.ly[l - 1], r), c0 = r * p.ly[l - 1].U;
      for (int e = tid; e < ownp * y.out; e += kClThreads) {
        const int k = e / y.out, i = e - k * y.out;
        const int q = y.rep ? r : i / y.U, ui = y.rep ? i : i - q * y.U;
        const float* rw32 = cluster.map_shared_rank(smem.rows32(y), q);
        const __half* rw16 = cluster.map_shared_rank(smem.rows16(y), q);
        bad += bits_differ(smem.cols32(y)[e], rw32[ui * y.in + c0 + k]);
        bad += bits_differ(smem.cols16(y)[k * y.ldc + i], rw16[ui * y.ldr + c0 + k]);
      }
    }
    // the replicated last layer: every block's rows against block 0's
    const ClusterLayer& yl = p.ly[L - 1];
    const float* r32 = cluster.map_shared_rank(smem.rows32(yl), 0);
    const __half* r16 = cluster.map_shared_rank(smem.rows16(yl), 0);
    for (int e = tid; e < yl.out * yl.in; e += kClThreads) {
      const int u = e / yl.in, k = e - u * yl.in;
      bad += bits_differ(smem.rows32(yl)[e], r32[e]);
      bad += bits_differ(smem.rows16(yl)[u * yl.ldr + k], r16[u * yl.ldr + k]);
    }
    const float* rb = cluster.map_shared_rank(smem.bias(yl), 0);
    for (int c = tid; c < yl.out; c += kClThreads) bad += bits_differ(smem.bias(yl)[c], rb[c]);
    report_mismatches(bad, p.copy_mismatches);
  }

  // ---- write back what this block owns (block 0 also the replicated last layer)
  __device__ __forceinline__ void write_back() {
    for (int l = 0; l < L; ++l) {
      const ClusterLayer& y = p.ly[l];
      if (y.rep && r != 0) continue;
      const int own = cl_own(y, r), u0 = y.rep ? 0 : r * y.U;
      const float* wr32 = smem.rows32(y);
      for (int e = tid; e < own * y.in; e += kClThreads) {
        const int u = e / y.in, k = e - u * y.in;
        const size_t g = p.woff[l] + static_cast<size_t>(u0 + u) * y.in + k;
        p.params[g] = wr32[e];
        p.params16[g] = __float2half_rn(wr32[e]);
      }
      for (int u = tid; u < own; u += kClThreads) {
        const float v = smem.bias(y)[u];
        p.params[p.boff[l] + u0 + u] = v;
        p.params16[p.boff[l] + u0 + u] = __float2half_rn(v);
      }
    }
  }
};
#endif  // !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

}  // namespace cl

__global__ void __launch_bounds__(kClThreads, 1) p5_cluster_epoch(const __grid_constant__ ClusterParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // clusters are compute capability 9.0's; plan_cluster refuses older GPUs before a launch
#else
  extern __shared__ __align__(128) unsigned char sm[];
  // The --breakdown clock and the next batch's registers are locals of their own, not members of
  // blk: arrays indexed in (not yet unrolled) loops inside blk would keep the compiler from turning
  // blk into registers early, and the loads of p's fields in the loops would stop being hoisted.
  SegmentClock<kClSegments> clock;  // --breakdown (kinds of work: cluster_segment_name)
  cl::ClusterBlock blk(p, sm, clock);
  uint4 nx[kClMaxChunks];  // the next batch's bytes: this thread's 16-byte chunks (fetch_batch -> store_x)
  blk.zero_and_load();  // zero the shared memory, load this block's rows, columns and biases
  if (p.count > 0) blk.fetch_batch(p.i0, nx);
  __syncthreads();  // xtab
  if (p.count > 0) blk.store_x(nx);
  // Every block's shared memory is set before any block writes into another's.
  blk.cluster.sync();
  blk.start_clock();

  for (int t = 0; t < p.count; ++t) {
    const int64_t s = p.s0 + t;
    const int i = p.i0 + t, par = t & 1;
    const bool more = t + 1 < p.count;
    blk.load_labels(i);
    if (more) blk.fetch_batch(i + 1, nx);  // consumed at the end of the step
    blk.forward(par, s);
    blk.backward(par);
    blk.update_first_layer();
    __syncthreads();  // X of this step is consumed
    clock.stamp(6);
    if (more) blk.store_x(nx);
    __syncthreads();
    clock.stamp(7);
  }
  clock.add_to(p.breakdown);

  // tests only: column copies against the row copies they mirror, replicas against block 0's
  if (p.copy_mismatches != nullptr) blk.count_copy_mismatches();
  blk.write_back();  // what this block owns, into p.params and p.params16
  blk.cluster.sync();  // no block leaves while another could still address its shared memory
#endif
}

// ------------------------------------------------------------------ host side

// Checks what the kernel can run (exit 2 otherwise) and picks the cluster size: requested_blocks
// (1 .. 16), or 0 = the largest the GPU runs with the layout fitting (16 on an H100).
inline ClusterPlan plan_cluster(ClusterParams& p, int requested_blocks, int device) {
  const auto refuse = [](const std::string& why) { throw Error(kExitUsage, "--launch cluster: " + why + " (use --launch graph)"); };
  const ClusterDevice dev(device);
  if (dev.cc < 9) refuse("thread-block clusters need compute capability 9.0");
  if (p.L < 2 || p.L > kClMaxLayers) refuse("needs 1 to " + std::to_string(kClMaxLayers - 1) + " hidden layers");
  if (p.B < 1 || p.B > kClRows) refuse("--batch at most " + std::to_string(kClRows));
  if (p.w[0] % 16 != 0) refuse("the input width must be a multiple of 16 (it is " + std::to_string(p.w[0]) + ")");
  if (p.B * p.w[0] > kClMaxChunks * kClThreads * 16) refuse("a batch of at most " + std::to_string(kClMaxChunks * kClThreads * 16) + " bytes");
  if (p.w[p.L] > 8 * kClWarps) refuse("at most " + std::to_string(8 * kClWarps) + " classes");
  if (requested_blocks < 0 || requested_blocks > kClMaxBlocks)
    refuse("--blocks between 1 and " + std::to_string(kClMaxBlocks) + " (the cluster's size)");
  const void* k = reinterpret_cast<const void*>(&p5_cluster_epoch);
  CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  ClusterPlan pl;
  const ClusterSizes sizes(requested_blocks, kClMaxBlocks);
  std::string last = "no cluster size fits";
  for (int nb = sizes.hi; nb >= sizes.lo; --nb) {
    ClusterParams q = p;
    q.NB = nb;
    const size_t smem = cluster_layout(q);
    if (const std::string why = cluster_smem_refusal(nb, smem, dev.smem_optin); !why.empty()) {
      last = why;
      continue;
    }
    if (const std::string why = cluster_run_refusal(k, nb, kClThreads, smem); !why.empty()) {
      last = why;
      continue;
    }
    p = q;
    pl.blocks = nb, pl.smem = smem;
    return pl;
  }
  refuse(last);
  return pl;
}

inline void launch_cluster(const ClusterPlan& pl, const ClusterParams& p, cudaStream_t st) {
  ClusterLaunch(pl.blocks, kClThreads, pl.smem, st).launch(reinterpret_cast<const void*>(&p5_cluster_epoch), p);
}

// Flops and global-memory bytes of one step: the batch's bytes, read by every block, and the labels;
// parameters and activations stay on chip (the DSMEM traffic is not counted as memory bytes).
inline KernelCost cluster_step_cost(const ClusterParams& p, const ClusterPlan& pl) {
  double fwd = 0, bwd = 0;
  for (int l = 0; l < p.L; ++l) {
    const double mac = static_cast<double>(p.B) * p.w[l] * p.w[l + 1];
    fwd += 2 * mac;
    bwd += 2 * mac * (l >= 1 ? 3 : 1);  // weight gradient twice (rows and columns) + data gradient; first layer: weights only
  }
  const double rep = 2.0 * p.B * p.w[p.L - 1] * p.w[p.L] * 2 * (pl.blocks - 1);  // last layer + its update in every block
  KernelCost c;
  c.flops = fwd + bwd + rep;
  c.bytes = static_cast<double>(p.B) * p.w[0] * pl.blocks + p.B * (1 + sizeof(int));
  c.calls = 0;
  return c;
}


}  // namespace mlp
}  // namespace nb
