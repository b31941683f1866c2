// tests/host/test_mlp_validate.cpp — the MLP trainers' --validate (common/mlp/validate.h) against a
// simulated device: one that does every step right (the float64 step, stored in float32) passes
// at awkward shapes, for Adam and SGD, with and without dropout; one broken the ways a kernel
// breaks (a sample left out of the batch sums, bias gradients never written, a scale missing,
// the dropout mask of another step, a wrong Adam constant, a learning rate 1% off) fails, on the
// check that should catch it.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "mlp/validate.h"

namespace {

using nb::mlp::StepSeen;
using nb::mlp::ValidateSpec;

enum class Fault { none, drop_sample, no_bias_grad, grad_scale, wrong_mask, adam_beta2, lr_off, flip_gate, flip_gate_and_scale };

// A device that trains with the float64 reference and stores its results in float32, with at most
// one fault. Fresh inputs each step from a fixed seed.
struct SimDevice {
  ValidateSpec spec;
  double dropout = 0;
  Fault fault = Fault::none;
  int flip_layer = 1, flip_unit = 0;  // flip_gate: the hidden unit (activation layer, unit) made dead
  nb::MlpParams p;
  nb::AdamState adam;
  std::mt19937_64 rng{12345};

  SimDevice(ValidateSpec s, double drop, Fault f) : spec(std::move(s)), dropout(drop), fault(f) {
    p = nb::mlp_zeros(spec.layers);
    std::uniform_real_distribution<double> u(-1, 1);
    for (size_t l = 0; l < p.W.size(); ++l) {
      const double k = 1 / std::sqrt(static_cast<double>(spec.layers[l]));
      for (double& w : p.W[l]) w = static_cast<float>(u(rng) * k);
      for (double& b : p.b[l]) b = static_cast<float>(u(rng) * k);
    }
    adam = nb::adam_init(spec.layers);
  }

  std::vector<std::vector<double>> draw_masks(int B) {
    std::vector<std::vector<double>> masks;
    std::uniform_real_distribution<double> u(0, 1);
    for (size_t l = 1; l + 1 < spec.layers.size() && dropout > 0; ++l) {
      std::vector<double> m(static_cast<size_t>(B) * spec.layers[l]);
      for (double& v : m) v = u(rng) >= dropout ? 1 / (1 - dropout) : 0.0;
      masks.push_back(std::move(m));
    }
    return masks;
  }

  static void to_float(std::vector<double>& v) {
    for (double& x : v) x = static_cast<float>(x);
  }

