// phase5_batched/5d_cluster.cuh — `--launch cluster`: a whole epoch of W2's MLP (fp16 operands, fp32
// accumulation and master weights, plain SGD, no dropout) as ONE thread-block cluster: up to 16
// blocks on 16 SMs that keep every parameter in their shared memory and exchange activations through
// distributed shared memory, with a hardware cluster barrier between dependent layers.
//
// Why: at W2's h = 128 the graph path's step is 8 dependent kernels of 5-10 us each (~57 us a step)
// on grids of 2-52 blocks: each kernel is a chain of global-memory latencies (weights, activations,
// split-K fix-ups) plus its launch. The whole model is ~0.8 MB (fp32 masters and fp16 copies), so a
// cluster of 16 SMs holds it on chip. A step then costs the block-local work of each layer and one
// cluster barrier per dependency between blocks: L-1 in the forward pass (every block needs all of
// the previous layer's outputs) and L-2 in the backward pass.
//
// Who holds what (block r of NB; layer l maps in_l -> out_l; hidden layer l's units are split in
// ceil(out_l / NB) per block, block r owning units u0 = r * U .. ):
//   * row copy of layer l: the rows W_l[u0 .. u0+U) (the weights into its own units), fp32 master
//     + fp16 copy, and their biases. The last layer (out = classes) is replicated: every block holds
//     all of its rows, updated identically everywhere.
//   * column copy of layer l >= 1: the columns W_l[:, c0 .. c0+U_{l-1}) for the block's own units of
//     layer l-1 (fp32 + fp16), so the backward-data product dZ_{l-1}[:, own] = dZ_l · W_l[:, own]
//     needs no reduction between blocks. Both copies are updated from the same fp16 operands in the
//     same tensor-core k-steps, so they stay bit-identical (the GPU tests count mismatches).
//   * the full activations H_l (B x out_l, fp16) and the full output gradients dZ_l of the hidden
//     layers above the first: every block writes its own columns into every block's copy (DSMEM
//     stores), then the cluster barrier. Only the first hidden layer's H is double-buffered (by step
//     parity): it is the one write of step t+1 that can come before the first barrier of t+1, while a
//     slower block still reads H_0 of step t in its updates. Every other write comes after that
//     barrier, which no block passes before all have finished step t.
// One step (batch i):
//   forward, l = 0 .. L-2: Z = A · W_l[own]^T (WMMA m32n8k16, warps split over units and K), bias,
//     ReLU, fp16 -> own columns of H_l, pushed to every block; cluster barrier.
//   last layer (every block): logits, softmax cross-entropy, dZ = (p - onehot)/B in fp16.
//   backward, l = L-1 .. 1: dZ_{l-1}[:, own] = (dZ_l · W_l[:, own]) * relu'(H_{l-1}) (WMMA), pushed
//     (l-1 >= 1) or kept (l-1 = 0); arrive at the cluster barrier (l-1 >= 1); layer l's rows,
//     columns and biases updated (WMMA m16n16k16 weight gradients, SGD from the accumulators)
//     while the others arrive; wait.
//   first layer: dW_0[own] = dZ_0[:, own]^T · X (WMMA m8n32k16), SGD straight from the accumulators.
//   The next batch's bytes were loaded into registers at the start of the step; they become the
//   fp16 X (x / 255, the graph path's rounding) after the update.
// Arithmetic as the graph path's: fp16 operands, fp32 accumulation (in a different order), fp32
// bias/softmax/loss, fp32 SGD w - lr * g (one fused multiply-add), the fp16 copy = the master rounded. Not bit-identical
// to the graph path (sum order); bit-reproducible itself (no atomics but the divergence flag).
#pragma once
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "check.cuh"
#include "errors.h"
#include "mlp/kernels.cuh"
#include "mlp/mlp_common.h"
#include "5d_cluster.h"

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
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off = (off + bytes + 127) / 128 * 128;
    return at;
  };
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
  p.total = off;
  return off;
}

