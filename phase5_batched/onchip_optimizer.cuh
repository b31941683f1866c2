// phase5_batched/onchip_optimizer.cuh — the one-launch rungs' optimizer step of one parameter in shared
// memory. Three arithmetic variants, each kept as its rung computes it; all three take Adam's moments
// from common/mlp's adam_moments (every rounding spelled out):
//   * opt_apply (5c, 5e's unfused splits): common/mlp's adam_apply (skips a negligible step with an
//     early return), SGD as `w -= lr * g` (contracted by the compiler);
//   * opt_apply2 (5e's fused pass): two of adam_apply's updates as straight-line code, the skip as a
//     select, so that their square roots and divisions overlap;
//   * RoundedOpt (5f): every rounding explicit (__fmaf_rn ...) and the hardware's approximate root and
//     reciprocal, so that two copies of a weight updated at two sites of a kernel get the same bits;
//     its SGD step is sgd_fma, 5d's.
#pragma once
#include <cuda_runtime.h>

#include "mlp/kernels.cuh"

namespace nb {
namespace mlp {

__device__ __forceinline__ void opt_apply(float& w, float g, float* m, float* v, bool adam, float lr,
                                          const AdamHyper& h) {
  if (adam) adam_apply(w, g, *m, *v, h);
  else w -= lr * g;
}

// Two Adam updates as straight-line code, so that their dependent chains (a square root and two
// divisions each) overlap: adam_apply's arithmetic, with the skip of a negligible step
// (adam_step.h) as a select instead of an early return. A skipped step divides 1 by a normal
// number instead (no division slow path) and keeps p. SGD: p -= lr g.
__device__ __forceinline__ void opt_apply2(float (&w)[2], const float (&g)[2], float* m0, float* m1, float* v0,
                                           float* v1, bool adam, float lr, const AdamHyper& h) {
  if (!adam) {
    w[0] -= lr * g[0], w[1] -= lr * g[1];
    return;
  }
  float* mp[2] = {m0, m1};
  float* vp[2] = {v0, v1};
  float m[2], v[2], q[2];
  bool skip[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    m[i] = *mp[i], v[i] = *vp[i];
    adam_moments(g[i], m[i], v[i], h);
    skip[i] = adam_step_negligible(w[i], m[i], h.step_size, h.eps);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float denom = sqrtf(skip[i] ? 1.f : v[i]) / h.bc2_sqrt + h.eps;
    q[i] = (skip[i] ? 1.f : m[i]) / denom;
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float np = __fmaf_rn(-h.step_size, q[i], w[i]);
    w[i] = skip[i] ? w[i] : np;
    *mp[i] = m[i], *vp[i] = v[i];
  }
}

// The SGD step w - lr * g as one explicit fused multiply-add (5d, 5f): copies of a weight updated at
// two sites must round it the same way, which `w -= lr * g` leaves to the compiler's contraction
// choice at each site.
__device__ __forceinline__ float sgd_fma(float w, float g, float lr) { return __fmaf_rn(-lr, g, w); }

// 5f's step. Every rounding is explicit, so that two copies of a weight updated at two sites of the
// kernel (W2's rows and its column copy) get the same bits. Adam's root and division are the
// hardware's approximations (sqrt.approx, 2-ulp reciprocal): no slow path, ~13 instructions an element.
__device__ __forceinline__ float sqrt_approx(float x) {
  float r;
  asm("sqrt.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
struct RoundedOpt {
  bool adam;
  float lr;
  AdamHyper h;
  float inv_bc2;  // 1 / sqrt(1 - b2^t)
  __device__ __forceinline__ void apply(float& w, float g, float& m, float& v) const {
    if (!adam) {
      w = sgd_fma(w, g, lr);
      return;
    }
    adam_moments(g, m, v, h);
    const float denom = __fmaf_rn(sqrt_approx(v), inv_bc2, h.eps);
    w = __fmaf_rn(-h.step_size, __fdividef(m, denom), w);
  }
};

}  // namespace mlp
}  // namespace nb
