// tests/host/test_reference.cpp — the float64 references every phase validates against
// (common/reference.h), checked against independent computations: brute-force per-point gradient
// descent, the closed-form least-squares solution, central finite differences, hand-worked Adam.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "errors.h"
#include "reference.h"

namespace {

struct Points {
  std::vector<float> x, y;
};

Points random_points(size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> ux(0.0, 10.0);
  std::normal_distribution<double> noise(0.0, 0.5);
  Points p;
  for (size_t i = 0; i < n; ++i) {
    float x = static_cast<float>(ux(rng));
    p.x.push_back(x);
    p.y.push_back(static_cast<float>(0.7 * x + 0.3 + noise(rng)));
  }
  return p;
}

// Per-point float64 full-batch gradient descent on MSE: no sums, no algebra.
nb::LinregTrace brute_force_gd(const Points& pts, double w, double b, double lr, int epochs) {
  nb::LinregTrace t;
  const double n = static_cast<double>(pts.x.size());
  for (int e = 0; e < epochs; ++e) {
    double loss = 0, gw = 0, gb = 0;
    for (size_t i = 0; i < pts.x.size(); ++i) {
      double r = w * pts.x[i] + b - pts.y[i];
      loss += r * r;
      gw += 2 * r * pts.x[i];
      gb += 2 * r;
    }
    t.loss.push_back(loss / n);
    w -= lr * gw / n;
    b -= lr * gb / n;
  }
  t.w = w;
  t.b = b;
  return t;
}

nb::MlpParams random_params(const std::vector<int>& layers, std::mt19937_64& rng) {
  nb::MlpParams p = nb::mlp_zeros(layers);
  std::normal_distribution<double> nd(0.0, 0.7);
  for (auto& W : p.W)
    for (double& v : W) v = nd(rng);
  for (auto& b : p.b)
    for (double& v : b) v = 0.3 * nd(rng);
  return p;
}

// Flattens all gradients (W then b, layer by layer).
std::vector<double> flatten(const nb::MlpParams& g) {
  std::vector<double> out;
  for (size_t l = 0; l < g.W.size(); ++l) {
    out.insert(out.end(), g.W[l].begin(), g.W[l].end());
    out.insert(out.end(), g.b[l].begin(), g.b[l].end());
  }
  return out;
}

// Central finite differences of the mean loss with respect to every parameter.
std::vector<double> numeric_grad(nb::MlpParams p, const std::vector<double>& x, const std::vector<int>& labels,
                                 int batch, const std::vector<std::vector<double>>* masks) {
  const double h = 1e-6;
  std::vector<double> out;
  auto loss = [&](const nb::MlpParams& q) { return nb::mlp_forward(q, x.data(), labels.data(), batch, masks).loss; };
  for (size_t l = 0; l < p.W.size(); ++l) {
    for (std::vector<double>* vec : {&p.W[l], &p.b[l]})
      for (double& v : *vec) {
        double keep = v;
        v = keep + h;
        double up = loss(p);
        v = keep - h;
        double down = loss(p);
        v = keep;
        out.push_back((up - down) / (2 * h));
      }
  }
  return out;
}

struct MlpCase {
  std::vector<int> layers;
  int batch;
  bool dropout;
};

}  // namespace

TEST_CASE("linreg: sums and loss agree with a direct mean squared error") {
  const float x[] = {0.0f, 1.0f, 2.0f, 3.5f}, y[] = {1.0f, 2.0f, 2.5f, -1.0f};
  nb::LinregSums s = nb::linreg_sums(x, y, 4);
  CHECK(s.n == 4);
  CHECK(s.sx == 6.5);
  CHECK(s.sy == 4.5);
  CHECK(s.sxx == 17.25);
  CHECK(s.sxy == 3.5);
  CHECK(s.syy == 12.25);
  Points pts = random_points(999, 7);
  nb::LinregSums r = nb::linreg_sums(pts.x.data(), pts.y.data(), pts.x.size());
  for (double w : {-1.0, 0.0, 0.83, 2.5})
    for (double b : {-0.5, 0.7645, 3.0}) {
      double mse = 0;
      for (size_t i = 0; i < pts.x.size(); ++i) mse += std::pow(w * pts.x[i] + b - pts.y[i], 2);
      mse /= double(pts.x.size());
      CHECK(nb::linreg_loss(r, w, b) == doctest::Approx(mse).epsilon(1e-12));
    }
}