namespace cl {

namespace wm = nvcuda::wmma;

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

// The SGD step w - lr * g as one explicit fused multiply-add: both weight copies must round it the
// same way, which `w -= lr * g` leaves to the compiler's contraction choice at each site.
__device__ __forceinline__ float sgd(float w, float g, float lr) { return __fmaf_rn(-lr, g, w); }

// One weight's step: its fp32 master in w32, the fp16 copy (the master rounded) in w16.
__device__ __forceinline__ void sgd_store(float* w32, __half* w16, float g, float lr) {
  const float w = sgd(*w32, g, lr);
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
    const int ch = own / 8, n = NB * kClRows * ch;
    for (int e = threadIdx.x; e < n; e += kClThreads) {
      const int q = e / (kClRows * ch), rest = e - q * kClRows * ch, b = rest / ch, c = rest - b * ch;
      const uint4 v = *reinterpret_cast<const uint4*>(own16 + b * ldo + 8 * c);
      *reinterpret_cast<uint4*>(cluster.map_shared_rank(dst + b * ld + u0 + 8 * c, q)) = v;
    }
  } else {
    const int n = NB * kClRows * own;
    for (int e = threadIdx.x; e < n; e += kClThreads) {
      const int q = e / (kClRows * own), rest = e - q * kClRows * own, b = rest / own, u = rest - b * own;
      *cluster.map_shared_rank(dst + b * ld + u0 + u, q) = own16[b * ldo + u];
    }
  }
}

}  // namespace cl

