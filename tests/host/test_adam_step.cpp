// tests/host/test_adam_step.cpp — adam_step_negligible (common/mlp/adam_step.h): wherever it lets
// adam_apply skip a step, the IEEE float formula of that step (as the device computes it, with or
// without a fused multiply-add) leaves the weight's bits unchanged; m == 0 included. Fresh random cases every run,
// plus the tightest corner: p a power of two, the step pointing towards 0, the denominator = eps.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "mlp/adam_step.h"

namespace {

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The device's Adam step for weight p (adam_apply in common/mlp/kernels.cuh), after m and v were
// updated: both roundings of its last line (separate multiply and subtract, or one fused).
struct Step {
  float plain, fused;
};
Step ieee_step(float p, float m, float v, float step_size, float bc2_sqrt, float eps) {
  const float denom = std::sqrt(v) / bc2_sqrt + eps;
  const float q = m / denom;
  const float prod = step_size * q;
  return {p - prod, std::fma(-step_size, q, p)};
}

}  // namespace

TEST_CASE("adam: a skipped subnormal step would not have changed the weight (random cases)") {
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  // eps as small as 1e-30 and steps up to 1e3: there the bound on step_size |m| decides (with
  // PyTorch's eps of 1e-8 a subnormal m's step is below p's ulp for any |p| >= 2^-64 anyway).
  const float eps_choices[] = {1e-8f, 1e-6f, 1e-12f, 1e-20f, 1e-26f, 1e-30f};
  long cases = 0, skipped = 0, wrong = 0;
  float first_p = 0, first_m = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float sign_p = (rng() & 1) ? -1.f : 1.f, sign_m = (rng() & 1) ? -1.f : 1.f;
    const float p = sign_p * static_cast<float>(std::ldexp(1.0 + u01(rng), -64 - static_cast<int>(rng() % 4) +
                                                                                static_cast<int>(rng() % 68)));
    const float m = (rng() % 5) ? sign_m * from_bits(1u + static_cast<uint32_t>(rng() % 0x7FFFFFu))  // subnormal
                                : sign_m * static_cast<float>(std::ldexp(1.0 + u01(rng), -126 + static_cast<int>(rng() % 30)));
    const float v = (rng() % 3) ? static_cast<float>(std::pow(10.0, -20.0 + 18.0 * u01(rng))) : 0.f;
    const float step_size = static_cast<float>(std::pow(10.0, -6.0 + 9.0 * u01(rng)));
    const float bc2_sqrt = static_cast<float>(0.03 + 0.97 * u01(rng));
    const float eps = eps_choices[rng() % 6];
    ++cases;
    if (!nb::mlp::adam_step_negligible(p, m, step_size, eps)) continue;
    ++skipped;
    const Step s = ieee_step(p, m, v, step_size, bc2_sqrt, eps);
    if (bits(s.plain) != bits(p) || bits(s.fused) != bits(p)) {
      if (wrong++ == 0) first_p = p, first_m = m;
    }
  }
  INFO("first counterexample p=" << first_p << " m=" << first_m);
  CHECK(wrong == 0);
  CHECK(skipped > cases / 4);  // the predicate is exercised, not vacuous
}

TEST_CASE("adam: the tightest skipped steps, and what is never skipped") {
  long checked = 0, wrong = 0;
  for (int k = -64; k <= 3; ++k)
    for (float sign : {1.f, -1.f})
      for (float step_size : {1e-6f, 1e-3f, 1e-2f, 10.f})
        for (float eps : {1e-8f, 1e-6f, 1e-20f, 1e-30f}) {
          const float p = sign * std::ldexp(1.f, k);
          // the largest |m| the predicate accepts, pointing the step towards 0 (m has p's sign)
          float am = std::nextafter(0x1p-126f, 0.f);
          while (am > 0.f && !nb::mlp::adam_step_negligible(p, sign * am, step_size, eps)) am = std::nextafter(am * 0.999f, 0.f);
          if (am == 0.f) continue;
          const Step s = ieee_step(p, sign * am, 0.f, step_size, 1.f, eps);  // v = 0: denominator eps
          ++checked;
          if (bits(s.plain) != bits(p) || bits(s.fused) != bits(p)) ++wrong;
        }
  CHECK(checked > 200);
  CHECK(wrong == 0);
  // never skipped: normal m, tiny or zero p, NaN
  CHECK_FALSE(nb::mlp::adam_step_negligible(1.f, 0x1p-126f, 1e-3f, 1e-8f));
  CHECK_FALSE(nb::mlp::adam_step_negligible(0x1p-70f, 0x1p-140f, 1e-3f, 1e-8f));
  CHECK_FALSE(nb::mlp::adam_step_negligible(0.f, 0x1p-140f, 1e-3f, 1e-8f));
  CHECK_FALSE(nb::mlp::adam_step_negligible(1.f, std::nanf(""), 1e-3f, 1e-8f));
  CHECK(nb::mlp::adam_step_negligible(1.f, 0x1p-140f, 1e-3f, 1e-8f));
  // m == 0 (either sign): skipped for any p, and the IEEE step leaves every p's value as it was
  // (compared as values: for p = -0 and m = -0 IEEE gives -0 - (-0) = +0, the skip keeps -0)
  for (float p : {0.f, -0.f, 0x1p-149f, -0x1p-70f, 1.f, -3.5f})
    for (float m : {0.f, -0.f}) {
      CHECK(nb::mlp::adam_step_negligible(p, m, 1e-3f, 1e-8f));
      const Step s = ieee_step(p, m, 0.f, 1e-3f, 1.f, 1e-8f);
      CHECK(s.plain == p);
      CHECK(s.fused == p);
    }
}
