// tests/gpu/test_phase3_persistent.cu — phase 3's persistent kernel (phase3_fused_streams/persistent.cuh)
// against the float64 reference: fresh random points every run, awkward sizes (1, 7, 4095, a block
// exactly full of register points and one more, points that spill into shared memory, odd test
// splits) and grid shapes (1 block, 3, 7, 67, every co-resident block), every exchange (--exchange
// poll with and without a sleep between polls, grid-sync, counter), evaluation periods that do
// and do not divide the epochs. Outputs are poisoned (NaN) before each launch. Tolerances: the
// kernel sums each thread's ~1-60 points in fp32 (relative error <= ~60 * 2^-24 ~ 4e-6 of the sum
// of magnitudes) and everything above that in float64, so every epoch's train loss, the test
// losses and the final w, b must agree with the reference to 2e-5 relative; a lost block, point
// or epoch moves them by >= 1/(number of points) — far more at these sizes. Also: two runs are
// bit-identical (fixed reduction order), and so is the stamping twin of the kernel (--epoch-split),
// whose stamps rise within and across epochs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../../phase3_fused_streams/persistent.cuh"
#include "check.cuh"
#include "gpu_test.cuh"
#include "linreg_harness.h"
#include "reference.h"

namespace nbtest {
namespace {

p3::Fit device_fit() {
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return p3::query_fit(dev, sms);
}
int max_grid() { return device_fit().grid; }

struct Run {
  std::vector<double> loss, test;
  std::vector<float> hist;
  float w = NAN, b = NAN;
  std::vector<unsigned long long> stamps;  // split: the kernel's per-epoch stamps
};

Run run_kernel(const std::vector<float>& x, const std::vector<float>& y, size_t nt, int G, int epochs, int eval_every,
               double lr, float w0, float b0, int exchange = p3::kPoll, int poll_ns = 0, bool split = false) {
  const size_t n = x.size(), ntest = n - nt;
  Dev<float> dx(x), dy(y);
  const size_t nevals = eval_every > 0 ? size_t((epochs + eval_every - 1) / eval_every) : 0;
  std::vector<unsigned long long> s0(p3::slot_words(G), ~0ull);
  s0.back() = 0;  // the counter word
  Dev<unsigned long long> slots(s0);
  Dev<unsigned long long> fixed(std::vector<unsigned long long>(p3::fixed_words(epochs), 0ull));
  Dev<double> loss(epochs), test(std::max<size_t>(nevals, 1));
  Dev<float> params(2), hist(2 * size_t(epochs + 1));
  loss.poison();
  test.poison();
  params.poison();
  hist.poison();
  p3::PersistArgs a{dx.p, dy.p, nt, ntest, epochs, eval_every, lr, 1.0 / double(nt),
                    ntest ? 1.0 / double(ntest) : 0.0, w0, b0, exchange, poll_ns, slots.p, fixed.p, loss.p, test.p, params.p, hist.p};
  Dev<unsigned long long> stamps(split ? size_t(epochs) * G * p3::kSplitWords : 1);
  if (split) a.split = stamps.p;
  p3::launch_epochs(a, G, nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  Run r;
  r.loss = loss.get();
  r.test = test.get();
  r.test.resize(ntest ? nevals : 0);
  r.hist = hist.get();
  if (split) r.stamps = stamps.get();
  const std::vector<float> p = params.get();
  r.w = p[0];
  r.b = p[1];
  return r;
}

double rel(double a, double r) { return std::fabs(a - r) / std::max(std::fabs(r), 1e-30); }

void check_case(size_t nt, size_t ntest, int G, int epochs, int eval_every, double lr, int exchange, int poll_ns) {
  auto& g = test_rng();
  std::uniform_real_distribution<float> ux(-2.f, 3.f);
  std::normal_distribution<float> noise(0.f, 0.5f);
  const size_t n = nt + ntest;
  std::vector<float> x(n), y(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = ux(g);
    y[i] = 2.5f * x[i] - 1.25f + noise(g);
  }
  const float w0 = 0.3f, b0 = -0.2f;
  CAPTURE(nt);
  CAPTURE(ntest);
  CAPTURE(G);
  CAPTURE(epochs);
  CAPTURE(eval_every);
  CAPTURE(lr);
  CAPTURE(exchange);
  CAPTURE(poll_ns);
  const Run r = run_kernel(x, y, nt, G, epochs, eval_every, lr, w0, b0, exchange, poll_ns);
  const nb::LinregSums tr = nb::linreg_sums(x.data(), y.data(), nt);
  const nb::LinregTrace ref = nb::linreg_reference(tr, w0, b0, lr, epochs);
  constexpr double tol = 2e-5;
  CHECK(rel(r.w, ref.w) <= tol);
  CHECK(rel(r.b, ref.b) <= tol);
  REQUIRE(r.loss.size() == ref.loss.size());
  // each epoch's loss relative to max(|ref|, floor / tol), the floor at the reference's parameters
  // of that epoch (linreg_loss_abs_floor: for a few points fitted almost exactly)
  const nb::LinregAbsSums tr_abs = nb::linreg_abs_sums(x.data(), y.data(), nt);
  double worst = 0, wt = w0, bt = b0;
  for (size_t e = 0; e < r.loss.size(); ++e) {
    const double floor = nb::linreg_loss_abs_floor(tr_abs, wt, bt, ref.loss[e], lr);
    const double err = std::fabs(r.loss[e] - ref.loss[e]) / std::max({std::fabs(ref.loss[e]), floor / tol, 1e-30});
    worst = std::max(worst, std::isfinite(r.loss[e]) ? err : INFINITY);
    const nb::LinregTrace next = nb::linreg_reference(tr, wt, bt, lr, 1);
    wt = next.w;
    bt = next.b;
  }
  CHECK(worst <= tol);
  // the parameters the kernel records for each epoch follow the reference's trajectory too
  CHECK(r.hist[2 * size_t(epochs)] == r.w);
  CHECK(r.hist[2 * size_t(epochs) + 1] == r.b);
  if (ntest && eval_every > 0) {
    // relative to max(|ref|, floor / tol): a test split of a point or two can be fitted almost
    // exactly, and then its loss is fp32 rounding of the residual (linreg_loss_abs_floor)
    const nb::LinregSums te = nb::linreg_sums(x.data() + nt, y.data() + nt, ntest);
    const nb::LinregAbsSums te_abs = nb::linreg_abs_sums(x.data() + nt, y.data() + nt, ntest);
    for (size_t k = 0; k < r.test.size(); ++k) {
      const int e = int(k) * eval_every;
      const nb::LinregTrace at = nb::linreg_reference(tr, w0, b0, lr, e);
      const double want = nb::linreg_loss(te, at.w, at.b);
      const double floor = nb::linreg_loss_abs_floor(te_abs, at.w, at.b, want, lr);
      CAPTURE(e);
      CAPTURE(want);
      CAPTURE(floor);
      CHECK(std::fabs(r.test[k] - want) / std::max({std::fabs(want), floor / tol, 1e-30}) <= tol);
    }
  }
}


}  // namespace

TEST_CASE("phase 3 persistent kernel: awkward sizes and grid shapes against the float64 reference") {
  if (!has_device()) return;
  const int Gmax = max_grid();
  REQUIRE(Gmax >= 1);
  const size_t full = size_t(p3::kThreads) * p3::kRegPts;  // one block's register points
  struct Case {
    size_t nt, ntest;
    int G, epochs, eval_every;
    double lr;
  };
  const Case cases[] = {
      {1, 0, 1, 7, 3, 0.01},                // one point, one block, no test split
      {1, 0, 1, 200, 0, 0.025},             // one point fitted almost exactly: a loss of ~1e-15
                                            // (32 fraction bits of fixed point lost it: 2.5e-3)
      {6, 1, 1, 20, 10, 0.025},
      {4095, 1023, 1, 30, 7, 0.01},
      {full, 1, 1, 12, 5, 0.01},            // exactly the registers of one block
      {full + 1, 3, 1, 12, 5, 0.025},       // one point into shared memory
      {3 * full + 12345, 20001, 3, 25, 10, 0.01},  // most in shared memory, odd counts
      {100003, 25001, 7, 40, 9, 0.025},
      {100003, 25001, 5, 12, 1, 0.01},      // the test loss every epoch (read one epoch late)
      {999983 - 999983 / 5, 999983 / 5, 67, 20, 10, 0.01},  // odd blocks; blocks per SM not whole
      {4000001, 1000000, Gmax, 16, 4, 0.01},
  };
  for (const Case& c : cases) {
    if (c.G > Gmax) continue;
    if (!p3::fits(device_fit(), c.nt, c.ntest, c.G, nullptr)) {
      MESSAGE("case does not fit on this device: skipped");
      continue;
    }
    // every exchange: polling (without and with a sleep between polls), grid.sync, the counter,
    // the fixed-point words (without and with a sleep)
    const int variants[][2] = {{p3::kPoll, 0},    {p3::kPoll, 200},  {p3::kGridSync, 0},
                               {p3::kCounter, 0}, {p3::kFixed, 0}, {p3::kFixed, 200}};
    for (const auto& v : variants) check_case(c.nt, c.ntest, c.G, c.epochs, c.eval_every, c.lr, v[0], v[1]);
  }
}

TEST_CASE("phase 3 persistent kernel: two runs are bit-identical, and so are the exchanges") {
  if (!has_device()) return;
  const int G = std::min(max_grid(), 13);
  const size_t nt = 300007, ntest = 75001;
  auto& g = test_rng();
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(nt + ntest), y(nt + ntest);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = u(g);
    y[i] = 0.7f * x[i] + 0.1f * u(g);
  }
  // and the exchanges agree with each other bit for bit (the same block sums, the same order)
  for (int ex : {int(p3::kGridSync), int(p3::kCounter)}) {
    CAPTURE(ex);
    const Run a = run_kernel(x, y, nt, G, 50, 10, 0.025, 0.f, 0.f);
    const Run b = run_kernel(x, y, nt, G, 50, 10, 0.025, 0.f, 0.f, ex, 100);
    CHECK(std::memcmp(a.loss.data(), b.loss.data(), a.loss.size() * sizeof(double)) == 0);
    CHECK(std::memcmp(a.test.data(), b.test.data(), a.test.size() * sizeof(double)) == 0);
    CHECK(std::memcmp(&a.w, &b.w, sizeof(float)) == 0);
    CHECK(std::memcmp(&a.b, &b.b, sizeof(float)) == 0);
  }
  // two runs of each exchange (the fixed-point one with and without a sleep, so its blocks arrive
  // in different orders) are bit-identical; the fixed-point sums are exact, so they are not the
  // float64 tree's bits but agree with them to float64 rounding
  for (int ex : {int(p3::kPoll), int(p3::kFixed)}) {
    CAPTURE(ex);
    const Run a = run_kernel(x, y, nt, G, 50, 10, 0.025, 0.f, 0.f, ex, 0);
    const Run b = run_kernel(x, y, nt, G, 50, 10, 0.025, 0.f, 0.f, ex, ex == p3::kFixed ? 300 : 0);
    CHECK(std::memcmp(a.loss.data(), b.loss.data(), a.loss.size() * sizeof(double)) == 0);
    CHECK(std::memcmp(a.test.data(), b.test.data(), a.test.size() * sizeof(double)) == 0);
    CHECK(std::memcmp(&a.w, &b.w, sizeof(float)) == 0);
    CHECK(std::memcmp(&a.b, &b.b, sizeof(float)) == 0);
  }
  const Run tree = run_kernel(x, y, nt, G, 50, 10, 0.025, 0.f, 0.f, p3::kPoll, 0);
  const Run fix = run_kernel(x, y, nt, G, 50, 10, 0.025, 0.f, 0.f, p3::kFixed, 0);
  // a loss's words hold 38 bits under the exponent of its total two epochs earlier: each of the
  // G blocks' parts rounds by up to 2^-39 of that (here the loss shrinks by less than 2^4 in two
  // epochs), the float64 tree by ~G ulps (2^-53)
  for (size_t e = 0; e < tree.loss.size(); ++e) CHECK(rel(fix.loss[e], tree.loss[e]) <= G * 0x1p-35);
  CHECK(rel(fix.w, tree.w) <= 1e-6);
  CHECK(rel(fix.b, tree.b) <= 1e-6);
}

TEST_CASE("phase 3 fixed-point exchange: a value too large to encode makes the run's loss NaN") {
  if (!has_device()) return;
  const int G = std::min(max_grid(), 5);
  const size_t nt = 50001;  // no test split
  std::vector<float> x(nt), y(nt);
  for (size_t i = 0; i < nt; ++i) x[i] = 1.f, y[i] = 4e6f;  // a block's loss sum ~1e4 points x 1.6e13 > 2^47
  const Run r = run_kernel(x, y, nt, G, 3, 0, 0.01, 0.f, 0.f, p3::kFixed, 0);
  for (double l : r.loss) CHECK(std::isnan(l));  // the loss the host checks for divergence (exit 7)
  const Run ok = run_kernel(x, y, nt, G, 3, 0, 0.01, 0.f, 0.f, p3::kPoll, 0);
  CHECK(std::isfinite(ok.loss[0]));
}

}  // namespace nbtest