__global__ void __launch_bounds__(kClThreads, 1) p5_cluster_epoch(const __grid_constant__ ClusterParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // clusters are compute capability 9.0's; plan_cluster refuses older GPUs before a launch
#else
  namespace cg = cooperative_groups;
  namespace wm = nvcuda::wmma;
  extern __shared__ __align__(128) unsigned char sm[];
  cg::cluster_group cluster = cg::this_cluster();
  const int r = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  const int L = p.L, B = p.B, D = p.w[0], NB = p.NB;
  const bool keep_grads = p.G != nullptr;

  auto H16 = [&](size_t o) { return reinterpret_cast<__half*>(sm + o); };
  // the input H_{l-1} of layer l >= 1 in step parity par
  auto act = [&](int l, int par) {
    return H16(p.ly[l].act) + (l == 1 ? static_cast<size_t>(par) * kClRows * p.ly[l].ldr : 0);
  };
  auto F32 = [&](size_t o) { return reinterpret_cast<float*>(sm + o); };
  __half* x16 = H16(p.x16);
  __half* xtab = H16(p.xtab);
  float* scratch = F32(p.scratch);
  float* logits = F32(p.logits);
  __half* own16 = H16(p.own16);
  int* lab = reinterpret_cast<int*>(sm + p.lab);

  // ---- zero everything (the pads of every tile stay 0), then load what this block holds
  for (size_t o = static_cast<size_t>(tid) * 16; o < p.total; o += 16 * kClThreads)
    *reinterpret_cast<uint4*>(sm + o) = make_uint4(0, 0, 0, 0);
  __syncthreads();
  if (tid < 256) xtab[tid] = __float2half_rn(static_cast<float>(tid) / 255.0f);
  for (int l = 0; l < L; ++l) {
    const ClusterLayer& y = p.ly[l];
    const int own = cl_own(y, r), u0 = y.rep ? 0 : r * y.U;
    __half* wr16 = H16(y.wr16);
    float* wr32 = F32(y.wr32);
    for (int e = tid; e < own * y.in; e += kClThreads) {
      const int u = e / y.in, k = e - u * y.in;
      const float v = p.P[p.woff[l] + static_cast<size_t>(u0 + u) * y.in + k];
      wr32[e] = v, wr16[u * y.ldr + k] = __float2half_rn(v);
    }
    for (int u = tid; u < own; u += kClThreads) F32(y.bias)[u] = p.P[p.boff[l] + u0 + u];
    if (l >= 1) {
      const int ownp = cl_own(p.ly[l - 1], r), c0 = r * p.ly[l - 1].U;
      __half* wc16 = H16(y.wc16);
      float* wc32 = F32(y.wc32);
      for (int e = tid; e < ownp * y.out; e += kClThreads) {
        const int k = e / y.out, i = e - k * y.out;
        const float v = p.P[p.woff[l] + static_cast<size_t>(i) * y.in + c0 + k];
        wc32[e] = v, wc16[k * y.ldc + i] = __float2half_rn(v);
      }
    }
  }
  // The batch as 16-byte chunks: chunk q is row q / (D / 16), bytes 16 * (q % (D / 16)).
  const int cpr = D / 16, nchunks = B * cpr;
  uint4 nx[kClMaxChunks];
  auto fetch = [&](int batch) {
#pragma unroll
    for (int j = 0; j < kClMaxChunks; ++j) {
      const int q = tid + j * kClThreads;
      if (q < nchunks) {
        const int row = q / cpr, c = q - row * cpr;
        const int img = __ldg(p.perm + static_cast<size_t>(batch) * B + row);
        nx[j] = __ldg(reinterpret_cast<const uint4*>(p.images + static_cast<size_t>(img) * D) + c);
      }
    }
  };
  auto store_x = [&]() {
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
          const uint32_t lo = __half_as_ushort(xtab[(word >> sh) & 0xFFu]);
          const uint32_t hi = __half_as_ushort(xtab[(word >> (sh + 8)) & 0xFFu]);
          o[e] = lo | (hi << 16);
        }
        uint4* dst = reinterpret_cast<uint4*>(x16 + row * p.ldx + 16 * c);
        dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
        dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
      }
    }
  };
  if (p.count > 0) fetch(p.i0);
  __syncthreads();  // xtab
  if (p.count > 0) store_x();
  // Every block's shared memory is set before any block writes into another's.
  cluster.sync();
  // --breakdown: block 0's thread 0 adds the cycles since its previous stamp to segment k
  const bool timed = p.breakdown != nullptr && r == 0 && tid == 0;
  unsigned long long seg[kClSegments] = {};
  long long t_prev = timed ? clock64() : 0;
  auto stamp = [&](int k) {
    if (timed) {
      const long long now = clock64();
      seg[k] += static_cast<unsigned long long>(now - t_prev);
      t_prev = now;
    }
  };

  for (int t = 0; t < p.count; ++t) {
    const int64_t s = p.s0 + t;
    const int i = p.i0 + t, par = t & 1;
    const bool more = t + 1 < p.count;
    if (tid < B) lab[tid] = __ldg(p.labels + __ldg(p.perm + static_cast<size_t>(i) * B + tid));
    if (more) fetch(i + 1);  // consumed at the end of the step

    // ---- forward: hidden layers (own units, pushed to every block), then the last layer everywhere
    for (int l = 0; l < L; ++l) {
      const ClusterLayer& y = p.ly[l];
      const __half* A = l == 0 ? x16 : act(l, par);
      const int lda = l == 0 ? p.ldx : y.ldr;
      const int nt = y.Upad / 8, ld = y.Upad;
      const int kcn = cl::mm32(A, lda, y.Kpad / 16, H16(y.wr16), y.ldr, nt, scratch);
      const float* bias = F32(y.bias);
      if (!y.rep) {
        const ClusterLayer& yn = p.ly[l + 1];
        const int own = cl_own(y, r), u0 = r * y.U;
        __half* dst = act(l + 1, par);
        __half* hown = H16(y.hown);  // kept: the column copy's update of layer l+1 reads it
        for (int e = tid; e < kClRows * own; e += kClThreads) {
          const int b = e / own, u = e - b * own;
          const float z = cl::part_sum(scratch, kcn, ld, b, u) + bias[u];
          hown[b * p.ldo + u] = __float2half_rn(b < B ? fmaxf(z, 0.f) : 0.f);
        }
        stamp(0);
        cl::push_own(cluster, hown, p.ldo, own, dst, yn.ldr, u0, NB);
        cluster.sync();
        stamp(1);
      } else {
        const int C = y.out, ldl = y.Npad;
        for (int e = tid; e < B * C; e += kClThreads) {
          const int b = e / C, c = e - b * C;
          logits[b * ldl + c] = cl::part_sum(scratch, kcn, ld, b, c);
        }
        __syncthreads();
        // softmax cross-entropy and dZ = (p - onehot) / B: a warp a row, lanes over the classes
        // (the graph path's SoftmaxCEEpi arithmetic per element; max and sum by shuffle trees)
        __half* dz = H16(y.dz);
        float* rloss = F32(p.rloss);
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
            const int yl = lab[b];
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
        stamp(2);
      }
    }

    // ---- backward, l = L-1 .. 1: dZ_{l-1} for the own units of layer l-1, then layer l's updates
    for (int l = L - 1; l >= 1; --l) {
      const ClusterLayer& y = p.ly[l];
      const ClusterLayer& yp = p.ly[l - 1];
      const __half* dz = H16(y.dz);
      const __half* hin = act(l, par);  // H_{l-1}, all units
      const int ownp = cl_own(yp, r), c0 = r * yp.U;
      const int nt = y.Ucpad / 8, ld = y.Ucpad;
      const int kcn = cl::mm32(dz, y.ldc, y.Npad / 16, H16(y.wc16), y.ldc, nt, scratch);
      for (int e = tid; e < kClRows * ownp; e += kClThreads) {
        const int b = e / ownp, k = e - b * ownp;
        const float v = cl::part_sum(scratch, kcn, ld, b, k);
        const bool on = b < B && __half2float(hin[b * y.ldr + c0 + k]) > 0.f;
        const __half d = __float2half_rn(on ? v : 0.f);
        if (l - 1 >= 1) own16[b * p.ldo + k] = d, H16(yp.dzt)[k * kClLdT + b] = d;
        else H16(yp.dz)[k * kClLdT + b] = d;
      }
      stamp(3);
      // Split barrier: arrive right after the pushes, do layer l's updates (nothing another block
      // writes meanwhile: only dZ_{l-1}, which they do not read), then wait.
      if (l - 1 >= 1) {
        cl::push_own(cluster, own16, p.ldo, ownp, H16(yp.dz), yp.ldc, c0, NB);
        cluster.barrier_arrive();
      }
      stamp(4);
      // layer l's updates: rows (own units; all of them for the last layer), columns (own inputs),
      // biases. dW = dZ_l^T · H_{l-1} in 16 x 16 tiles (m = unit of layer l, n = its input, K = the
      // 32 batch rows, WMMA m16n16k16 in two k-steps), SGD from each warp's staged tile. A weight's
      // tile in the row copy and in the column copy multiplies the same fp16 operands at the same
      // k positions in the same k-step order, so both copies get the same gradient bits (tests
      // count mismatches between them: copy_mismatches).
      {
        if (l - 1 == 0) __syncthreads();  // the epilogue's reads of scratch (no push barrier here)
        const int own = cl_own(y, r), u0 = y.rep ? 0 : r * y.U, in = y.in, out = y.out;
        float* wr32 = F32(y.wr32);
        __half* wr16 = H16(y.wr16);
        float* wc32 = F32(y.wc32);
        __half* wc16 = H16(y.wc16);
        const __half* hown = H16(yp.hown);
        const __half* dzt = y.rep ? nullptr : H16(y.dzt);
        const int rmt = y.rep ? y.Npad / 16 : y.U16 / 16, rnt = y.Kpad / 16;  // row tiles
        const int cmt = y.Npad / 16, cnt = cl_round(ownp, 16) / 16;          // column tiles
        const int rtasks = own > 0 ? rmt * rnt : 0, tasks = rtasks + cmt * cnt;
        float* stg = scratch + wid * 256;
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
              if (keep_grads && (!y.rep || r == 0)) p.G[p.woff[l] + static_cast<size_t>(u0 + m) * in + n] = g;
              cl::sgd_store(wr32 + m * in + n, wr16 + m * y.ldr + n, g, p.lr);
            } else {
              if (m >= out || n >= ownp) continue;
              cl::sgd_store(wc32 + n * out + m, wc16 + n * y.ldc + m, g, p.lr);
            }
          }
          __syncwarp();
        }
        float* bias = F32(y.bias);
        for (int u = tid; u < own; u += kClThreads) {
          const float g = cl::col_sum(dz + u0 + u, y.ldc);
          if (keep_grads && (!y.rep || r == 0)) p.G[p.boff[l] + u0 + u] = g;
          bias[u] = cl::sgd(bias[u], g, p.lr);
        }
      }
      stamp(5);
      // The block barrier first: the cluster barrier's arrivals came before the updates, so its wait
      // alone would let a warp start the next product (which writes scratch) while another still
      // reads its staged tile there.
      __syncthreads();
      if (l - 1 >= 1) cluster.barrier_wait();
      stamp(4);
    }

    // ---- first layer: dW0[own] = dZ0[:, own]^T · X (8 x 32 tiles), SGD from the accumulators
    {
      const ClusterLayer& y = p.ly[0];
      const int own = cl_own(y, r), u0 = r * y.U;
      const __half* dzt = H16(y.dz);  // [Upad][kClLdT]: dZ0 transposed
      float* wr32 = F32(y.wr32);
      __half* wr16 = H16(y.wr16);
      float* stg = scratch + wid * 8 * 32;
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
          wm::load_matrix_sync(b, x16 + ks * 16 * p.ldx + n0, p.ldx);
          wm::mma_sync(acc, a, b, acc);
        }
        wm::store_matrix_sync(stg, acc, 32, wm::mem_row_major);
        __syncwarp();
        const int k = n0 + lane;
        for (int m = 0; m < 8; ++m) {
          const int u = mt * 8 + m;
          if (u < own && k < D) {
            const float g = stg[m * 32 + lane];
            if (keep_grads) p.G[p.woff[0] + static_cast<size_t>(u0 + u) * D + k] = g;
            cl::sgd_store(wr32 + u * D + k, wr16 + u * y.ldr + k, g, p.lr);
          }
        }
        __syncwarp();
      }
      float* bias = F32(y.bias);
      for (int u = tid; u < own; u += kClThreads) {
        const float g = cl::col_sum(dzt + u * kClLdT, 1);
        if (keep_grads) p.G[p.boff[0] + u0 + u] = g;
        bias[u] = cl::sgd(bias[u], g, p.lr);
      }
    }
    __syncthreads();  // X of this step is consumed
    stamp(6);
    if (more) store_x();
    __syncthreads();
    stamp(7);
  }
  if (timed)
    for (int k = 0; k < kClSegments; ++k) p.breakdown[k] += seg[k];

  // ---- tests: every column copy against the row copy it mirrors (in the owner's shared memory),
  // and every block's replica of the last layer against block 0's
  if (p.copy_mismatches != nullptr) {
    cluster.sync();  // every block's last updates are done
    unsigned bad = 0;
    for (int l = 1; l < L; ++l) {
      const ClusterLayer& y = p.ly[l];
      const int ownp = cl_own(p.ly[l - 1], r), c0 = r * p.ly[l - 1].U;
      for (int e = tid; e < ownp * y.out; e += kClThreads) {
        const int k = e / y.out, i = e - k * y.out;
        const int q = y.rep ? r : i / y.U, ui = y.rep ? i : i - q * y.U;
        const float* rw32 = cluster.map_shared_rank(F32(y.wr32), q);
        const __half* rw16 = cluster.map_shared_rank(H16(y.wr16), q);
        bad += __float_as_uint(F32(y.wc32)[e]) != __float_as_uint(rw32[ui * y.in + c0 + k]);
        bad += __half_as_ushort(H16(y.wc16)[k * y.ldc + i]) != __half_as_ushort(rw16[ui * y.ldr + c0 + k]);
      }
    }
    // the replicated last layer: every block's rows against block 0's
    const ClusterLayer& yl = p.ly[L - 1];
    const float* r32 = cluster.map_shared_rank(F32(yl.wr32), 0);
    const __half* r16 = cluster.map_shared_rank(H16(yl.wr16), 0);
    for (int e = tid; e < yl.out * yl.in; e += kClThreads) {
      const int u = e / yl.in, k = e - u * yl.in;
      bad += __float_as_uint(F32(yl.wr32)[e]) != __float_as_uint(r32[e]);
      bad += __half_as_ushort(H16(yl.wr16)[u * yl.ldr + k]) != __half_as_ushort(r16[u * yl.ldr + k]);
    }
    const float* rb = cluster.map_shared_rank(F32(yl.bias), 0);
    for (int c = tid; c < yl.out; c += kClThreads) bad += __float_as_uint(F32(yl.bias)[c]) != __float_as_uint(rb[c]);
    if (bad) atomicAdd(p.copy_mismatches, bad);
  }

  // ---- write back what this block owns (block 0 also the replicated last layer)
  for (int l = 0; l < L; ++l) {
    const ClusterLayer& y = p.ly[l];
    if (y.rep && r != 0) continue;
    const int own = cl_own(y, r), u0 = y.rep ? 0 : r * y.U;
    const float* wr32 = F32(y.wr32);
    for (int e = tid; e < own * y.in; e += kClThreads) {
      const int u = e / y.in, k = e - u * y.in;
      const size_t g = p.woff[l] + static_cast<size_t>(u0 + u) * y.in + k;
      p.P[g] = wr32[e];
      p.P16[g] = __float2half_rn(wr32[e]);
    }
    for (int u = tid; u < own; u += kClThreads) {
      const float v = F32(y.bias)[u];
      p.P[p.boff[l] + u0 + u] = v;
      p.P16[p.boff[l] + u0 + u] = __float2half_rn(v);
    }
  }
  cluster.sync();  // no block leaves while another could still address its shared memory
