// common/reference.cpp — float64 CPU references (see reference.h for the conventions).
// Plain loops, no cleverness: these are what every GPU result is checked against.
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "errors.h"

namespace nb {

// ---------------------------------------------------------------- linear regression

LinregSums linreg_sums(const float* x, const float* y, size_t n) {
  LinregSums s;
  s.n = static_cast<double>(n);
  for (size_t i = 0; i < n; ++i) {
    double xi = x[i], yi = y[i];
    s.sx += xi;
    s.sy += yi;
    s.sxx += xi * xi;
    s.sxy += xi * yi;
    s.syy += yi * yi;
  }
  return s;
}

double linreg_loss(const LinregSums& s, double w, double b) {
  return (w * w * s.sxx + 2 * w * b * s.sx + s.n * b * b - 2 * w * s.sxy - 2 * b * s.sy + s.syy) / s.n;
}

LinregTrace linreg_reference(const LinregSums& s, double w0, double b0, double lr, int epochs) {
  if (!(s.n > 0)) throw Error(kExitInternal, "linreg_reference: no points");
  LinregTrace t;
  double w = w0, b = b0;
  t.loss.reserve(static_cast<size_t>(std::max(epochs, 0)));
  for (int e = 0; e < epochs; ++e) {
    t.loss.push_back(linreg_loss(s, w, b));  // loss at the parameters the epoch starts with
    double gw = 2 * (w * s.sxx + b * s.sx - s.sxy) / s.n;
    double gb = 2 * (w * s.sx + s.n * b - s.sy) / s.n;
    w -= lr * gw;
    b -= lr * gb;
  }
  t.w = w;
  t.b = b;
  return t;
}

// ---------------------------------------------------------------- MLP

namespace {
void check_layers(const std::vector<int>& layers) {
  if (layers.size() < 2) throw Error(kExitInternal, "MLP needs at least an input and an output width");
  for (int w : layers)
    if (w <= 0) throw Error(kExitInternal, "MLP layer widths must be positive");
}

void check_params(const MlpParams& p) {
  check_layers(p.layers);
  size_t L = p.layers.size() - 1;
  if (p.W.size() != L || p.b.size() != L) throw Error(kExitInternal, "MlpParams: W/b count != layer count");
  for (size_t l = 0; l < L; ++l) {
    size_t in = static_cast<size_t>(p.layers[l]), out = static_cast<size_t>(p.layers[l + 1]);
    if (p.W[l].size() != out * in || p.b[l].size() != out)
      throw Error(kExitInternal, "MlpParams: layer " + std::to_string(l) + " has the wrong shape");
  }
}

void check_masks(const MlpParams& p, int batch, const std::vector<std::vector<double>>* masks) {
  if (!masks || masks->empty()) return;
  size_t hidden = p.layers.size() - 2;
  if (masks->size() != hidden)
    throw Error(kExitInternal, "dropout masks: expected one per hidden layer (" + std::to_string(hidden) + ")");
  for (size_t l = 0; l < hidden; ++l)
    if ((*masks)[l].size() != static_cast<size_t>(batch) * static_cast<size_t>(p.layers[l + 1]))
      throw Error(kExitInternal, "dropout mask " + std::to_string(l) + " has the wrong size");
}
}  // namespace

MlpParams mlp_zeros(const std::vector<int>& layers) {
  check_layers(layers);
  MlpParams p;
  p.layers = layers;
  for (size_t l = 0; l + 1 < layers.size(); ++l) {
    p.W.emplace_back(static_cast<size_t>(layers[l + 1]) * static_cast<size_t>(layers[l]), 0.0);
    p.b.emplace_back(static_cast<size_t>(layers[l + 1]), 0.0);
  }
  return p;
}

MlpForward mlp_forward(const MlpParams& p, const double* x, const int* labels, int batch,
                       const std::vector<std::vector<double>>* masks) {
  check_params(p);
  if (batch <= 0) throw Error(kExitInternal, "mlp_forward: batch must be positive");
  check_masks(p, batch, masks);
  const size_t L = p.layers.size() - 1, B = static_cast<size_t>(batch);
  const bool dropout = masks && !masks->empty();
  MlpForward f;
  f.act.resize(L + 1);
  f.act[0].assign(x, x + B * static_cast<size_t>(p.layers[0]));
  for (size_t l = 0; l < L; ++l) {
    const size_t in = static_cast<size_t>(p.layers[l]), out = static_cast<size_t>(p.layers[l + 1]);
    const std::vector<double>& a = f.act[l];
    std::vector<double>& z = f.act[l + 1];
    z.assign(B * out, 0.0);
    for (size_t r = 0; r < B; ++r)
      for (size_t o = 0; o < out; ++o) {
        double acc = p.b[l][o];
        for (size_t i = 0; i < in; ++i) acc += a[r * in + i] * p.W[l][o * in + i];
        z[r * out + o] = acc;
      }
    if (l + 1 < L) {  // hidden layer: ReLU, then inverted dropout
      for (size_t k = 0; k < z.size(); ++k) {
        z[k] = z[k] > 0 ? z[k] : 0.0;
        if (dropout) z[k] *= (*masks)[l][k];
      }
    }
  }
  const size_t C = static_cast<size_t>(p.layers.back());
  const std::vector<double>& logits = f.act[L];
  f.probs.assign(B * C, 0.0);
  double total = 0;
  for (size_t r = 0; r < B; ++r) {
    int y = labels[r];
    if (y < 0 || static_cast<size_t>(y) >= C)
      throw Error(kExitInternal, "mlp_forward: label " + std::to_string(y) + " out of range [0, " +
                                     std::to_string(C) + ")");
    double mx = -std::numeric_limits<double>::infinity();
    for (size_t c = 0; c < C; ++c) mx = std::max(mx, logits[r * C + c]);
    double sum = 0;
    for (size_t c = 0; c < C; ++c) sum += std::exp(logits[r * C + c] - mx);
    double lse = mx + std::log(sum);
    for (size_t c = 0; c < C; ++c) f.probs[r * C + c] = std::exp(logits[r * C + c] - lse);
    total += lse - logits[r * C + static_cast<size_t>(y)];
  }
  f.loss = total / static_cast<double>(B);
  return f;
}

MlpParams mlp_backward(const MlpParams& p, const MlpForward& f, const int* labels, int batch,
                       const std::vector<std::vector<double>>* masks) {
  check_params(p);
  check_masks(p, batch, masks);
  const size_t L = p.layers.size() - 1, B = static_cast<size_t>(batch);
  const bool dropout = masks && !masks->empty();
  const size_t C = static_cast<size_t>(p.layers.back());
  if (f.act.size() != L + 1 || f.probs.size() != B * C)
    throw Error(kExitInternal, "mlp_backward: forward result does not match the parameters/batch");
  MlpParams g = mlp_zeros(p.layers);

  // d(mean CE)/d(logits) = (softmax - onehot) / batch
  std::vector<double> delta(B * C);
  for (size_t r = 0; r < B; ++r)
    for (size_t c = 0; c < C; ++c)
      delta[r * C + c] = (f.probs[r * C + c] - (static_cast<size_t>(labels[r]) == c ? 1.0 : 0.0)) / double(B);

  for (size_t l = L; l-- > 0;) {
    const size_t in = static_cast<size_t>(p.layers[l]), out = static_cast<size_t>(p.layers[l + 1]);
    const std::vector<double>& a = f.act[l];
    for (size_t r = 0; r < B; ++r)
      for (size_t o = 0; o < out; ++o) {
        double d = delta[r * out + o];
        g.b[l][o] += d;
        for (size_t i = 0; i < in; ++i) g.W[l][o * in + i] += d * a[r * in + i];
      }
    if (l == 0) break;
    // Back into act[l] (output of hidden layer l-1): through W, then dropout, then ReLU.
    // act[l] > 0 exactly when the pre-activation was > 0 and the mask kept the unit.
    std::vector<double> prev(B * in, 0.0);
    for (size_t r = 0; r < B; ++r)
      for (size_t i = 0; i < in; ++i) {
        double acc = 0;
        for (size_t o = 0; o < out; ++o) acc += delta[r * out + o] * p.W[l][o * in + i];
        size_t k = r * in + i;
        if (dropout) acc *= (*masks)[l - 1][k];
        prev[k] = a[k] > 0 ? acc : 0.0;
      }
    delta.swap(prev);
  }
  return g;
}

void mlp_sgd_step(MlpParams& p, const MlpParams& grad, double lr) {
  for (size_t l = 0; l < p.W.size(); ++l) {
    for (size_t k = 0; k < p.W[l].size(); ++k) p.W[l][k] -= lr * grad.W[l][k];
    for (size_t k = 0; k < p.b[l].size(); ++k) p.b[l][k] -= lr * grad.b[l][k];
  }
}

AdamState adam_init(const std::vector<int>& layers) {
  AdamState s;
  s.m = mlp_zeros(layers);
  s.v = mlp_zeros(layers);
  s.t = 0;
  return s;
}

void mlp_adam_step(MlpParams& p, const MlpParams& grad, AdamState& s, double lr, double beta1, double beta2,
                   double eps) {
  s.t += 1;
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(s.t));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(s.t));
  auto update = [&](std::vector<double>& w, const std::vector<double>& g, std::vector<double>& m,
                    std::vector<double>& v) {
    for (size_t k = 0; k < w.size(); ++k) {
      m[k] = beta1 * m[k] + (1 - beta1) * g[k];
      v[k] = beta2 * v[k] + (1 - beta2) * g[k] * g[k];
      w[k] -= lr * (m[k] / bc1) / (std::sqrt(v[k] / bc2) + eps);
    }
  };
  for (size_t l = 0; l < p.W.size(); ++l) {
    update(p.W[l], grad.W[l], s.m.W[l], s.v.W[l]);
    update(p.b[l], grad.b[l], s.m.b[l], s.v.b[l]);
  }
}

