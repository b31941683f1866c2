// common/linreg_harness.h — the host-side bookkeeping the three linear-regression phases share
// (header-only, included by phase1_naive, phase2_shared_mem, phase3_fused_streams): the
// initial parameters as the model holds them, the --validate check against the float64
// reference, and the record fields every linreg phase fills the same way. The kernels — the
// point of each chapter — stay in the phases.
#pragma once
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "errors.h"
#include "linreg_data.h"
#include "record.h"
#include "reference.h"
#include "tracer.h"

namespace nb {

// The model's parameters are float32 (as in the PyTorch twin): the reference starts from the
// same float-rounded values, so the only differences left are the order and precision of the
// sums and the float32 updates.
inline float linreg_init_w() { return static_cast<float>(kLinregInitW); }
inline float linreg_init_b() { return static_cast<float>(kLinregInitB); }

struct LinregOutcome {
  double w = 0, b = 0;             // after all epochs
  std::vector<double> loss;        // train loss at the start of each epoch
  double test_loss = NAN;          // at the final parameters; NaN when the test split is empty
};

// Tolerances from the issue: parameters 1e-4 relative, every epoch's loss (and the test loss)
// 1e-3 relative.
constexpr double kLinregParamTol = 1e-4, kLinregLossTol = 1e-3;

// Absolute floor of a loss error at (w, b), for where the loss vanishes (one point fitted
// exactly: the loss is then all fp32 rounding, ~1e-10, and no relative tolerance can judge it).
// The kernels form each residual r = w·x + b - y in fp32 from fp32 parameters: off by ~4 roundings
// of s = |w·x| + |b| + |y|, and the fp32 parameters stop moving once a step is under half an ulp
// (lr·2|r| < u|b|), so r may stay up to u·s/(2·lr) where the float64 reference keeps descending:
// δ = c·u·s, c = 4 + 1/(2·lr), u = 2^-24; r² is then off by <= 2|r|·δ + δ², averaged over the
// points with Cauchy-Schwarz from sums alone: 2·c·u·sqrt(L·S2/n) + (c·u)²·S2/n (L the reference
// loss, S2 = Σ s²). A lost point, block or epoch moves the loss far more.
struct LinregAbsSums {
  double n = 0, ax = 0, ay = 0, xx = 0, yy = 0, axy = 0;  // Σ|x|, Σ|y|, Σx², Σy², Σ|x·y|
};
inline LinregAbsSums linreg_abs_sums(const float* x, const float* y, size_t n) {
  LinregAbsSums s;
  s.n = double(n);
  for (size_t i = 0; i < n; ++i) {
    const double xi = x[i], yi = y[i];
    s.ax += std::fabs(xi);
    s.ay += std::fabs(yi);
    s.xx += xi * xi;
    s.yy += yi * yi;
    s.axy += std::fabs(xi * yi);
  }
  return s;
}
inline double linreg_loss_abs_floor(const LinregAbsSums& s, double w, double b, double loss, double lr) {
  if (s.n <= 0) return 0.0;
  const double aw = std::fabs(w), ab = std::fabs(b), cu = (4.0 + 0.5 / std::max(std::fabs(lr), 1e-6)) * 0x1p-24;
  const double s2 = aw * aw * s.xx + s.n * ab * ab + s.yy + 2 * aw * ab * s.ax + 2 * aw * s.axy + 2 * ab * s.ay;
  return 2 * cu * std::sqrt(std::max(loss, 0.0)) * std::sqrt(s2 / s.n) + cu * cu * s2 / s.n;
}

// Compares `got` with the float64 reference over the very same points (x, y: host copies of
// the device arrays, storage order: train split first). Prints one line with the errors and
// returns the record's "validation" object; *passed is false when any error exceeds its
// tolerance or is not finite.
inline nlohmann::json linreg_validate(const float* x, const float* y, size_t n, double lr, int epochs,
                                      const LinregOutcome& got, bool* passed) {
  const size_t nt = linreg_train_count(n), ntest = linreg_test_count(n);
  const LinregSums train = linreg_sums(x, y, nt);
  const LinregTrace ref = linreg_reference(train, linreg_init_w(), linreg_init_b(), lr, epochs);
  auto rel = [](double a, double r) { return std::fabs(a - r) / std::fabs(r); };
  // a loss's error relative to max(|ref|, floor / tolerance): passes when within either bound
  auto loss_rel = [](double a, double r, double floor) {
    return std::fabs(a - r) / std::max(std::fabs(r), floor / kLinregLossTol);
  };
  const LinregAbsSums tra = linreg_abs_sums(x, y, nt);
  double wt = linreg_init_w(), bt = linreg_init_b();  // the reference trajectory, for each epoch's floor
  const double w_rel = rel(got.w, ref.w), b_rel = rel(got.b, ref.b);
  double max_loss_rel = got.loss.size() == ref.loss.size() ? 0.0 : INFINITY;
  int worst_epoch = -1;
  for (size_t e = 0; got.loss.size() == ref.loss.size() && e < got.loss.size(); ++e) {
    double r = loss_rel(got.loss[e], ref.loss[e], linreg_loss_abs_floor(tra, wt, bt, ref.loss[e], lr));
    const LinregTrace next = linreg_reference(train, wt, bt, lr, 1);  // one step: the reference's own arithmetic
    wt = next.w;
    bt = next.b;
    if (std::isnan(r)) r = INFINITY;  // a NaN loss counts as an infinite error
    if (r > max_loss_rel || worst_epoch < 0) {
      max_loss_rel = r;
      worst_epoch = static_cast<int>(e);
    }
  }
  nlohmann::json errors = {{"w_rel", finite_or_null(w_rel)},
                           {"b_rel", finite_or_null(b_rel)},
                           {"max_loss_rel", finite_or_null(max_loss_rel)}};
  nlohmann::json tol = {{"w_rel", kLinregParamTol}, {"b_rel", kLinregParamTol}, {"max_loss_rel", kLinregLossTol}};
  bool ok = w_rel <= kLinregParamTol && b_rel <= kLinregParamTol && max_loss_rel <= kLinregLossTol;
  double test_rel = NAN;
  if (ntest > 0) {
    const LinregSums test = linreg_sums(x + nt, y + nt, ntest);
    test_rel = rel(got.test_loss, linreg_loss(test, ref.w, ref.b));
    errors["test_loss_rel"] = finite_or_null(test_rel);
    tol["test_loss_rel"] = kLinregLossTol;
    ok = ok && test_rel <= kLinregLossTol;
  }
  std::printf("validate (float64 reference, %zu train / %zu test points): w_rel=%.3e b_rel=%.3e max_loss_rel=%.3e"
              " (epoch %d) test_loss_rel=%.3e -> %s\n",
              nt, ntest, w_rel, b_rel, max_loss_rel, worst_epoch, test_rel, ok ? "PASS" : "FAIL");
  std::printf("  reference: w=%.9f b=%.9f loss[0]=%.9f loss[last]=%.9f\n", ref.w, ref.b,
              ref.loss.empty() ? NAN : ref.loss.front(), ref.loss.empty() ? NAN : ref.loss.back());
  *passed = ok;
  return {{"performed", true},
          {"passed", ok},
          {"reference", "float64 CPU (common/reference.h) over the same points"},
          {"errors", errors},
          {"tolerances", tol},
          {"reference_w", ref.w},
          {"reference_b", ref.b}};
}

inline nlohmann::json linreg_validation_skipped() {
  return {{"performed", false}, {"passed", nullptr}, {"errors", nlohmann::json::object()},
          {"tolerances", nlohmann::json::object()}};
}

// metrics + loss fields of the record.
inline void linreg_fill_results(nlohmann::json& rec, const LinregOutcome& got) {
  rec["metrics"] = {{"w", finite_or_null(got.w)},
                    {"b", finite_or_null(got.b)},
                    {"train_loss", finite_or_null(got.loss.empty() ? NAN : got.loss.back())},
                    {"test_loss", finite_or_null(got.test_loss)}};
  rec["loss"]["per_epoch"] = finite_array(got.loss);
}

// True when every loss and the final parameters are finite.
inline bool linreg_finite(const LinregOutcome& got) {
  if (!std::isfinite(got.w) || !std::isfinite(got.b)) return false;
  for (double l : got.loss)
    if (!std::isfinite(l)) return false;
  return true;
}

// The one-line divergence message: names the first epoch whose loss is not finite (epochs count
// from 0, as in loss.per_epoch), or says the parameters went non-finite after the last epoch.
inline std::string linreg_divergence_message(const LinregOutcome& got) {
  for (size_t e = 0; e < got.loss.size(); ++e)
    if (!std::isfinite(got.loss[e]))
      return "training diverged: non-finite loss at epoch " + std::to_string(e) + " of " +
             std::to_string(got.loss.size()) + " (try a smaller --lr)";
  return "training diverged: w or b is not finite after the last epoch (try a smaller --lr)";
}

// The end of every linreg phase: validate against the float64 reference when asked, set the
// record's status, write the record, and turn divergence (exit 7) or a failed validation (exit 1)
// into one-line errors that name the record. Returns 0 when the run is good.
inline int linreg_finish(nlohmann::json& rec, const std::vector<float>& hx, const std::vector<float>& hy,
                         double lr, int epochs, const LinregOutcome& out, const CommonOptions& opt,
                         const std::string& device_slug, const char* phase) {
  bool passed = true;
  rec["validation"] = opt.validate ? linreg_validate(hx.data(), hy.data(), hx.size(), lr, epochs, out, &passed)
                                   : linreg_validation_skipped();
  const bool finite = linreg_finite(out);
  if (!finite) rec["status"] = "diverged";
  else if (!passed) rec["status"] = "validation_failed";
  const std::string path = write_record(rec, opt.out, device_slug, phase, opt.tag);
  std::printf("record: %s\n", path.c_str());
  if (!finite) throw Error(kExitDiverged, linreg_divergence_message(out) + "; record: " + path);
  if (!passed) throw Error(kExitValidation, "validation failed (see the errors above); record: " + path);
  return 0;
}

// kernels / memcpy / ranges summaries of our CUPTI tracer (and the Chrome trace when asked),
// taken right after the traced runs so that nothing after them (final test evaluation,
// --measure-peaks) lands in them. They cover `runs` training runs (= timing.repeats: divide by
// repeats × epochs for one epoch); `how` says which runs those were. Returns the record fields
// kernels, memcpy, ranges, trace_file, trace_runs and a note; linreg_merge_trace puts them in.
inline nlohmann::json linreg_trace_summary(const std::string& trace_path, int runs, const std::string& how) {
  Tracer& tr = Tracer::instance();
  nlohmann::json t;
  t["trace_file"] = nullptr;
  t["trace_runs"] = tr.active() ? runs : 0;
  if (!tr.active()) {
    t["kernels"] = nlohmann::json::array();
    t["memcpy"] = nlohmann::json::array();
    t["ranges"] = nlohmann::json::array();
    t["note"] = "CUPTI tracer off: no kernel/range summaries in this record";
    return t;
  }
  tr.flush();
  t["kernels"] = tr.kernel_summary();
  t["memcpy"] = tr.memcpy_summary();
  t["ranges"] = tr.range_summary();
  t["note"] = how;
  if (!trace_path.empty()) {
    tr.write_chrome_trace(trace_path);
    t["trace_file"] = trace_path;
  }
  return t;
}

inline void linreg_merge_trace(nlohmann::json& rec, const nlohmann::json& t) {
  for (const char* k : {"kernels", "memcpy", "ranges", "trace_file", "trace_runs"}) rec[k] = t.at(k);
  rec["notes"].push_back(t.at("note"));
}

}  // namespace nb
