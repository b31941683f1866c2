// common/mlp/step_bound.h — element-wise bounds for checking one fp32 training step of the MLP
// (gradients from any summation order, then SGD or Adam) against the float64 reference
// (reference.h), starting from the state the fp32 code itself held before the step.
//
// 1. The gradient's rounding error (mlp_grad_error_bound). Forward error analysis of an fp32 dot
//    product s = b + sum_i a_i w_i of n terms, in any order: to first order
//      |s32 - s| <= gamma(n) (|b| + sum_i |a_i w_i|) + sum_i (|da_i| |w_i| + |a_i| |dw_i|),
//    gamma(n) = n u for round-to-nearest sums, u = 2^-24. Taken here as gamma(n) = (2n + 16) u: 2u an
//    addition allows an accumulator that truncates (tensor-core MMA sums), and the 16u a product
//    term that is itself inexact (split-TF32 products: within ~2^-21 of the fp32 product) and a
//    scale applied after the sum (1/255, 1/batch). W, b and the pixels are the same fp32 values on
//    both sides, so only the activations and deltas carry errors, propagated as the reference
//    computes them: each layer's z (the sum above); ReLU (1-Lipschitz; a unit below zero keeps
//    0 unless its error bound reaches past zero); inverted dropout (u); softmax,
//    |dp_c| <= p_c (|dz_c| + sum_k p_k |dz_k|) plus the rounding of expf/logf and the row's sum;
//    dz3 = (p - onehot) / B; then backward: a weight or bias gradient is a sum over the batch
//    (gamma(B)), a delta a sum over the next layer's units (gamma(width)) times the ReLU gate and
//    the dropout mask. A gate is "unsure" where the pre-activation lies within its own error bound
//    of zero: the fp32 side may have the other gate, so that delta's bound is its whole magnitude.
//    The worst case of every sum is taken (errors all of one sign), and second-order terms
//    (products of two errors, below (2000 u)^2 relative) are covered by a factor of 2 on the
//    whole: kGradSafety.
//    Near-zero gates: the same gate, counted (near_zero_gates) where the pre-activation lies within
//    kNearZeroGate of its bound (the actual error of a sum is far below its worst case, so this
//    flags the gates an fp32 run can really flip: about one step in a hundred of the GPU tests). A flip
//    moves a whole gradient row (an h1 gate: a row of W0 and its bias; an h2 gate: a row of W1 and
//    every row of W0 through dz1), inside the element-wise bound but far outside a norm-wise
//    tolerance of 1e-5: a norm-wise gradient check is meaningful only in a step with none.
//
// 2. The step (check_update). SGD: p1 = p0 - lr g. Adam (PyTorch's, reference.h / adam_hyper):
//      m1 = b1 m0 + a g,  v1 = b2 v0 + b g^2,  D(g) = sqrt(v1) / c + eps,  p1 = p0 - s m1 / D,
//    a = 1 - b1, b = 1 - b2, s = lr / (1 - b1^t), c = sqrt(1 - b2^t); m0, v0 are the fp32 side's own
//    moments, so the two sides differ only by the gradient (|g32 - g| <= dg) and fp32 arithmetic.
//    With f = m1 / D, N = m1 (linear in g, slope a) and D (sqrt(b) / c -Lipschitz in g):
//      f(g32) - f(g) = (N(g32) - N(g)) / D(g32) + f(g) (D(g) - D(g32)) / D(g32),
//      |s f(g32) - s f(g)| <= s (a dg + |f(g)| sqrt(b) dg / c) / Dmin,
//      Dmin = sqrt(b2 v0 + b max(0, |g| - dg)^2) / c + eps  (the least D over |g32 - g| <= dg).
//    This is Adam's normalisation made explicit: where |g| is well above dg (or v0 already holds
//    past gradients) Dmin ~ |g| and the bound is ~2 lr dg / |g|, a small fraction of the step; where
//    v0 = 0 and |g| <= dg, Dmin = eps and the bound reaches the step's full size (~lr): rounding
//    decides the sign of that step, and nothing tighter holds for any correct fp32 code. Added: the
//    update's own fp32 arithmetic (m1, v1, sqrt, the division, the rounded constants: at most
//    32 u of s (|m0| + a |g| + a dg) / Dmin, which also covers sqrt.approx and a 2-ulp division), and
//    the rounding of p1 (2 u (|p0| + |step|); a step skipped as below half an ulp of p lies within
//    it). The moments are checked too: |m1_32 - m1| <= a dg + 4 u (|m0| + a |g| + a dg),
//    |v1_32 - v1| <= b (2 |g| dg + dg^2) + 6 u (v1 + b (2 |g| dg + dg^2)).
//    dg: the bound of 1. holds for any correct code but is the worst case (all roundings of one
//    sign, every layer's errors adding up), hundreds of times the errors fp32 sums show; used as dg
//    it would excuse a large share of the steps. Code that reports the gradient it applies (the
//    kernels' G buffer holds the very value each update used) gives dg = |g32 - g| exactly, and
//    then 1. checks g32 (check_within) and 2. the step, tight wherever g32's own error is small
//    against |g|.
//
// A broken step still fails: an element whose |g| is well above dg has a bound of a small fraction
// of lr (and of its m1, v1), so a wrong learning rate, a skipped or doubled element, a moment not
// written back, or an update from another gradient than the one reported fails there; a reported
// gradient off by more than 1.'s bound fails check_within. "loose" counts the elements whose bound
// on the step is a quarter of lr or more (rounding-decided: few, far below a quarter of any layer).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "reference.h"

