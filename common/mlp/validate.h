// common/mlp/validate.h — one --validate for the MLP trainers (phases 4 and 5): the first K training
// steps against the float64 reference, with tolerances derived from the shape and the precision.
//
//   nb::mlp::ValidationResult v = nb::mlp::validate_steps(spec, initial_params, K, [&](int k) {
//     nb::mlp::StepSeen s;  // run step k on the device, then fill what it used and produced
//     ...
//     return s;
//   });
//
// Each step is judged on its own (the reference is re-anchored at the device's parameters before
// every step), so the three checks measure one step's rounding, never the drift of two trajectories
// (Adam turns a sign difference of a near-zero gradient into a full lr-sized step, and after a few
// steps that drift, not the kernels, set the error):
//   * loss:      the device's batch loss vs the reference forward pass at the device's parameters
//                on the same batch and dropout masks;
//   * gradients: the device's gradients vs the reference backward pass (norm-wise, all layers;
//                in an fp32 step that fails that with a ReLU gate within fp32's rounding of zero,
//                the rows such a gate moves within their rounding bound and the rest norm-wise:
//                gradient_error_past_gates);
//   * update:    the device's parameter change vs the optimizer applied in float64 to the device's
//                parameters and gradients (Adam's moments kept in float64 from the device's gradients).
// The tolerances (mlp_tolerances) come from a model of the rounding, not from a measurement: a sum
// of n products rounded to unit roundoff u errs by about u·sqrt(n) relative (the probabilistic bound
// of Higham and Mary, 2019). A step's products reduce over every layer's fan-in K_l (forward), every
// layer's fan-out N_l above the first (backward data) and the batch B (weight gradients), and their
// errors add, so loss and gradients get 2·u·(Σ sqrt(K_l) + Σ sqrt(N_l) + sqrt(B)), with u = 2^-24
// when the products take fp32 operands and 2^-11 when they take fp16 ones; the factor 2 stands for
// what the model leaves out (cancellation in the batch sums: a gradient is a small mean of terms of
// both signs). The update's error is the fp32 arithmetic of the optimizer (a few u) plus the storage
// of p + Δp, which rounds to half an ulp of |p|: relative to the change, u·(8 + ||p|| / ||Δp||) —
// large when a step is tiny next to the weights (an SGD step at lr 0.01 is ~1e-3 of |p|).
// scripts/validate_sweep.sh measures error / tolerance on every path at awkward shapes (its log is
// committed with the records); a forgotten sample, bias or mask, a wrong scale, a wrong Adam constant
// or learning rate is caught (tests/host/test_mlp_validate.cpp breaks a simulated step each way).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "mlp/step_bound.h"
#include "record.h"
#include "reference.h"

