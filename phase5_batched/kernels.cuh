// phase5_batched/kernels.cuh — phase 4's GEMM mainloop (phase4_mlp/kernels.cuh) with everything
// around it fused in: the operand loaders and the epilogues do the work that phase 4 spent
// separate kernels and host round trips on.
//
//   GatherView      the first layer's A operand (and the B operand of its weight gradient) read
//                   straight from the byte-valued data set resident on the GPU: row r of step s is
//                   image perm[(s mod steps_per_epoch) * batch + r]; pixels become x/255 in T.
//   FwdHiddenEpi    z + b -> ReLU -> inverted dropout (Philox bits, the same as phase 4) -> T.
//   SoftmaxCEEpi    last layer: z + b -> softmax cross-entropy -> dZ = (p - onehot)/B in T; the
//                   batch loss is summed tile by tile in a fixed order and stored in
//                   step_loss[s]; a non-finite loss records the first such step (atomicMin).
//   BwdReluEpi      dZ_prev = dH * (h > 0) * 1/(1-p)  (h > 0 exactly when active and kept).
//   UpdateEpi       the weight gradient never reaches memory: each element of dW = dZ^T · H is
//                   consumed by Adam (or SGD) in the epilogue, which updates the fp32 master
//                   weight (and its fp16 copy). Blocks of the first column tile also reduce dZ
//                   over the batch and update the bias.
//   EvalEpi         test set: argmax and cross-entropy per row, counted per tile (read once).
// The step index comes from device memory (StepRef: *base + i) so that a CUDA graph captured once
// replays every epoch; the host only writes `base` and the epoch's permutation before a replay.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../phase4_mlp/kernels.cuh"

namespace nb {
namespace mlp {

struct StepRef {
  const int64_t* base = nullptr;
  int i = 0;
  __device__ __forceinline__ int64_t get() const { return *base + i; }
};

// Which image each row of a batch is. perm == nullptr: rows row_offset, row_offset+1, ... (eval).
struct RowMap {
  const int* perm = nullptr;
  StepRef step;
  int64_t steps_per_epoch = 1;
  int batch = 0;
  int row_offset = 0;
  __device__ __forceinline__ int image(int r) const {
    if (perm == nullptr) return row_offset + r;
    const int64_t s = step.get();
    return perm[(s % steps_per_epoch) * batch + r];
  }
};

template <class T>
struct GatherView {
  static constexpr bool kContig = true;  // (row, pixel): pixels contiguous
  const uint8_t* data = nullptr;         // images, 784 bytes each
  int ld = 784;
  RowMap rows;

