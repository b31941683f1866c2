// tests/host/test_step_bound.cpp — common/mlp/step_bound.h's count of ReLU gates near zero, which
// decides where the GPU tests' norm-wise gradient check applies: a hidden unit whose pre-activation
// is zero (no weights, no bias) is counted for every row of the batch, one far from zero never, one
// dropped by dropout never; counting changes no bound.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "mlp/step_bound.h"

TEST_CASE("step_bound counts the kept hidden units whose pre-activation lies within rounding of zero") {
  const std::vector<int> layers = {5, 3, 4, 2};
  const int B = 7;
  nb::MlpParams p = nb::mlp_zeros(layers);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.5, 1.0);
  std::vector<double> x(static_cast<size_t>(B) * layers[0]);
  for (double& v : x) v = u(rng);  // positive inputs
  for (size_t l = 0; l < p.W.size(); ++l) {
    for (double& w : p.W[l]) w = u(rng);  // positive weights: every pre-activation well above zero
    for (double& b : p.b[l]) b = 0.1;
  }
  std::vector<int> y(B);
  for (int r = 0; r < B; ++r) y[r] = r % 2;
  const auto count = [&](const nb::MlpParams& q, const std::vector<std::vector<double>>* masks) {
    const nb::MlpForward f = nb::mlp_forward(q, x.data(), y.data(), B, masks);
    size_t n = 99;
    const std::vector<double> with = nbtest::mlp_grad_error_bound(q, f, y.data(), B, masks, &n);
    CHECK(with == nbtest::mlp_grad_error_bound(q, f, y.data(), B, masks));  // counting changes no bound
    return n;
  };
  CHECK(count(p, nullptr) == 0u);
  // the first layer's unit 1 gets no weights and no bias: z = 0 exactly, in every row
  nb::MlpParams q = p;
  for (int i = 0; i < layers[0]; ++i) q.W[0][static_cast<size_t>(layers[0]) + i] = 0.0;
  q.b[0][1] = 0.0;
  CHECK(count(q, nullptr) == static_cast<size_t>(B));
  // the same unit dropped (mask 0) in rows 0 and 3: those rows' gates decide nothing
  std::vector<std::vector<double>> masks = {std::vector<double>(static_cast<size_t>(B) * layers[1], 2.0),
                                            std::vector<double>(static_cast<size_t>(B) * layers[2], 2.0)};
  masks[0][0 * layers[1] + 1] = 0.0, masks[0][3 * layers[1] + 1] = 0.0;
  CHECK(count(q, &masks) == static_cast<size_t>(B - 2));
}
