// tests/host/test_linreg_harness.cpp — the --validate check of the linreg phases
// (common/linreg_harness.h) against a host model of what the kernels compute: fp32 residuals and
// per-thread fp32 sums, float64 totals, the float64 step rounded to fp32 parameters. Such a run
// must pass, also where the loss vanishes (one point, fitted exactly: the loss is all fp32
// rounding, so only the absolute floor can judge it); broken runs (a lost point, the losses one
// epoch off, a wrong learning rate, a NaN) must still fail.
#include <cmath>
#include <cstdio>
#include <vector>

#include <doctest/doctest.h>

#include "linreg_harness.h"

namespace {

// The kernels' arithmetic on the train split (every point in one fp32 accumulator, as a thread
// with a handful of points does). drop: points left out (a broken kernel).
nb::LinregOutcome model_run(const std::vector<float>& x, const std::vector<float>& y, double lr, int epochs,
                            size_t drop = 0) {
  const size_t n = x.size(), nt = nb::linreg_train_count(n) - drop, ntest = nb::linreg_test_count(n);
  float w = nb::linreg_init_w(), b = nb::linreg_init_b();
  nb::LinregOutcome o;
  for (int e = 0; e < epochs; ++e) {
    float l = 0.f, gx = 0.f, g = 0.f;
    for (size_t i = 0; i < nt; ++i) {
      const float r = std::fma(w, x[i], b) - y[i];
      l = std::fma(r, r, l);
      gx = std::fma(r, x[i], gx);
      g += r;
    }
    o.loss.push_back(double(l) / double(nt));
    w = static_cast<float>(double(w) - lr * (2.0 * double(gx) / double(nt)));
    b = static_cast<float>(double(b) - lr * (2.0 * double(g) / double(nt)));
  }
  o.w = w;
  o.b = b;
  if (ntest) {
    float l = 0.f;
    const size_t t0 = nb::linreg_train_count(x.size());
    for (size_t i = t0; i < t0 + ntest; ++i) {
      const float r = std::fma(w, x[i], b) - y[i];
      l = std::fma(r, r, l);
    }
    o.test_loss = double(l) / double(ntest);
  }
  return o;
}

void points(size_t n, std::vector<float>& x, std::vector<float>& y) {
  x.resize(n);
  y.resize(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(-1.9 + 0.77 * double(i % 7) + 0.0013 * double(i % 97));
    y[i] = static_cast<float>(3.1 * x[i] + 1.7 + 0.2 * std::sin(double(i) * 1.3));
  }
}

bool validates(const std::vector<float>& x, const std::vector<float>& y, double lr, int epochs,
               const nb::LinregOutcome& got) {
  bool ok = false;
  nb::linreg_validate(x.data(), y.data(), x.size(), lr, epochs, got, &ok);
  return ok;
}

}  // namespace

TEST_CASE("linreg validate: a correct fp32 run passes, also where the loss vanishes (n = 1)") {
  for (size_t n : {size_t(1), size_t(2), size_t(7), size_t(4095)})
    for (double lr : {0.01, 0.025}) {
      std::vector<float> x, y;
      points(n, x, y);
      CAPTURE(n);
      CAPTURE(lr);
      CHECK(validates(x, y, lr, 200, model_run(x, y, lr, 200)));
    }
}

TEST_CASE("linreg validate: the loss floor is tiny next to the loss of any real fit") {
  std::vector<float> x, y;
  points(4095, x, y);
  const nb::LinregAbsSums s = nb::linreg_abs_sums(x.data(), y.data(), x.size());
  const nb::LinregSums t = nb::linreg_sums(x.data(), y.data(), x.size());
  const double L = nb::linreg_loss(t, 3.0, 1.7);
  CHECK(nb::linreg_loss_abs_floor(s, 3.0, 1.7, L, 0.01) < 0.5 * nb::kLinregLossTol * L);  // the relative tolerance rules
  CHECK(nb::linreg_loss_abs_floor(s, 3.0, 1.7, 0.0, 0.01) < 2e-9);
}

TEST_CASE("linreg validate: broken runs fail") {
  for (size_t n : {size_t(1), size_t(7), size_t(4095)}) {
    std::vector<float> x, y;
    points(n, x, y);
    CAPTURE(n);
    const double lr = 0.025;
    nb::LinregOutcome shifted = model_run(x, y, lr, 201);  // the losses one epoch late
    shifted.loss.erase(shifted.loss.begin());
    CHECK_FALSE(validates(x, y, lr, 200, shifted));
    CHECK_FALSE(validates(x, y, lr, 200, model_run(x, y, 0.9 * lr, 200)));  // a wrong step
    nb::LinregOutcome nan = model_run(x, y, lr, 200);
    nan.loss[100] = NAN;
    CHECK_FALSE(validates(x, y, lr, 200, nan));
    nb::LinregOutcome off = model_run(x, y, lr, 200);  // a loss off by 1% (still large at epoch 20)
    off.loss[20] *= 1.01;
    CHECK_FALSE(validates(x, y, lr, 200, off));
    nb::LinregOutcome tail = model_run(x, y, lr, 200);  // the converged loss off by 1e-9 (n = 1: ~rounding x 100)
    tail.loss.back() += n == 1 ? 1e-9 : 1e-3 * tail.loss.back() * 1.5;
    CHECK_FALSE(validates(x, y, lr, 200, tail));
    if (n > 2) CHECK_FALSE(validates(x, y, lr, 200, model_run(x, y, lr, 200, 1)));  // a lost point
  }
}