  template <int V>
  __device__ __forceinline__ void load(int r, int c, int nrows, int ncols, T (&v)[V]) const {
    if (r >= nrows) {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = from_f<T>(0.f);
      return;
    }
    const uint8_t* src = data + static_cast<size_t>(rows.image(r)) * ld + c;
    uint8_t b[V];
    if (c + V <= ncols && (ld % V) == 0) {  // c is a multiple of V: the V bytes are aligned
      if constexpr (V == 8) *reinterpret_cast<uint2*>(b) = __ldg(reinterpret_cast<const uint2*>(src));
      else *reinterpret_cast<uint32_t*>(b) = __ldg(reinterpret_cast<const uint32_t*>(src));
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) b[i] = (c + i < ncols) ? src[i] : 0;
    }
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = from_f<T>(static_cast<float>(b[i]) / 255.0f);
  }
};

template <class T>
struct FwdHiddenEpi {
  const float* bias = nullptr;
  T* out = nullptr;  // [M, N]
  bool dropout = false;
  uint64_t key = 0;
  uint32_t layer = 0, threshold = 0;
  float scale = 1.f;
  StepRef step;
  __device__ void operator()(const float* cs, int m0, int n0, int M, int N) const {
    const int64_t s = dropout ? step.get() : 0;
    for (int e = threadIdx.x; e < kBM * kBN; e += blockDim.x) {
      const int r = e / kBN, c = e % kBN, m = m0 + r, n = n0 + c;
      if (m >= M || n >= N) continue;
      float v = fmaxf(cs[r * kLdc + c] + bias[n], 0.f);
      if (dropout) {
        const uint32_t bits = dropout_bits_dev(key, layer, static_cast<uint64_t>(s), static_cast<uint32_t>(m * N + n));
        v = bits >= threshold ? v * scale : 0.f;
      }
      out[static_cast<size_t>(m) * N + n] = from_f<T>(v);
    }
  }
};

// Last layer: needs the whole row of logits in one tile (N <= kBN, one column tile).
template <class T>
struct SoftmaxCEEpi {
  const float* bias = nullptr;
  const uint8_t* labels = nullptr;
  RowMap rows;
  T* dz = nullptr;                 // [M, N]
  float* tile_loss = nullptr;      // one partial per row tile
  unsigned* counter = nullptr;     // row tiles finished (reset by the last one)
  float* step_loss = nullptr;      // [total steps]
  unsigned long long* bad_step = nullptr;  // first step with a non-finite loss (init ~0ull)
  StepRef step;
  __device__ void operator()(const float* cs, int m0, int /*n0*/, int M, int N) const {
    __shared__ float s_loss[kBM];
    __shared__ bool s_last;
    const int r = threadIdx.x;
    if (r < kBM) {
      const int m = m0 + r;
      float loss = 0.f;
      if (m < M) {
        const float* z = cs + r * kLdc;
        float mx = -INFINITY;
        for (int j = 0; j < N; ++j) mx = fmaxf(mx, z[j] + bias[j]);
        float se = 0.f;
        for (int j = 0; j < N; ++j) se += expf(z[j] + bias[j] - mx);
        const float lse = mx + logf(se);
        const int y = labels[rows.image(m)];
        loss = lse - (z[y] + bias[y]);
        const float inv = 1.f / static_cast<float>(M);
        for (int j = 0; j < N; ++j) {
          const float p = expf(z[j] + bias[j] - lse);
          dz[static_cast<size_t>(m) * N + j] = from_f<T>((p - (j == y ? 1.f : 0.f)) * inv);
        }
      }
      s_loss[r] = loss;
    }
    __syncthreads();
    const int tiles = (M + kBM - 1) / kBM;
    if (threadIdx.x == 0) {
      float s = 0.f;
      for (int i = 0; i < kBM; ++i) s += s_loss[i];
      tile_loss[m0 / kBM] = s;
      __threadfence();
      s_last = atomicAdd(counter, 1u) == static_cast<unsigned>(tiles - 1);
    }
    __syncthreads();
    if (threadIdx.x == 0 && s_last) {
      __threadfence();
      double total = 0;
      for (int i = 0; i < tiles; ++i) total += __ldcg(tile_loss + i);
      const float mean = static_cast<float>(total / M);
      const int64_t s = step.get();
      step_loss[s] = mean;
      if (!isfinite(mean)) atomicMin(bad_step, static_cast<unsigned long long>(s));
      *counter = 0u;
    }
  }
};

template <class T>
struct BwdReluEpi {
  const T* h = nullptr;  // forward output of this layer [M, N] (after ReLU and dropout)
  T* dz = nullptr;       // [M, N]
  float scale = 1.f;     // 1 / (1 - p)
  __device__ void operator()(const float* cs, int m0, int n0, int M, int N) const {
    for (int e = threadIdx.x; e < kBM * kBN; e += blockDim.x) {
      const int r = e / kBN, c = e % kBN, m = m0 + r, n = n0 + c;
      if (m >= M || n >= N) continue;
      const size_t i = static_cast<size_t>(m) * N + n;
      dz[i] = from_f<T>(to_f(h[i]) > 0.f ? cs[r * kLdc + c] * scale : 0.f);
    }
  }
};

// dW[out, in] tile -> optimizer. M = out, N = in. dz: [batch, out] (the A operand, transposed).
template <class T>
struct UpdateEpi {
  float* W = nullptr;
  float* mW = nullptr;
  float* vW = nullptr;
  __half* W16 = nullptr;  // fp16 copy (fp16 runs), else null
  float* b = nullptr;
  float* mb = nullptr;
  float* vb = nullptr;
  const T* dz = nullptr;
  int batch = 0;
  bool adam = true;
  float lr = 0, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  StepRef step;
  __device__ void operator()(const float* cs, int m0, int n0, int M, int N) const {
    __shared__ AdamHyper s_h;
    __shared__ float s_part[8][kBM];
    if (threadIdx.x == 0) {
      const double t = static_cast<double>(step.get() + 1);
      s_h.lr = lr, s_h.b1 = b1, s_h.b2 = b2, s_h.eps = eps;
      s_h.step_size = static_cast<float>(static_cast<double>(lr) / (1.0 - pow(static_cast<double>(b1), t)));
      s_h.bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(b2), t)));
    }
    __syncthreads();
    const AdamHyper h = s_h;
    for (int e = threadIdx.x; e < kBM * kBN; e += blockDim.x) {
      const int r = e / kBN, c = e % kBN, m = m0 + r, n = n0 + c;
      if (m >= M || n >= N) continue;
      const size_t i = static_cast<size_t>(m) * N + n;
      const float g = cs[r * kLdc + c];
      float p = W[i];
      if (adam) {
        float mi = mW[i], vi = vW[i];
        adam_apply(p, g, mi, vi, h);
        mW[i] = mi, vW[i] = vi;
      } else {
        p -= lr * g;
      }
      W[i] = p;
      if (W16) W16[i] = __float2half_rn(p);
    }
    if (n0 != 0) return;
    // Bias: db[m] = sum over the batch of dz[k][m]; slices of the batch per thread group, added
    // in slice order (deterministic).
    const int slices = blockDim.x / kBM;  // 8 (SIMT) or 4 (WMMA)
    const int r = threadIdx.x % kBM, q = threadIdx.x / kBM, m = m0 + r;
    float part = 0.f;
    if (m < M)
      for (int k = q; k < batch; k += slices) part += to_f(dz[static_cast<size_t>(k) * M + m]);
    s_part[q][r] = part;
    __syncthreads();
    if (q == 0 && m < M) {
      float g = 0.f;
      for (int i = 0; i < slices; ++i) g += s_part[i][r];
      float p = b[m];
      if (adam) {
        float mi = mb[m], vi = vb[m];
        adam_apply(p, g, mi, vi, h);
        mb[m] = mi, vb[m] = vi;
      } else {
        p -= lr * g;
      }
      b[m] = p;
    }
  }
};