TEST_CASE("linreg: reference equals brute-force per-point gradient descent (n = 999, 1001)") {
  for (size_t n : {size_t(999), size_t(1001)}) {
    Points pts = random_points(n, unsigned(n));
    nb::LinregSums s = nb::linreg_sums(pts.x.data(), pts.y.data(), n);
    nb::LinregTrace ref = nb::linreg_reference(s, 0.83, 0.7645, 0.01, 200);
    nb::LinregTrace bf = brute_force_gd(pts, 0.83, 0.7645, 0.01, 200);
    INFO("n=", n);
    REQUIRE(ref.loss.size() == 200);
    CHECK(ref.w == doctest::Approx(bf.w).epsilon(1e-12));
    CHECK(ref.b == doctest::Approx(bf.b).epsilon(1e-12));
    CHECK(nb::rel_error(ref.loss, bf.loss) < 1e-12);
    CHECK(ref.loss[0] == doctest::Approx(nb::linreg_loss(s, 0.83, 0.7645)).epsilon(1e-15));  // loss[0] = at the start
  }
}

TEST_CASE("linreg: many small steps converge to the closed-form least-squares solution") {
  Points pts = random_points(1001, 3);
  nb::LinregSums s = nb::linreg_sums(pts.x.data(), pts.y.data(), pts.x.size());
  const double w_star = (s.n * s.sxy - s.sx * s.sy) / (s.n * s.sxx - s.sx * s.sx);
  const double b_star = (s.sy - w_star * s.sx) / s.n;
  nb::LinregTrace t = nb::linreg_reference(s, 0.83, 0.7645, 0.01, 20000);
  CHECK(t.w == doctest::Approx(w_star).epsilon(1e-9));
  CHECK(t.b == doctest::Approx(b_star).epsilon(1e-9));
  CHECK(w_star == doctest::Approx(0.7).epsilon(0.05));  // the data really is y ~ 0.7 x + 0.3
  size_t increases = 0;
  for (size_t e = 1; e < t.loss.size(); ++e) increases += t.loss[e] > t.loss[e - 1] * (1 + 1e-12);
  CHECK(increases == 0);
  CHECK(t.loss.back() == doctest::Approx(nb::linreg_loss(s, w_star, b_star)).epsilon(1e-9));
  nb::LinregTrace none = nb::linreg_reference(s, 0.83, 0.7645, 0.01, 0);
  CHECK(none.loss.empty());
  CHECK(none.w == 0.83);
  CHECK(none.b == 0.7645);
}

TEST_CASE("mlp: zero weights give uniform probabilities and loss log(classes)") {
  nb::MlpParams p = nb::mlp_zeros({4, 6, 3});
  std::vector<double> x{1, 2, 3, 4, -1, -2, -3, -4};
  std::vector<int> labels{0, 2};
  nb::MlpForward f = nb::mlp_forward(p, x.data(), labels.data(), 2);
  CHECK(f.loss == doctest::Approx(std::log(3.0)).epsilon(1e-15));
  for (double q : f.probs) CHECK(q == doctest::Approx(1.0 / 3).epsilon(1e-15));
  REQUIRE(f.act.size() == 3);
  CHECK(f.act[0] == x);
  CHECK(f.act[1].size() == 12);
  std::vector<int> bad{0, 3};
  CHECK_THROWS_AS(nb::mlp_forward(p, x.data(), bad.data(), 2), nb::Error);
}

TEST_CASE("mlp: a hand-sized forward pass (2-2-2, ReLU, softmax CE)") {
  nb::MlpParams p = nb::mlp_zeros({2, 2, 2});
  p.W[0] = {1, -1, 2, 0.5};  // row-major [out][in]: h0 = x0 - x1, h1 = 2 x0 + 0.5 x1
  p.b[0] = {0, -1};
  p.W[1] = {1, 0, 0, 1};
  p.b[1] = {0.5, 0};
  std::vector<double> x{1, 3};  // h = relu(1 - 3, 2 + 1.5 - 1) = (0, 2.5); logits = (0 + 0.5, 2.5)
  std::vector<int> y{1};
  nb::MlpForward f = nb::mlp_forward(p, x.data(), y.data(), 1);
  CHECK(f.act[1] == std::vector<double>{0, 2.5});
  CHECK(f.act[2] == std::vector<double>{0.5, 2.5});
  // label 1: loss = -log(e^2.5 / (e^0.5 + e^2.5)) = log(1 + e^-2)
  CHECK(f.loss == doctest::Approx(std::log(1 + std::exp(-2.0))).epsilon(1e-15));
  CHECK(f.probs[1] == doctest::Approx(1 / (1 + std::exp(-2.0))).epsilon(1e-15));
}

