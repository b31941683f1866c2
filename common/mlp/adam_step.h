// common/mlp/adam_step.h — when an Adam step cannot change a float32 weight (host and device code).
//
// A weight whose gradient has always been 0 (a pixel that is 0 in every image so far) has m == 0:
// its step is exactly 0. One whose gradient has been 0 for hundreds of steps (a border pixel of
// MNIST) keeps a first moment m that shrinks by beta1 every step until it is subnormal: the step,
// step_size * m / (sqrt(v_hat) + eps), is then far below the weight's ulp. Either way computing it
// costs the division's slow path (0 / x, or a subnormal operand). adam_apply (kernels.cuh) skips
// it when this predicate holds; tests/host/test_adam_step.cpp checks against the IEEE formula that
// the skip changes no bit (m == 0: no value; a zero weight keeps its sign where IEEE could turn
// -0 into +0).
#pragma once

#if defined(__CUDACC__)
#define NB_ADAM_HD __host__ __device__
#else
#define NB_ADAM_HD
#endif

namespace nb {
namespace mlp {

// m == 0 (the step is exactly 0), or: m subnormal, |p| >= 2^-64 and step_size |m| < |p| eps 2^-26.
// Since the denominator is at least
// eps, the step is below |p| 2^-25.9 (with the roundings), under half the spacing of floats next
// to p even where p is a power of two and the step points towards 0 (the spacing below p is half
// its ulp): p - step rounds to p, with or without a fused multiply-add. NaNs make it false.
NB_ADAM_HD inline bool adam_step_negligible(float p, float m, float step_size, float eps) {
  const float am = m < 0.f ? -m : m, ap = p < 0.f ? -p : p;
  return m == 0.f || (am < 0x1p-126f && ap >= 0x1p-64f && step_size * am < ap * (eps * 0x1p-26f));
}

}  // namespace mlp
}  // namespace nb
