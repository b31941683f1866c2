// common/mlp/layers.cuh — everything of the straightforward trainer that is not a product: bias
// and activation, dropout, softmax cross-entropy, the loss mean, the backward element-wise kernels,
// bias gradients, the optimizers (Adam, SGD), conversions and the batch from bytes.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "mlp/adam_step.h"
#include "mlp/gemm/0_problem.cuh"
#include "mlp/mlp_common.h"

namespace nb {
namespace mlp {

// ------------------------------------------------------------------ element-wise kernels (phase 4)
// H = act(Z + b): relu on hidden layers; the last layer keeps fp32 logits (T = float, relu=false).
template <class T>
__global__ void bias_act_kernel(const float* __restrict__ z, const float* __restrict__ b, T* __restrict__ h, int rows,
                                int cols, bool relu) {
  const size_t n = static_cast<size_t>(rows) * cols;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float v = z[i] + b[i % cols];
    if (relu) v = fmaxf(v, 0.f);
    h[i] = from_f<T>(v);
  }
}

// Inverted dropout in place; keep[i] = 1 when element i survives (for the backward pass and for
// validation). Mask bits: see mlp_common.h (Philox4x32-10, counter {i, layer, step}).
template <class T>
__global__ void dropout_kernel(T* __restrict__ h, uint8_t* __restrict__ keep, int n, uint64_t key, uint32_t layer,
                               uint64_t step, uint32_t threshold, float scale) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const bool k = dropout_bits_dev(key, layer, step, static_cast<uint32_t>(i)) >= threshold;
    keep[i] = k;
    h[i] = from_f<T>(k ? to_f(h[i]) * scale : 0.f);
  }
}

// One row of softmax cross-entropy: returns the row's loss (logsumexp(z) - z[y]) and writes
// dz[j] = (softmax(z)_j - [j == y]) * inv as T. dz may be z itself (each z[j] is read before dz[j]
// is written): phase 5's persistent kernel turns its logits into dz3 in place.
template <class T>
__device__ __forceinline__ float softmax_ce_row(const float* z, int cols, int y, float inv, T* dz) {
  float mx = -INFINITY;
  for (int j = 0; j < cols; ++j) mx = fmaxf(mx, z[j]);
  float s = 0.f;
  for (int j = 0; j < cols; ++j) s += expf(z[j] - mx);
  const float lse = mx + logf(s);
  const float loss = lse - z[y];
  for (int j = 0; j < cols; ++j) {
    const float pj = expf(z[j] - lse);
    dz[j] = from_f<T>((pj - (j == y ? 1.f : 0.f)) * inv);
  }
  return loss;
}

// Row-wise softmax cross-entropy on fp32 logits [rows, cols]: row_loss[r] = logsumexp - z[label];
// dz = (softmax - onehot) / rows (the gradient of the batch mean), stored as T.
template <class T>
__global__ void softmax_ce_kernel(const float* __restrict__ logits, const int* __restrict__ labels, int rows, int cols,
                                  float* __restrict__ row_loss, T* __restrict__ dz) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  row_loss[r] = softmax_ce_row(logits + static_cast<size_t>(r) * cols, cols, labels[r],
                               1.f / static_cast<float>(rows), dz + static_cast<size_t>(r) * cols);
}

// out[0] = mean(x[0..n)), fixed summation order (one block). flag[0] = 1 if it is not finite.
template <int kThreads = 256>
__global__ void mean_kernel(const float* __restrict__ x, int n, float* __restrict__ out, int* __restrict__ flag) {
  __shared__ double s[kThreads];
  double acc = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) acc += x[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float m = static_cast<float>(s[0] / n);
    out[0] = m;
    if (!isfinite(m)) flag[0] = 1;
  }
}

// dZ = dH * relu'(.) * dropout mask: the output h is > 0 exactly when the unit was active and kept.
template <class T>
__global__ void relu_dropout_bwd_kernel(const float* __restrict__ dh, const T* __restrict__ h,
                                        const uint8_t* __restrict__ keep, float scale, T* __restrict__ dz, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const bool live = to_f(h[i]) > 0.f && (keep == nullptr || keep[i]);
    dz[i] = from_f<T>(live ? dh[i] * scale : 0.f);
  }
}

// db[c] = sum over rows of dz[r][c] (one thread per column, rows in order: deterministic).
template <class T>
__global__ void bias_grad_kernel(const T* __restrict__ dz, int rows, int cols, float* __restrict__ db) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.f;
  for (int r = 0; r < rows; ++r) s += to_f(dz[static_cast<size_t>(r) * cols + c]);
  db[c] = s;
}