TEST_CASE("mlp: backward matches central finite differences (rel err <= 1e-6)") {
  std::mt19937_64 rng(2024);
  const std::vector<MlpCase> cases = {{{7, 5, 3}, 3, false}, {{7, 5, 3}, 3, true},     {{6, 9, 4, 3}, 5, false},
                                      {{6, 9, 4, 3}, 5, true}, {{3, 2}, 2, false},      {{11, 13, 1 + 6}, 1, true}};
  for (const MlpCase& c : cases) {
    nb::MlpParams p = random_params(c.layers, rng);
    std::normal_distribution<double> nd(0.0, 1.0);
    std::vector<double> x(size_t(c.batch) * size_t(c.layers[0]));
    for (double& v : x) v = nd(rng);
    std::vector<int> labels;
    for (int r = 0; r < c.batch; ++r) labels.push_back(int(rng() % uint64_t(c.layers.back())));
    std::vector<std::vector<double>> masks;
    if (c.dropout) {
      const double keep = 0.6;
      for (size_t l = 1; l + 1 < c.layers.size(); ++l) {
        std::vector<double> m(size_t(c.batch) * size_t(c.layers[l]));
        for (double& v : m) v = (rng() % 1000) < 600 ? 1.0 / keep : 0.0;
        masks.push_back(m);
      }
    }
    const auto* mp = c.dropout ? &masks : nullptr;
    nb::MlpForward f = nb::mlp_forward(p, x.data(), labels.data(), c.batch, mp);
    nb::MlpParams g = nb::mlp_backward(p, f, labels.data(), c.batch, mp);
    std::vector<double> analytic = flatten(g), numeric = numeric_grad(p, x, labels, c.batch, mp);
    REQUIRE(analytic.size() == numeric.size());
    double err = nb::rel_error(analytic, numeric);
    INFO("layers ", c.layers.size(), " first width ", c.layers[0], " batch ", c.batch, " dropout ", c.dropout,
         " rel err ", err);
    CHECK(err <= 1e-6);
    double norm = 0;
    for (double v : analytic) norm += v * v;
    CHECK(norm > 1e-12);  // a non-trivial gradient, not two zero vectors agreeing
  }
}

TEST_CASE("mlp: dropout mask zeroes a unit's gradient path and scales kept units") {
  std::mt19937_64 rng(5);
  nb::MlpParams p = random_params({4, 3, 2}, rng);
  std::vector<double> x{0.5, -1, 2, 0.25};
  std::vector<int> y{1};
  std::vector<std::vector<double>> all_dropped{{0, 0, 0}};
  nb::MlpForward f = nb::mlp_forward(p, x.data(), y.data(), 1, &all_dropped);
  CHECK(f.act[1] == std::vector<double>{0, 0, 0});
  nb::MlpParams g = nb::mlp_backward(p, f, y.data(), 1, &all_dropped);
  for (double v : g.W[0]) CHECK(v == 0.0);  // nothing flows back through dropped units
  std::vector<std::vector<double>> scaled{{2, 2, 2}};
  nb::MlpForward plain = nb::mlp_forward(p, x.data(), y.data(), 1);
  nb::MlpForward s = nb::mlp_forward(p, x.data(), y.data(), 1, &scaled);
  for (int k = 0; k < 3; ++k) CHECK(s.act[1][k] == 2 * plain.act[1][k]);
}

TEST_CASE("mlp: SGD step is p - lr * g exactly") {
  std::mt19937_64 rng(9);
  nb::MlpParams p = random_params({5, 4, 3}, rng), g = random_params({5, 4, 3}, rng);
  nb::MlpParams q = p;
  nb::mlp_sgd_step(q, g, 0.125);
  for (size_t l = 0; l < 2; ++l) {
    for (size_t k = 0; k < p.W[l].size(); ++k) CHECK(q.W[l][k] == p.W[l][k] - 0.125 * g.W[l][k]);
    for (size_t k = 0; k < p.b[l].size(); ++k) CHECK(q.b[l][k] == p.b[l][k] - 0.125 * g.b[l][k]);
  }
}