  StepSeen step(int k) {
    const int B = spec.batch, D = spec.layers[0], C = spec.layers.back();
    StepSeen s;
    std::uniform_real_distribution<double> u(0, 1);
    s.x.resize(static_cast<size_t>(B) * D);
    for (double& x : s.x) x = u(rng) < 0.8 ? 0.0 : static_cast<float>(std::floor(u(rng) * 256) / 255);
    s.labels.resize(B);
    for (int& y : s.labels) y = static_cast<int>(u(rng) * C) % C;
    s.masks = draw_masks(B);
    std::vector<std::vector<double>> used = s.masks;
    if (fault == Fault::wrong_mask) used = draw_masks(B);  // the masks of some other step
    const auto* mp = used.empty() ? nullptr : &used;
    nb::MlpForward f = nb::mlp_forward(p, s.x.data(), s.labels.data(), B, mp);
    if ((fault == Fault::flip_gate || fault == Fault::flip_gate_and_scale) && k == 0) {
      // a gate at exactly zero decided "on" (as fp32 sums may): the unit passes its delta back (the
      // first step only: its update gives the unit weights, and its pre-activations leave zero)
      const size_t out = static_cast<size_t>(spec.layers[flip_layer]);
      for (int r = 0; r < B; ++r) {
        double& a = f.act[flip_layer][static_cast<size_t>(r) * out + flip_unit];
        if (a == 0) a = 1e-300;
      }
    }
    nb::MlpParams g = nb::mlp_backward(p, f, s.labels.data(), B, mp);
    if (fault == Fault::flip_gate_and_scale && k == 0)  // and an error the gate cannot explain, in the last layer
      for (double& v : g.W.back()) v *= 1.001;
    if (fault == Fault::drop_sample) {  // the batch sums stop one row short (then scaled as if complete)
      std::vector<std::vector<double>> m1;
      for (auto& m : used) m1.emplace_back(m.begin(), m.end() - spec.layers[&m - used.data() + 1]);
      nb::MlpForward f1 = nb::mlp_forward(p, s.x.data(), s.labels.data(), B - 1, m1.empty() ? nullptr : &m1);
      g = nb::mlp_backward(p, f1, s.labels.data(), B - 1, m1.empty() ? nullptr : &m1);
      for (auto& w : g.W)
        for (double& v : w) v *= (B - 1.0) / B;
      for (auto& b : g.b)
        for (double& v : b) v *= (B - 1.0) / B;
    }
    if (fault == Fault::no_bias_grad)
      for (auto& b : g.b) std::fill(b.begin(), b.end(), 0.0);
    if (fault == Fault::grad_scale)  // e.g. 1/B applied twice in one layer's epilogue... or 1/(B+1)
      for (double& v : g.W.back()) v *= B / (B + 1.0);
    s.loss = static_cast<float>(f.loss);
    s.grads = nb::mlp::flatten(g);
    to_float(s.grads);
    const nb::MlpParams gf = nb::mlp::unflatten(spec.layers, s.grads);  // the device's optimizer reads float gradients
    if (spec.adam) nb::mlp_adam_step(p, gf, adam, spec.lr, 0.9, fault == Fault::adam_beta2 ? 0.99 : 0.999);
    else nb::mlp_sgd_step(p, gf, fault == Fault::lr_off ? spec.lr * 1.01 : spec.lr);
    s.params = nb::mlp::flatten(p);
    to_float(s.params);
    p = nb::mlp::unflatten(spec.layers, s.params);  // the device keeps float32 weights
    return s;
  }
};

nb::mlp::ValidationResult run(const ValidateSpec& spec, double dropout, Fault fault, int K = 3, int flip_layer = 0) {
  SimDevice dev(spec, dropout, fault);
  if (flip_layer > 0) {  // that unit gets no weights and no bias: its pre-activation is 0 in every row
    dev.flip_layer = flip_layer;
    const size_t in = static_cast<size_t>(spec.layers[flip_layer - 1]);
    std::fill(dev.p.W[flip_layer - 1].begin(), dev.p.W[flip_layer - 1].begin() + static_cast<std::ptrdiff_t>(in), 0.0);
    dev.p.b[flip_layer - 1][0] = 0.0;
  }
  std::vector<double> initial = nb::mlp::flatten(dev.p);
  return nb::mlp::validate_steps(spec, initial, K, [&](int k) { return dev.step(k); });
}

bool fails(const nb::mlp::ValidationResult& v, const std::string& check) {
  const auto& e = v.errors.at(check);
  return e.is_null() || e.get<double>() > v.tolerances.at(check).get<double>();
}

}  // namespace

TEST_CASE("mlp validate: tolerances follow the shape and the precision") {
  const auto w1 = nb::mlp::mlp_tolerances({784, 128, 64, 10}, 32, false);
  const auto w1h = nb::mlp::mlp_tolerances({784, 128, 64, 10}, 32, true);
  const auto big = nb::mlp::mlp_tolerances({784, 200, 200, 10}, 1000, false);
  CHECK(w1.reductions == doctest::Approx(std::sqrt(32.) + std::sqrt(784.) + std::sqrt(128.) + std::sqrt(64.) +
                                         std::sqrt(64.) + std::sqrt(10.)));
  CHECK(w1h.grad == doctest::Approx(w1.grad * 8192));  // 2^-11 against 2^-24
  CHECK(big.grad > w1.grad);
  CHECK(w1.grad < 1e-5);  // fp32 at W1: tighter than the fixed 1e-5 it replaces
  CHECK(w1.grad == doctest::Approx(2 * std::ldexp(1.0, -24) * w1.reductions));
  CHECK(w1h.grad < 0.1);  // fp16 at W1: 6.3e-2 (a step of one broken the ways below errs by 0.15 or more)
}

TEST_CASE("mlp validate: a device that does every step right passes at awkward shapes") {
  for (bool adam : {true, false})
    for (double drop : {0.0, 0.2})
      for (int batch : {1, 17, 33}) {
        ValidateSpec spec{{60, 37, 23, 10}, batch, false, adam, adam ? 1e-3 : 0.01};
        CAPTURE(adam);
        CAPTURE(drop);
        CAPTURE(batch);
        nb::mlp::ValidationResult v = run(spec, drop, Fault::none);
        CHECK(v.passed);
      }
  ValidateSpec three{{50, 200, 3}, 64, false, true, 1e-3};
  CHECK(run(three, 0.2, Fault::none).passed);
}