namespace nbtest {

constexpr double kFp32U = 0x1p-24;   // fp32's unit roundoff
constexpr double kGradSafety = 2.0;  // second-order terms of the first-order gradient bound
constexpr double kNearZeroGate = 1e-3;  // a gate "near zero": |z| <= kNearZeroGate * its error bound

// The error bound of an fp32 sum of n products (see 1. above), relative to the sum of magnitudes.
inline double fp32_sum_gamma(size_t n) { return (2.0 * static_cast<double>(n) + 16.0) * kFp32U; }

// A bound on |g32 - g| for every gradient element of the float64 reference's mlp_backward at p
// (f: its mlp_forward of x with the same labels and masks), in flatten() order: W0, b0, W1, b1, ...
// near_zero_gates (optional): the number of kept hidden units whose gate is near zero (see 1.);
// near_units (optional): those units as (hidden layer l = 1 .. L-1, unit), each once.
inline std::vector<double> mlp_grad_error_bound(const nb::MlpParams& p, const nb::MlpForward& f, const int* labels,
                                                int batch, const std::vector<std::vector<double>>* masks = nullptr,
                                                size_t* near_zero_gates = nullptr,
                                                std::vector<std::pair<int, int>>* near_units = nullptr) {
  if (near_zero_gates) *near_zero_gates = 0;
  if (near_units) near_units->clear();
  const double u = kFp32U;
  const size_t L = p.layers.size() - 1, B = static_cast<size_t>(batch);
  const bool dropout = masks && !masks->empty();
  // Forward: ea[l] bounds |a32 - a| for act[l]; z[l], ez[l] the pre-activations of hidden layer
  // l (act[l], l = 1 .. L-1) and their bounds (for the gates).
  std::vector<std::vector<double>> ea(L + 1), z(L + 1), ez(L + 1);
  ea[0].assign(B * static_cast<size_t>(p.layers[0]), 0.0);
  for (size_t l = 0; l < L; ++l) {
    const size_t in = static_cast<size_t>(p.layers[l]), out = static_cast<size_t>(p.layers[l + 1]);
    const std::vector<double>& a = f.act[l];
    ea[l + 1].assign(B * out, 0.0), z[l + 1].assign(B * out, 0.0), ez[l + 1].assign(B * out, 0.0);
    for (size_t r = 0; r < B; ++r)
      for (size_t o = 0; o < out; ++o) {
        double s = p.b[l][o], mag = std::fabs(p.b[l][o]), prop = 0;
        for (size_t i = 0; i < in; ++i) {
          const double w = p.W[l][o * in + i];
          s += a[r * in + i] * w, mag += std::fabs(a[r * in + i] * w), prop += ea[l][r * in + i] * std::fabs(w);
        }
        const size_t k = r * out + o;
        const double e = fp32_sum_gamma(in + 1) * mag + prop;
        z[l + 1][k] = s, ez[l + 1][k] = e;
        if (l + 1 < L) {
          const double m = dropout ? (*masks)[l][k] : 1.0;
          ea[l + 1][k] = m * (s > 0 ? e : std::max(0.0, s + e)) + 2 * u * f.act[l + 1][k];
        } else {
          ea[l + 1][k] = e;
        }
      }
  }
  // Softmax cross-entropy: delta = dz3 = (p - onehot) / B and its bound.
  const size_t C = static_cast<size_t>(p.layers[L]);
  std::vector<double> delta(B * C), edelta(B * C);
  for (size_t r = 0; r < B; ++r) {
    double spread = 0, zmax = 0;
    for (size_t c = 0; c < C; ++c)
      spread += f.probs[r * C + c] * ea[L][r * C + c], zmax = std::max(zmax, std::fabs(f.act[L][r * C + c]));
    for (size_t c = 0; c < C; ++c) {
      const double pc = f.probs[r * C + c];
      const double dp = pc * (ea[L][r * C + c] + spread) + (static_cast<double>(C) + 16 + 4 * zmax) * u * pc;
      const double d = (pc - (static_cast<size_t>(labels[r]) == c ? 1.0 : 0.0)) / static_cast<double>(B);
      delta[r * C + c] = d, edelta[r * C + c] = dp / static_cast<double>(B) + 3 * u * std::fabs(d);
    }
  }
  // Backward, layer by layer from the last; out_w[l], out_b[l] the bounds of W[l]'s and b[l]'s gradients.
  std::vector<std::vector<double>> out_w(L), out_b(L);
  for (size_t l = L; l-- > 0;) {
    const size_t in = static_cast<size_t>(p.layers[l]), out = static_cast<size_t>(p.layers[l + 1]);
    const std::vector<double>& a = f.act[l];
    const std::vector<double>& eal = ea[l];
    out_w[l].assign(out * in, 0.0), out_b[l].assign(out, 0.0);
    for (size_t o = 0; o < out; ++o) {
      double bmag = 0, bprop = 0;
      for (size_t r = 0; r < B; ++r) bmag += std::fabs(delta[r * out + o]), bprop += edelta[r * out + o];
      out_b[l][o] = kGradSafety * (fp32_sum_gamma(B) * bmag + bprop);
      for (size_t i = 0; i < in; ++i) {
        double mag = 0, prop = 0;
        for (size_t r = 0; r < B; ++r) {
          const double d = delta[r * out + o], ai = a[r * in + i];
          mag += std::fabs(d * ai), prop += edelta[r * out + o] * std::fabs(ai) + std::fabs(d) * eal[r * in + i];
        }
        out_w[l][o * in + i] = kGradSafety * (fp32_sum_gamma(B) * mag + prop);
      }
    }
    if (l == 0) break;
    // Into act[l], the output of hidden layer l-1: through W, then the dropout mask and the ReLU gate.
    std::vector<double> prev(B * in, 0.0), eprev(B * in, 0.0);
    for (size_t r = 0; r < B; ++r)
      for (size_t i = 0; i < in; ++i) {
        double s = 0, mag = 0, prop = 0;
        for (size_t o = 0; o < out; ++o) {
          const double w = p.W[l][o * in + i];
          s += delta[r * out + o] * w, mag += std::fabs(delta[r * out + o] * w), prop += edelta[r * out + o] * std::fabs(w);
        }
        const size_t k = r * in + i;
        const double m = dropout ? (*masks)[l - 1][k] : 1.0;
        const bool on = a[k] > 0;
        const bool unsure = m != 0 && std::fabs(z[l][k]) <= kGradSafety * ez[l][k];
        if (m != 0 && std::fabs(z[l][k]) <= kNearZeroGate * ez[l][k]) {
          if (near_zero_gates) ++*near_zero_gates;
          const std::pair<int, int> unit(static_cast<int>(l), static_cast<int>(i));
          if (near_units && std::find(near_units->begin(), near_units->end(), unit) == near_units->end())
            near_units->push_back(unit);
        }
        prev[k] = on ? s * m : 0.0;
        if (on || unsure)
          eprev[k] = m * (fp32_sum_gamma(out) * mag + prop) + 2 * u * m * std::fabs(s) + (unsure ? m * std::fabs(s) : 0.0);
      }
    delta.swap(prev), edelta.swap(eprev);
  }
  std::vector<double> bound;
  for (size_t l = 0; l < L; ++l) {
    bound.insert(bound.end(), out_w[l].begin(), out_w[l].end());
    bound.insert(bound.end(), out_b[l].begin(), out_b[l].end());
  }
  return bound;
}

// The gradient elements (flatten() order) that the gates of `units` (hidden layer l, unit) move
// when one is decided the other way: the unit's row of W[l-1] and its b[l-1], and through the
// deltas every element of the layers below (W[0 .. l-2], b[0 .. l-2]).
inline std::vector<char> gate_moved_elements(const std::vector<int>& layers, const std::vector<std::pair<int, int>>& units) {
  const size_t L = layers.size() - 1;
  std::vector<size_t> off(L + 1, 0);  // where W[l] starts; b[l] follows it
  for (size_t l = 0; l < L; ++l)
    off[l + 1] = off[l] + static_cast<size_t>(layers[l + 1]) * (layers[l] + 1);
  std::vector<char> moved(off[L], 0);
  for (const auto& u : units) {
    const size_t l = static_cast<size_t>(u.first), i = static_cast<size_t>(u.second), in = static_cast<size_t>(layers[l - 1]);
    std::fill(moved.begin(), moved.begin() + static_cast<std::ptrdiff_t>(off[l - 1]), 1);  // every layer below
    std::fill(moved.begin() + static_cast<std::ptrdiff_t>(off[l - 1] + i * in),
              moved.begin() + static_cast<std::ptrdiff_t>(off[l - 1] + (i + 1) * in), 1);  // W[l-1]'s row i
    moved[off[l - 1] + static_cast<size_t>(layers[l]) * in + i] = 1;                       // b[l-1][i]
  }
  return moved;
}

// One fp32 step as it was seen, every vector in flatten() order: the parameters and (Adam) the
// moments before and after. m0 .. v1 stay empty under SGD.
struct StepState {
  std::vector<double> p0, p1, m0, m1, v0, v1;
};

struct UpdateCheck {
  size_t n = 0;      // elements checked
  size_t bad = 0;    // elements outside their bound (parameter, m or v)
  size_t loose = 0;  // elements whose step bound is lr / 4 or more (rounding-decided)
  double worst = 0;  // the largest error / bound
  std::string first_bad;
  std::string summary() const {
    std::ostringstream os;
    os << bad << " of " << n << " elements outside their bound, " << loose << " loose, worst error/bound " << worst;
    if (!first_bad.empty()) os << "; first: " << first_bad;
    return os.str();
  }
};

// got (fp32 values, as double) against want within bound, element by element.
inline UpdateCheck check_within(const char* what, const std::vector<double>& got, const std::vector<double>& want,
                                const std::vector<double>& bound) {
  UpdateCheck out;
  out.n = want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (bound[i] > 0) out.worst = std::max(out.worst, err / bound[i]);
    else if (err > 0) out.worst = INFINITY;
    if (!(err <= bound[i]) && out.bad++ == 0) {  // NaN fails
      std::ostringstream os;
      os << what << "[" << i << "] = " << got[i] << ", float64 " << want[i] << ", |error| " << err << " > bound " << bound[i];
      out.first_bad = os.str();
    }
  }
  return out;
}