struct EvalEpi {
  const float* bias = nullptr;
  const uint8_t* labels = nullptr;  // test labels
  int row_offset = 0;
  int* tile_correct = nullptr;      // indexed by (row_offset + m0) / kBM
  float* tile_loss = nullptr;
  __device__ void operator()(const float* cs, int m0, int /*n0*/, int M, int N) const {
    __shared__ float s_loss[kBM];
    __shared__ int s_ok[kBM];
    const int r = threadIdx.x;
    if (r < kBM) {
      const int m = m0 + r;
      float loss = 0.f;
      int ok = 0;
      if (m < M) {
        const float* z = cs + r * kLdc;
        float mx = -INFINITY;
        int arg = 0;
        for (int j = 0; j < N; ++j) {
          const float v = z[j] + bias[j];
          if (v > mx) mx = v, arg = j;
        }
        float se = 0.f;
        for (int j = 0; j < N; ++j) se += expf(z[j] + bias[j] - mx);
        const int y = labels[row_offset + m];
        loss = mx + logf(se) - (z[y] + bias[y]);
        ok = (arg == y);
      }
      s_loss[r] = loss, s_ok[r] = ok;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float s = 0.f;
      int c = 0;
      for (int i = 0; i < kBM; ++i) s += s_loss[i], c += s_ok[i];
      tile_loss[(row_offset + m0) / kBM] = s;
      tile_correct[(row_offset + m0) / kBM] = c;
    }
  }
};