namespace nbtest {

TEST_CASE("phase 3 --epoch-split: the stamping kernel gives the same bits and stamps that add up") {
  if (!has_device()) return;
  const int G = std::min(max_grid(), 11);
  const size_t nt = 200003, ntest = 50001;
  const int E = 30;
  auto& g = test_rng();
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(nt + ntest), y(nt + ntest);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = u(g);
    y[i] = -1.3f * x[i] + 0.4f + 0.1f * u(g);
  }
  const Run a = run_kernel(x, y, nt, G, E, 10, 0.02, 0.f, 0.f);
  const Run b = run_kernel(x, y, nt, G, E, 10, 0.02, 0.f, 0.f, p3::kPoll, 0, true);
  CHECK(std::memcmp(a.loss.data(), b.loss.data(), a.loss.size() * sizeof(double)) == 0);
  CHECK(std::memcmp(&a.w, &b.w, sizeof(float)) == 0);
  REQUIRE(b.stamps.size() == size_t(E) * G * p3::kSplitWords);
  // every block's clock stamps rise within an epoch and from one epoch to the next; globaltimer too
  for (int blk = 0; blk < G; ++blk)
    for (int e = 0; e < E; ++e) {
      const unsigned long long* s = &b.stamps[(size_t(e) * G + blk) * p3::kSplitWords];
      CAPTURE(blk);
      CAPTURE(e);
      CHECK(s[0] <= s[1]);
      CHECK(s[1] <= s[2]);
      CHECK(s[2] <= s[4]);
      CHECK(s[3] <= s[5]);
      if (e + 1 < E) CHECK(s[4] <= b.stamps[(size_t(e + 1) * G + blk) * p3::kSplitWords]);
    }
  const p3::SplitSummary q = p3::split_summary(b.stamps, E, G);
  CHECK(q.epochs_used == E - 2);
  CHECK(q.clock_ghz > 0.2);
  CHECK(q.clock_ghz < 5.0);
  CHECK(q.sums_us > 0);
  CHECK(q.wait_us > 0);
}

}  // namespace nbtest