// Checks step t (1-based: Adam's bias corrections) of SGD or Adam: st against the float64 step
// from st.p0 (and st.m0, st.v0) with the reference's gradient g, whose fp32 counterpart (the one the
// step applied) lies within dg of it. See 2. above for the bounds.
inline UpdateCheck check_update(const StepState& st, const std::vector<double>& g, const std::vector<double>& dg,
                                bool adam, double lr, int64_t t, double b1 = 0.9, double b2 = 0.999,
                                double eps = 1e-8) {
  const double u = kFp32U;
  UpdateCheck out;
  out.n = g.size();
  const double a = 1 - b1, b = 1 - b2, s = lr / (1 - std::pow(b1, static_cast<double>(t)));
  const double c = std::sqrt(1 - std::pow(b2, static_cast<double>(t)));
  auto judge = [&](size_t i, const char* what, double got, double want, double tol) {
    const double err = std::fabs(got - want);
    if (tol > 0) out.worst = std::max(out.worst, err / tol);
    else if (err > 0) out.worst = INFINITY;
    if (!(err <= tol)) {  // NaN fails
      if (out.bad++ == 0) {
        std::ostringstream os;
        os << what << "[" << i << "] = " << got << ", float64 " << want << ", |error| " << err << " > bound " << tol
           << " (g " << g[i] << ", dg " << dg[i] << ")";
        out.first_bad = os.str();
      }
      return false;
    }
    return true;
  };
  for (size_t i = 0; i < g.size(); ++i) {
    const double gi = g[i], d = dg[i], p0 = st.p0[i];
    if (!adam) {
      const double step = lr * gi;
      const double tol = lr * d + 4 * u * (std::fabs(p0) + std::fabs(step) + lr * d);
      if (tol >= lr / 4) ++out.loose;
      judge(i, "p", st.p1[i] - p0, -step, tol);
      continue;
    }
    const double m0 = st.m0[i], v0 = st.v0[i];
    const double m1 = b1 * m0 + a * gi, v1 = b2 * v0 + b * gi * gi;
    const double D = std::sqrt(v1) / c + eps, f = m1 / D, step = s * f;
    const double gmin = std::max(0.0, std::fabs(gi) - d);
    const double Dmin = std::sqrt(b2 * v0 + b * gmin * gmin) / c + eps;
    const double mmag = std::fabs(m0) + a * std::fabs(gi) + a * d;
    const double tol_p = s * (a * d + std::fabs(f) * std::sqrt(b) * d / c) / Dmin + 32 * u * s * mmag / Dmin +
                         2 * u * (std::fabs(p0) + std::fabs(step));
    const double dv = b * (2 * std::fabs(gi) * d + d * d);
    if (tol_p >= lr / 4) ++out.loose;
    const bool ok = judge(i, "p", st.p1[i] - p0, -step, tol_p);
    if (ok && judge(i, "m", st.m1[i], m1, a * d + 4 * u * mmag)) judge(i, "v", st.v1[i], v1, dv + 6 * u * (v1 + dv));
  }
  return out;
}

}  // namespace nbtest