namespace nb {
namespace mlp {

struct ValidationResult {
  bool passed = true;
  nlohmann::json errors = nlohmann::json::object();
  nlohmann::json tolerances = nlohmann::json::object();
  void check(const std::string& name, double err, double tol) {
    errors[name] = finite_or_null(err);
    tolerances[name] = tol;
    const bool ok = std::isfinite(err) && err <= tol;
    if (!ok) passed = false;
    std::printf("  validate %-22s rel.err %.3e  (tol %.1e)  %s\n", name.c_str(), err, tol, ok ? "ok" : "FAIL");
  }
  nlohmann::json to_json() const {
    return {{"performed", true}, {"passed", passed}, {"errors", errors}, {"tolerances", tolerances}};
  }
};

inline double rel_scalar(double a, double b) {
  if (!std::isfinite(a) || !std::isfinite(b)) return NAN;
  return b == 0 ? (a == 0 ? 0 : INFINITY) : std::fabs(a - b) / std::fabs(b);
}

// Flattens every W and b of a reference parameter set (order: W0, b0, W1, b1, ...).
inline std::vector<double> flatten(const MlpParams& p) {
  std::vector<double> out;
  for (size_t l = 0; l < p.W.size(); ++l) {
    out.insert(out.end(), p.W[l].begin(), p.W[l].end());
    out.insert(out.end(), p.b[l].begin(), p.b[l].end());
  }
  return out;
}

// What is being validated: the model, the batch, the products' precision and the optimizer.
struct ValidateSpec {
  std::vector<int> layers;
  int batch = 0;
  bool half_operands = false;  // --precision fp16
  bool adam = true;            // else SGD
  double lr = 0;
};

// What one device step used and produced.
struct StepSeen {
  float loss = 0;                          // the batch loss the device computed
  std::vector<double> x;                   // [batch][layers[0]]: the inputs exactly as the device read them
  std::vector<int> labels;                 // [batch]
  std::vector<std::vector<double>> masks;  // per hidden layer [batch][width], 0 or 1/(1-p); empty: no dropout
  std::vector<double> grads;               // the step's gradients, flatten() order (W0, b0, W1, b1, ...)
  std::vector<double> params;              // the parameters after the step, flatten() order
};

struct MlpTolerances {
  double u = 0;            // unit roundoff of the products' operands
  double reductions = 0;   // Σ sqrt(K_l) + Σ sqrt(N_l) + sqrt(B)
  double loss = 0, grad = 0;
  double update_u = 0;     // the optimizer's arithmetic: fp32 in every trainer
};

// half_operands: the products take fp16 operands (--precision fp16).
inline MlpTolerances mlp_tolerances(const std::vector<int>& layers, int batch, bool half_operands) {
  MlpTolerances t;
  t.u = half_operands ? std::ldexp(1.0, -11) : std::ldexp(1.0, -24);
  t.update_u = std::ldexp(1.0, -24);
  double s = std::sqrt(static_cast<double>(batch));
  for (size_t l = 0; l + 1 < layers.size(); ++l) {
    s += std::sqrt(static_cast<double>(layers[l]));                   // forward: fan-in
    if (l > 0) s += std::sqrt(static_cast<double>(layers[l + 1]));    // backward data: fan-out
  }
  t.reductions = s;
  t.loss = 2 * t.u * s;
  t.grad = 2 * t.u * s;
  return t;
}

inline MlpParams unflatten(const std::vector<int>& layers, const std::vector<double>& flat) {
  MlpParams p = mlp_zeros(layers);
  size_t at = 0;
  for (size_t l = 0; l < p.W.size(); ++l) {
    for (double& w : p.W[l]) w = flat.at(at++);
    for (double& b : p.b[l]) b = flat.at(at++);
  }
  if (at != flat.size()) throw Error(kExitInternal, "unflatten: parameter count does not match the layers");
  return p;
}

// ReLU gates the device may have put on the other side of zero: the kept hidden units whose float64
// pre-activation z lies within 8·u·sqrt(K)·(Σ|a w| + |b|) of zero (the tolerances' rounding model
// for a sum of K products, with room). A flipped gate moves a whole row of a gradient, far beyond the
// norm-wise tolerance at small batches; the count is printed beside each step's errors (it decides
// nothing: a step that fails with gates near zero may be a flip, one that fails without cannot).
inline size_t gates_near_zero(const MlpParams& p, const MlpForward& f, int batch, double u,
                              const std::vector<std::vector<double>>* masks) {
  size_t n = 0;
  for (size_t l = 0; l + 2 < p.layers.size(); ++l) {  // hidden layers: every layer but the last
    const size_t in = static_cast<size_t>(p.layers[l]), out = static_cast<size_t>(p.layers[l + 1]);
    const double e = 8.0 * u * std::sqrt(static_cast<double>(in));
    for (size_t r = 0; r < static_cast<size_t>(batch); ++r)
      for (size_t o = 0; o < out; ++o) {
        if (masks && !masks->empty() && (*masks)[l][r * out + o] == 0) continue;
        double z = p.b[l][o], mag = std::fabs(p.b[l][o]);
        for (size_t i = 0; i < in; ++i) {
          const double t = f.act[l][r * in + i] * p.W[l][o * in + i];
          z += t, mag += std::fabs(t);
        }
        if (std::fabs(z) <= e * mag) ++n;
      }
  }
  return n;
}

// A ReLU gate within fp32's rounding of zero may be decided the other way on the device, and that
// moves whole gradient rows (common/mlp/step_bound.h: a first-layer gate a row of W0 and b0, a
// later one also every layer below it), far past a norm-wise tolerance though the arithmetic is
// right. When an fp32 step's norm-wise gradient check fails and such gates exist: the elements they
// can move are judged one by one within fp32's rounding bound of that step (step_bound.h, which
// counts either decision of those gates), the others norm-wise as before. Returns the error to
// judge against tol: the others' norm-wise error, or infinity when a moved element is outside its
// bound; without such gates, the norm-wise error of every element.
inline double gradient_error_past_gates(const ValidateSpec& o, const MlpParams& at, const MlpForward& f, const StepSeen& s,
                                        const MlpParams& g, const std::vector<std::vector<double>>* mp, double tol) {
  const std::vector<double> ref = flatten(g);
  std::vector<std::pair<int, int>> units;
  size_t near = 0;
  const std::vector<double> bound = nbtest::mlp_grad_error_bound(at, f, s.labels.data(), o.batch, mp, &near, &units);
  if (units.empty()) return rel_error(s.grads, ref);
  const std::vector<char> moved = nbtest::gate_moved_elements(o.layers, units);
  size_t n_moved = 0, outside = 0;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = s.grads[i] - ref[i];
    if (moved[i]) {
      ++n_moved;
      outside += !(std::fabs(d) <= bound[i]);  // a NaN is outside
    } else {
      num += d * d, den += ref[i] * ref[i];
    }
  }
  const double rest = den > 0 ? std::sqrt(num / den) : (num > 0 || std::isnan(num) ? INFINITY : 0.0);
  std::printf("    %zu unit(s) with a gate within fp32's rounding of zero: the %zu gradient elements they move "
              "within fp32's rounding bound (%zu outside), the other %zu norm-wise rel.err %.2e (tol %.1e)\n",
              units.size(), n_moved, outside, ref.size() - n_moved, rest, tol);
  return outside ? INFINITY : rest;
}

// The first K steps (step(k) runs device step k and says what it saw), judged as above.
// initial: the parameters before step 0, flatten() order.
inline ValidationResult validate_steps(const ValidateSpec& o, std::vector<double> initial, int K,
                                       const std::function<StepSeen(int)>& step) {
  const MlpTolerances tol = mlp_tolerances(o.layers, o.batch, o.half_operands);
  std::printf("validating %d steps against the float64 reference (%s operands; tolerances 2 u (u = 2^%d) times %.1f)\n", K,
              o.half_operands ? "fp16" : "fp32", o.half_operands ? -11 : -24, tol.reductions);
  ValidationResult v;
  std::vector<double> before = std::move(initial);
  AdamState adam = adam_init(o.layers);  // moments from the device's gradients
  double e_loss = 0, e_grad = 0;
  double e_update = 0, tol_update = 0, worst_ratio = -1;  // the step whose update errs most against its tolerance
  auto worse = [](double a, double b) { return (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b); };
  for (int k = 0; k < K; ++k) {
    const StepSeen s = step(k);
    const MlpParams at = unflatten(o.layers, before);
    const auto* mp = s.masks.empty() ? nullptr : &s.masks;
    const MlpForward f = mlp_forward(at, s.x.data(), s.labels.data(), o.batch, mp);
    const MlpParams g = mlp_backward(at, f, s.labels.data(), o.batch, mp);
    // the optimizer in float64 from the device's own gradients and parameters
    MlpParams expect = at;
    const MlpParams g_dev = unflatten(o.layers, s.grads);
    if (o.adam) mlp_adam_step(expect, g_dev, adam, o.lr);
    else mlp_sgd_step(expect, g_dev, o.lr);
    const std::vector<double> pe = flatten(expect);
    std::vector<double> d_dev(pe.size()), d_exp(pe.size());
    for (size_t i = 0; i < pe.size(); ++i) d_dev[i] = s.params.at(i) - before[i], d_exp[i] = pe[i] - before[i];
    double pn = 0, dn = 0;
    for (size_t i = 0; i < pe.size(); ++i) pn += before[i] * before[i], dn += d_exp[i] * d_exp[i];
    const double tu = tol.update_u * (8.0 + (dn > 0 ? std::sqrt(pn / dn) : 0.0));
    const double el = rel_scalar(s.loss, f.loss), eu = rel_error(d_dev, d_exp);
    double eg = rel_error(s.grads, flatten(g));
    std::printf("  step %d: loss %.7f (ref %.7f)  rel.err loss %.2e grad %.2e update %.2e (tol %.1e); gates near zero %zu\n",
                k, s.loss, f.loss, el, eg, eu, tu, gates_near_zero(at, f, o.batch, tol.u, mp));
    if (!o.half_operands && !(eg <= tol.grad)) eg = gradient_error_past_gates(o, at, f, s, g, mp, tol.grad);
    e_loss = worse(e_loss, el), e_grad = worse(e_grad, eg);
    const double ratio = eu / tu;  // tu >= 8u > 0; a NaN ratio sticks
    if (!std::isnan(worst_ratio) && (std::isnan(ratio) || ratio > worst_ratio)) worst_ratio = ratio, e_update = eu, tol_update = tu;
    before = s.params;
  }
  v.check("loss", e_loss, tol.loss);
  v.check("gradients", e_grad, tol.grad);
  v.check("parameter_update", e_update, tol_update);
  return v;
}

}  // namespace mlp
}  // namespace nb