// ---------------------------------------------------------------- comparison

namespace {
template <typename A>
double rel_error_impl(const A* a, const double* b, size_t n) {
  // Scale by the largest magnitude first so that squares of huge (or tiny) values stay in range.
  double scale = 0;
  for (size_t i = 0; i < n; ++i) {
    double ai = static_cast<double>(a[i]);
    if (std::isnan(ai) || std::isnan(b[i])) return std::numeric_limits<double>::quiet_NaN();
    scale = std::max({scale, std::fabs(ai), std::fabs(b[i])});
  }
  if (scale == 0) return 0.0;  // both all zero
  if (std::isinf(scale)) {
    // An infinity: equal infinities in the same places give NaN (inf - inf); otherwise inf.
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
      double d = static_cast<double>(a[i]) - b[i];
      num += d * d;
      den += b[i] * b[i];
    }
    if (std::isnan(num) || std::isnan(den)) return std::numeric_limits<double>::quiet_NaN();
    return std::isinf(num) && std::isinf(den) ? std::numeric_limits<double>::quiet_NaN() : std::sqrt(num / den);
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    double ai = static_cast<double>(a[i]) / scale, bi = b[i] / scale;
    num += (ai - bi) * (ai - bi);
    den += bi * bi;
  }
  if (den == 0) return std::numeric_limits<double>::infinity();  // b all zero, a not
  return std::sqrt(num) / std::sqrt(den);
}
}  // namespace

double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size())
    throw Error(kExitInternal, "rel_error: sizes differ (" + std::to_string(a.size()) + " vs " +
                                   std::to_string(b.size()) + ")");
  return rel_error_impl(a.data(), b.data(), a.size());
}

double rel_error(const float* a, const double* b, size_t n) { return rel_error_impl(a, b, n); }

}  // namespace nb