#endif
}

// ------------------------------------------------------------------ host side

// Checks what the kernel can run (exit 2 otherwise) and picks the cluster size: requested_blocks
// (1 .. 16), or 0 = the largest the GPU runs with the layout fitting (16 on an H100).
inline ClusterPlan plan_cluster(ClusterParams& p, int requested_blocks, int device) {
  const auto refuse = [](const std::string& why) { throw Error(kExitUsage, "--launch cluster: " + why + " (use --launch graph)"); };
  int cc = 0, smem_optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (cc < 9) refuse("thread-block clusters need compute capability 9.0");
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
  const int lo = requested_blocks > 0 ? requested_blocks : 1, hi = requested_blocks > 0 ? requested_blocks : kClMaxBlocks;
  std::string last = "no cluster size fits";
  for (int nb = hi; nb >= lo; --nb) {
    ClusterParams q = p;
    q.NB = nb;
    const size_t smem = cluster_layout(q);
    if (smem > static_cast<size_t>(smem_optin)) {
      last = "needs " + std::to_string(smem) + " bytes of shared memory per block with " + std::to_string(nb) +
             " blocks, the GPU offers " + std::to_string(smem_optin);
      continue;
    }
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = nb, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(nb), cfg.blockDim = dim3(kClThreads), cfg.dynamicSmemBytes = smem;
    cfg.attrs = at, cfg.numAttrs = 1;
    int clusters = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, k, &cfg));
    if (clusters < 1) {
      last = "a cluster of " + std::to_string(nb) + " blocks with " + std::to_string(smem) + " bytes each cannot run";
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
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = pl.blocks, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(pl.blocks), cfg.blockDim = dim3(kClThreads), cfg.dynamicSmemBytes = pl.smem, cfg.stream = st;
  cfg.attrs = at, cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, p5_cluster_epoch, p));
  CHECK_LAUNCH();
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