// Applies an epilogue to an fp32 matrix already in global memory (the cuBLASLt path: the product
// comes from cuBLASLt, the same epilogue functor does the rest). One block per 32x64 tile.
template <class Tag, class Epi>
__global__ void __launch_bounds__(128) epilogue_kernel(const float* __restrict__ z, int M, int N, Epi epi) {
  __shared__ float cs[kBM * kLdc];
  const int tiles_m = (M + kBM - 1) / kBM;
  const int bm = blockIdx.x % tiles_m, bn = blockIdx.x / tiles_m;
  const int m0 = bm * kBM, n0 = bn * kBN;
  for (int e = threadIdx.x; e < kBM * kBN; e += blockDim.x) {
    const int r = e / kBN, c = e % kBN, m = m0 + r, n = n0 + c;
    cs[r * kLdc + c] = (m < M && n < N) ? z[static_cast<size_t>(m) * N + n] : 0.f;
  }
  __syncthreads();
  epi(cs, m0, n0, M, N);
}

template <class Tag, class Epi>
inline void launch_epilogue(const float* z, int M, int N, const Epi& epi, cudaStream_t st) {
  const int blocks = ((M + kBM - 1) / kBM) * ((N + kBN - 1) / kBN);
  epilogue_kernel<Tag, Epi><<<blocks, 128, 0, st>>>(z, M, N, epi);
  CHECK_LAUNCH();
}

// cuBLASLt path: X[B, 784] (T) gathered from the byte data set.
template <class T>
__global__ void gather_kernel(T* __restrict__ x, const uint8_t* __restrict__ data, RowMap rows, int B, int D) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < B * D; i += gridDim.x * blockDim.x) {
    const int r = i / D, c = i % D;
    x[i] = from_f<T>(static_cast<float>(data[static_cast<size_t>(rows.image(r)) * D + c]) / 255.0f);
  }
}

// Start of an epoch: write the step base and this epoch's permutation (Feistel, mlp_common.h).
template <class Dummy = void>
__global__ void epoch_begin_kernel(int* __restrict__ perm, int n, Perm p, int64_t* __restrict__ base, int64_t b) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) perm[i] = static_cast<int>(perm_apply(p, static_cast<uint32_t>(i)));
  if (i == 0) *base = b;
}

// The cuBLASLt path's optimizer: every parameter in one launch (p, g, m, v flat; m == nullptr:
// SGD). The step's bias corrections come from the step number in device memory.
template <class Dummy = void>
__global__ void flat_update_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                   float* __restrict__ v, __half* __restrict__ p16, size_t n, float lr, StepRef sr) {
  __shared__ AdamHyper s_h;
  if (threadIdx.x == 0) {
    const double t = static_cast<double>(sr.get() + 1);
    s_h.lr = lr, s_h.b1 = 0.9f, s_h.b2 = 0.999f, s_h.eps = 1e-8f;
    s_h.step_size = static_cast<float>(static_cast<double>(lr) / (1.0 - pow(0.9, t)));
    s_h.bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(0.999, t)));
  }
  __syncthreads();
  const AdamHyper h = s_h;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float pi = p[i];
    if (m) {
      float mi = m[i], vi = v[i];
      adam_apply(pi, g[i], mi, vi, h);
      m[i] = mi, v[i] = vi;
    } else {
      pi -= lr * g[i];
    }
    p[i] = pi;
    if (p16) p16[i] = __float2half_rn(pi);
  }
}

// Kernel-name tags of phase 5.
struct p5_fwd_gather {};
struct p5_fwd_hidden {};
struct p5_fwd_softmax_ce {};
struct p5_bwd_data {};
struct p5_update {};
struct p5_update_and_bwd_data {};
struct p5_update_pair {};
struct p5_eval {};
struct p5_epi_hidden {};
struct p5_epi_softmax_ce {};
struct p5_epi_bwd_relu {};

}  // namespace mlp
}  // namespace nb