TEST_CASE("mlp validate: a broken step fails the check that should catch it") {
  ValidateSpec adam{{60, 37, 23, 10}, 33, false, true, 1e-3};
  ValidateSpec sgd{{60, 37, 23, 10}, 33, false, false, 0.01};
  CHECK(fails(run(adam, 0.2, Fault::drop_sample), "gradients"));
  CHECK(fails(run(adam, 0.2, Fault::no_bias_grad), "gradients"));
  CHECK(fails(run(adam, 0.0, Fault::grad_scale), "gradients"));
  CHECK(fails(run(adam, 0.2, Fault::wrong_mask), "gradients"));
  CHECK(fails(run(adam, 0.2, Fault::adam_beta2), "parameter_update"));
  CHECK(fails(run(sgd, 0.0, Fault::lr_off), "parameter_update"));
  // the same faults at fp16's tolerances (2^13 times wider) are still caught where they are large
  ValidateSpec half = adam;
  half.half_operands = true;
  CHECK(fails(run(half, 0.2, Fault::drop_sample), "gradients"));
  CHECK(fails(run(half, 0.2, Fault::no_bias_grad), "gradients"));
  CHECK(fails(run(half, 0.2, Fault::wrong_mask), "gradients"));
}

TEST_CASE("validate counts the ReLU gates within rounding of zero (a dead unit in every row, none else)") {
  const std::vector<int> layers = {6, 4, 3};
  const int B = 5;
  nb::MlpParams p = nb::mlp_zeros(layers);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.5, 1.0);
  std::vector<double> x(static_cast<size_t>(B) * layers[0]);
  for (double& v : x) v = u(rng);
  for (size_t l = 0; l < p.W.size(); ++l) {
    for (double& w : p.W[l]) w = u(rng);
    for (double& b : p.b[l]) b = 0.1;
  }
  const std::vector<int> y = {0, 1, 2, 0, 1};
  const double fp32 = std::ldexp(1.0, -24);
  CHECK(nb::mlp::gates_near_zero(p, nb::mlp_forward(p, x.data(), y.data(), B), B, fp32, nullptr) == 0u);
  // unit 2 with no weights and no bias: z = 0 in every row
  for (int i = 0; i < layers[0]; ++i) p.W[0][2 * static_cast<size_t>(layers[0]) + i] = 0.0;
  p.b[0][2] = 0.0;
  CHECK(nb::mlp::gates_near_zero(p, nb::mlp_forward(p, x.data(), y.data(), B), B, fp32, nullptr) == static_cast<size_t>(B));
  // unit 2 as x_0 - x_1 with x_1 = x_0 (1 + 1e-3): |z| / (|x_0| + |x_1|) = 5e-4, near zero at fp16's
  // u (8 * 2^-11 * sqrt(6) = 0.0096), not at fp32's (1.2e-6)
  p.W[0][2 * static_cast<size_t>(layers[0])] = 1.0, p.W[0][2 * static_cast<size_t>(layers[0]) + 1] = -1.0;
  for (int r = 0; r < B; ++r) x[static_cast<size_t>(r) * layers[0] + 1] = x[static_cast<size_t>(r) * layers[0]] * (1 + 1e-3);
  const nb::MlpForward f = nb::mlp_forward(p, x.data(), y.data(), B);
  CHECK(nb::mlp::gates_near_zero(p, f, B, fp32, nullptr) == 0u);
  CHECK(nb::mlp::gates_near_zero(p, f, B, std::ldexp(1.0, -11), nullptr) == static_cast<size_t>(B));
}

TEST_CASE("mlp validate: a ReLU gate at zero decided the other way passes; an error besides it still fails") {
  // The device's fp32 sums may put a pre-activation of exactly-cancelling terms on either side of
  // zero: a dead unit decided "on" moves its row (and, above the first hidden layer, every layer
  // below) far past the norm-wise tolerance, within fp32's rounding bound of either decision.
  for (int layer : {1, 2}) {
    CAPTURE(layer);
    ValidateSpec sgd{{60, 37, 23, 10}, 17, false, false, 0.01};
    const nb::mlp::ValidationResult v = run(sgd, 0.0, Fault::flip_gate, 3, layer);
    CHECK(v.passed);
    CHECK(fails(run(sgd, 0.0, Fault::flip_gate_and_scale, 3, layer), "gradients"));
    ValidateSpec adam{{60, 37, 23, 10}, 17, false, true, 1e-3};
    CHECK(run(adam, 0.0, Fault::flip_gate, 3, layer).passed);
  }
  // fp16 operands keep the norm-wise check (the bound is fp32's); a dead unit decided as the
  // reference decides it passes there too.
  ValidateSpec half{{60, 37, 23, 10}, 17, true, false, 0.01};
  CHECK(run(half, 0.0, Fault::none, 3, 1).passed);
}