// PyTorch's Adam (foreach form): m = lerp(m, g, 1-b1); v = b2 v + (1-b2) g^2;
// p -= step_size * m / (sqrt(v) / bc2_sqrt + eps), step_size = lr / (1 - b1^t),
// bc2_sqrt = sqrt(1 - b2^t). Like PyTorch, the constants are formed in double and rounded to
// float once (1 - 0.999f in float would be off by 1.3e-5 relative). p16 (optional) receives the
// fp16 copy of the new p.
struct AdamHyper {
  float omb1, b2, omb2, eps, step_size, bc2_sqrt;
};
__host__ __device__ inline AdamHyper adam_hyper(double lr, int64_t t, double b1 = 0.9, double b2 = 0.999,
                                                double eps = 1e-8) {
  AdamHyper h;
  h.omb1 = static_cast<float>(1.0 - b1);
  h.b2 = static_cast<float>(b2);
  h.omb2 = static_cast<float>(1.0 - b2);
  h.eps = static_cast<float>(eps);
  h.step_size = static_cast<float>(lr / (1.0 - pow(b1, static_cast<double>(t))));
  h.bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(b2, static_cast<double>(t))));
  return h;
}

// The moments with every rounding spelled out: m + (1 - b1)(g - m) as one fma, and v b2 + ((1 - b2) g) g
// as an fma of the two rounded products. Written as expressions, the second was contracted one way in
// some kernels and the other way in others (the fused pass's bias took fma(v, b2, ((1 - b2) g) g), the
// weights fma(g, (1 - b2) g, v b2)), so two kernels updating one parameter could differ in v's last bit,
// and, through the step, in the parameter (tests/gpu/test_mlp_fused_backward.cu: the cluster tail).
__device__ __forceinline__ void adam_moments(float g, float& m, float& v, const AdamHyper& h) {
  m = __fmaf_rn(h.omb1, __fsub_rn(g, m), m);
  v = __fmaf_rn(__fmul_rn(h.omb2, g), g, __fmul_rn(v, h.b2));
}

__device__ __forceinline__ float adam_apply(float& p, float g, float& m, float& v, const AdamHyper& h) {
  adam_moments(g, m, v, h);
  // A step that cannot change p (adam_step.h: m zero or subnormal) is skipped: same bits, and no
  // division slow path, which a warp runs for all its lanes if one needs it (m == 0: ~4k extra
  // instructions a step in phase 5's persistent kernel; subnormal m, most of MNIST's border
  // pixels after a while: ~0.45 us of its 11 us W1 step, with -ftz=true as the probe).
  if (adam_step_negligible(p, m, h.step_size, h.eps)) return p;
  const float denom = sqrtf(v) / h.bc2_sqrt + h.eps;
  p = __fmaf_rn(-h.step_size, m / denom, p);  // (one fma at every site, as the moments)
  return p;
}

template <class Dummy = void>
__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, __half* __restrict__ p16, size_t n, AdamHyper h) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float pi = p[i], mi = m[i], vi = v[i];
    adam_apply(pi, g[i], mi, vi, h);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (p16) p16[i] = __float2half_rn(pi);
  }
}

template <class Dummy = void>
__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, __half* __restrict__ p16, size_t n,
                           float lr) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float pi = p[i] - lr * g[i];
    p[i] = pi;
    if (p16) p16[i] = __float2half_rn(pi);
  }
}

template <class Dummy = void>
__global__ void to_half_kernel(const float* __restrict__ x, __half* __restrict__ y, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] = __float2half_rn(x[i]);
}

// The host-gathered batch arrives as bytes (B x 784 pixels, then B labels): x = pixel / 255 in T,
// labels as int.
template <class T>
__global__ void bytes_to_batch_kernel(const uint8_t* __restrict__ bytes, int B, int D, T* __restrict__ x,
                                      int* __restrict__ labels) {
  const int n = B * D;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n + B; i += gridDim.x * blockDim.x) {
    if (i < n) x[i] = from_f<T>(static_cast<float>(bytes[i]) / 255.0f);
    else labels[i - n] = bytes[i];
  }
}

// Grid for a grid-stride element-wise kernel over n elements.
inline int ew_blocks(size_t n, int threads = 256, int cap = 4096) {
  size_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<int>(b < static_cast<size_t>(cap) ? b : cap);
}

}  // namespace mlp
}  // namespace nb