TEST_CASE("mlp: Adam matches hand-worked steps of PyTorch's formula") {
  // One parameter per tensor: layers {1, 1} gives W (1x1) and b (1).
  nb::MlpParams p = nb::mlp_zeros({1, 1}), g = nb::mlp_zeros({1, 1});
  nb::AdamState s = nb::adam_init({1, 1});
  p.W[0][0] = 1.0;
  p.b[0][0] = -0.25;
  g.W[0][0] = 0.5;
  g.b[0][0] = -2e-9;  // smaller than eps: the step is damped, not a full lr
  nb::mlp_adam_step(p, g, s, 0.1);
  // t=1: m = 0.1 g, v = 0.001 g^2, m_hat = g, v_hat = g^2, step = lr * g / (|g| + eps).
  // W: 1 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.900000002;  b: -0.25 + 0.1 * 2e-9 / 3e-9 = -0.2333...
  CHECK(s.t == 1);
  CHECK(p.W[0][0] == doctest::Approx(0.900000002).epsilon(1e-15));
  CHECK(p.b[0][0] == doctest::Approx(-0.23333333333333334).epsilon(1e-14));
  CHECK(s.m.W[0][0] == doctest::Approx(0.05).epsilon(1e-15));
  CHECK(s.v.W[0][0] == doctest::Approx(0.00025).epsilon(1e-15));
  // t=2 with g = -1.5: m = 0.9*0.05 - 0.15 = -0.105, v = 0.999*0.00025 + 0.001*2.25 = 0.00249975,
  // m_hat = -0.105/0.19, v_hat = 0.00249975/0.001999, W = 0.900000002 - 0.1 m_hat/(sqrt(v_hat)+eps).
  g.W[0][0] = -1.5;
  g.b[0][0] = 0.0;
  nb::mlp_adam_step(p, g, s, 0.1);
  CHECK(s.t == 2);
  CHECK(s.m.W[0][0] == doctest::Approx(-0.105).epsilon(1e-14));
  CHECK(s.v.W[0][0] == doctest::Approx(0.00249975).epsilon(1e-14));
  CHECK(p.W[0][0] == doctest::Approx(0.9494189848877799).epsilon(1e-14));
  const double expected = 0.900000002 - 0.1 * (-0.105 / 0.19) / (std::sqrt(0.00249975 / 0.001999) + 1e-8);
  CHECK(p.W[0][0] == doctest::Approx(expected).epsilon(1e-14));
}

TEST_CASE("rel_error: definition and edge cases") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK(nb::rel_error(std::vector<double>{3, 4}, std::vector<double>{3, 4}) == 0.0);
  CHECK(nb::rel_error(std::vector<double>{3, 4}, std::vector<double>{0, 4}) == doctest::Approx(0.75));
  CHECK(nb::rel_error(std::vector<double>{0, 0}, std::vector<double>{0, 0}) == 0.0);
  CHECK(nb::rel_error(std::vector<double>{}, std::vector<double>{}) == 0.0);
  CHECK(nb::rel_error(std::vector<double>{1e-30, 0}, std::vector<double>{0, 0}) == inf);
  CHECK(std::isnan(nb::rel_error(std::vector<double>{nan, 1}, std::vector<double>{1, 1})));
  CHECK(std::isnan(nb::rel_error(std::vector<double>{1, 1}, std::vector<double>{1, nan})));
  CHECK_FALSE(nb::rel_error(std::vector<double>{nan}, std::vector<double>{1}) <= 1.0);  // never passes a tolerance
  CHECK(nb::rel_error(std::vector<double>{inf, 1}, std::vector<double>{1, 1}) == inf);
  CHECK(nb::rel_error(std::vector<double>{2e200, 0}, std::vector<double>{1e200, 0}) == doctest::Approx(1.0));
  CHECK(nb::rel_error(std::vector<double>{2e-200}, std::vector<double>{1e-200}) == doctest::Approx(1.0));
  CHECK_THROWS_AS(nb::rel_error(std::vector<double>{1}, std::vector<double>{1, 2}), nb::Error);
  const float a[] = {1.0f, 2.0f, 2.0f};
  const double b[] = {1.0, 2.0, 2.0 + 1e-7};
  CHECK(nb::rel_error(a, b, 3) == doctest::Approx(1e-7 / 3).epsilon(1e-6));
  const float fn[] = {std::numeric_limits<float>::quiet_NaN()};
  const double one[] = {1.0};
  CHECK(std::isnan(nb::rel_error(fn, one, 1)));
}
