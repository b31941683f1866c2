// tests/gpu/test_mlp_persistent.cu — phase 5's one-launch fp32 epoch kernels (rung 5c, phase5_batched/
// 5c_persistent.cuh; rung 5e, 5e_pipelined.cuh; rung 5f, 5f_cluster32.cuh: the later parts of the file)
// against the float64 reference, step by step: fresh random images, labels, order and weights;
// awkward shapes (batch 1, 7, 33, 64; widths 10, 30, 100, 300), every block/unit split the kernel has
// (1, 2, 4, 8 first-layer units per block; blocks that own no second-layer unit), Adam and SGD, with
// and without dropout. Outputs (losses, gradients) are poisoned with NaN before each run.
// Loss and gradients: 1e-5 (relative, norm-wise) as phase 5's --validate (fp32); gradients also
// element by element within fp32's worst-case rounding bound. Each step's update (parameters,
// Adam's moments): element by element, against the float64 step from the kernel's own state
// before it, within what fp32 rounding allows through Adam's normalisation (common/mlp/step_bound.h).
// Also: splitting the steps over several launches gives bit-identical parameters (the state written
// back at the end of a launch is the state the next one loads), and two identical runs are
// bit-identical.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mlp/mlp_record.h"
#include "../../phase5_batched/5e_pipelined.cuh"
#include "../../phase5_batched/5f_cluster32.cuh"
#include "check.cuh"
#include "gpu_test.cuh"
#include "mlp/step_bound.h"
#include "reference.h"

namespace nbtest {
namespace {

using namespace nb::mlp;

// The kernel under test: rung 5c (persistent), 5e (pipelined) or 5f (cluster32).
enum class Rung { Persistent, Pipelined, Cluster32 };
// A std::string: doctest prints a const char* in INFO and failure messages as its address.
std::string rung_name(Rung r) { return r == Rung::Persistent ? "persistent" : r == Rung::Pipelined ? "pipelined" : "cluster32"; }

struct Config {
  int B, H1, H2, blocks;
  bool adam;
  double dropout;
  int classes = 10;  // the last layer's width (the kernel keeps up to kMaxClasses in registers)
};

// One model + data set on the device, laid out as phase 5's Trainer lays out its parameters.
struct Setup {
  Config cfg;
  int n_images, D = 784, C, steps_per_epoch;
  std::vector<uint8_t> px, labels;
  std::vector<int> perm;
  std::vector<int> layers;
  std::vector<size_t> woff, boff;
  size_t nparams = 0;
  std::vector<float> p0;
  std::vector<AdamHyper> hyper;
  uint64_t key = 0x1234567890ABCDEFull;
  Dev<uint8_t> dpx, dlab;
  Dev<int> dperm;
  Dev<float> P, M, V, G;
  Dev<xword> h1x, h2x, w2x, w3x;  // poisoned (0xFF: tag 0xFFFFFFFF) before every run
  Dev<float> loss;
  Dev<AdamHyper> dhyper;
  Dev<unsigned long long> bad;
  Dev<unsigned> mismatches;  // rung 5f: bits in which copies of a weight disagree (must stay 0)

  explicit Setup(const Config& c, int steps)
      : cfg(c),
        n_images(c.B * steps + 5),
        C(c.classes),
        steps_per_epoch(n_images / c.B),
        px(static_cast<size_t>(n_images) * 784),
        labels(n_images),
        perm(n_images),
        layers{784, c.H1, c.H2, c.classes},
        dpx(px.size()),
        dlab(labels.size()),
        dperm(perm.size()),
        P(count_params(layers)),
        M(count_params(layers)),
        V(count_params(layers)),
        G(count_params(layers)),
        h1x(2 * static_cast<size_t>(c.B) * c.H1),
        h2x(2 * static_cast<size_t>(c.B) * c.H2),
        w2x(2 * static_cast<size_t>(c.H2) * c.H1),
        w3x(2 * (static_cast<size_t>(c.classes) * c.H2 + c.classes)),
        loss(static_cast<size_t>(steps)),
        dhyper(static_cast<size_t>(steps) + 2),
        bad(1),
        mismatches(1) {
    for (auto& b : px) b = static_cast<uint8_t>(test_rng()() % 256);
    for (auto& l : labels) l = static_cast<uint8_t>(test_rng()() % static_cast<unsigned>(c.classes));
    for (int i = 0; i < n_images; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), test_rng());
    dpx.set(px), dlab.set(labels), dperm.set(perm);
    size_t off = 0;
    for (int l = 0; l < 3; ++l) {
      woff.push_back(off), off = (off + static_cast<size_t>(layers[l + 1]) * layers[l] + 7) / 8 * 8;
      boff.push_back(off), off = (off + layers[l + 1] + 7) / 8 * 8;
    }
    nparams = off;
    p0.assign(nparams, 0.f);
    for (int l = 0; l < 3; ++l) {
      std::uniform_real_distribution<float> u(-1.f / std::sqrt(static_cast<float>(layers[l])),
                                              1.f / std::sqrt(static_cast<float>(layers[l])));
      for (size_t i = 0; i < static_cast<size_t>(layers[l + 1]) * layers[l]; ++i) p0[woff[l] + i] = u(test_rng());
      for (int i = 0; i < layers[l + 1]; ++i) p0[boff[l] + i] = u(test_rng());
    }
    hyper.resize(static_cast<size_t>(steps) + 2);
    for (size_t t = 1; t < hyper.size(); ++t) hyper[t] = adam_hyper(lr(), static_cast<int64_t>(t));
    dhyper.set(hyper);
    reset();
  }
  static size_t count_params(const std::vector<int>& w) {
    size_t off = 0;
    for (int l = 0; l < 3; ++l) {
      off = (off + static_cast<size_t>(w[l + 1]) * w[l] + 7) / 8 * 8;
      off = (off + w[l + 1] + 7) / 8 * 8;
    }
    return off;
  }
  double lr() const { return cfg.adam ? 1e-3 : 0.05; }
  void reset() {
    P.set(p0);
    CUDA_CHECK(cudaMemset(M.p, 0, M.n * sizeof(float)));
    CUDA_CHECK(cudaMemset(V.p, 0, V.n * sizeof(float)));
    G.poison(), loss.poison(), h1x.poison(), h2x.poison(), w2x.poison(), w3x.poison();
    const unsigned long long none = ~0ull;
    CUDA_CHECK(cudaMemcpy(bad.p, &none, sizeof none, cudaMemcpyHostToDevice));
    mismatches.zero();
  }
  PersistParams params() {
    PersistParams p;
    p.images = dpx.p, p.labels = dlab.p, p.perm = dperm.p;
    p.D = D, p.H1 = cfg.H1, p.H2 = cfg.H2, p.C = C, p.B = cfg.B;
    p.params = P.p, p.grads_out = G.p;
    if (cfg.adam) p.adam_m = M.p, p.adam_v = V.p, p.hyper = dhyper.p, p.hyper_n = static_cast<int64_t>(dhyper.n);
    p.w0 = woff[0], p.b0 = boff[0], p.w1 = woff[1], p.b1 = boff[1], p.w2 = woff[2], p.b2 = boff[2];
    p.h1_words = h1x.p, p.h2_words = h2x.p, p.w2_words = w2x.p, p.w3_words = w3x.p;
    p.adam = cfg.adam, p.lr = static_cast<float>(lr());
    p.dropout = cfg.dropout > 0, p.key = key, p.threshold = dropout_threshold(cfg.dropout);
    p.scale = static_cast<float>(1.0 / (1.0 - cfg.dropout));
    p.step_loss = loss.p, p.bad_step = bad.p;
    p.copy_mismatches = mismatches.p;
    return p;
  }
  // Runs steps [first, first + count) of epoch 0 in one launch of a rung's kernel.
  PersistPlan run(int first, int count, bool specialize = true, Rung rung = Rung::Persistent) {
    PersistParams p = params();
    PersistPlan pl = rung == Rung::Pipelined   ? plan_pipelined(p, cfg.blocks, 0, specialize)
                     : rung == Rung::Cluster32 ? plan_cluster32(p, cfg.blocks, 0, specialize)
                                               : plan_persistent(p, cfg.blocks, 0, specialize);
    p.s0 = first, p.i0 = first, p.count = count;
    if (rung == Rung::Pipelined) launch_pipelined(pl, p, nullptr);
    else if (rung == Rung::Cluster32) launch_cluster32(pl, p, nullptr);
    else launch_persistent(pl, p, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    return pl;
  }
  unsigned copy_mismatches() const { return mismatches.get()[0]; }
  // The state before a step (parameters; Adam's moments), packed; after() adds the state after it.
  StepState state() const {
    StepState st;
    st.p0 = packed(P.get());
    if (cfg.adam) st.m0 = packed(M.get()), st.v0 = packed(V.get());
    return st;
  }
  void after(StepState* st) const {
    st->p1 = packed(P.get());
    if (cfg.adam) st->m1 = packed(M.get()), st->v1 = packed(V.get());
  }
  // Step k's dropout masks as the kernel draws them (0 or 1/(1-p)); empty without dropout.
  std::vector<std::vector<double>> masks(int k) const {
    std::vector<std::vector<double>> out;
    for (int l = 0; l < 2 && cfg.dropout > 0; ++l) {
      std::vector<double> m(static_cast<size_t>(cfg.B) * layers[l + 1]);
      for (size_t i = 0; i < m.size(); ++i)
        m[i] = dropout_bits_host(key, static_cast<uint32_t>(l), static_cast<uint64_t>(k), static_cast<uint32_t>(i)) >=
                       dropout_threshold(cfg.dropout)
                   ? 1.0 / (1.0 - cfg.dropout)
                   : 0.0;
      out.push_back(std::move(m));
    }
    return out;
  }
  std::vector<double> packed(const std::vector<float>& flat) const {
    std::vector<double> out;
    for (int l = 0; l < 3; ++l) {
      const size_t nw = static_cast<size_t>(layers[l + 1]) * layers[l];
      out.insert(out.end(), flat.begin() + woff[l], flat.begin() + woff[l] + nw);
      out.insert(out.end(), flat.begin() + boff[l], flat.begin() + boff[l] + layers[l + 1]);
    }
    return out;
  }
  // The float64 reference's parameters from a flat fp32 parameter buffer.
  nb::MlpParams ref_params(const std::vector<float>& flat) const {
    nb::MlpParams r;
    r.layers = layers;
    for (int l = 0; l < 3; ++l) {
      const size_t nw = static_cast<size_t>(layers[l + 1]) * layers[l];
      r.W.emplace_back(flat.begin() + woff[l], flat.begin() + woff[l] + nw);
      r.b.emplace_back(flat.begin() + boff[l], flat.begin() + boff[l] + layers[l + 1]);
    }
    return r;
  }
  std::vector<double> batch(int i, std::vector<int>* y) const {
    const int B = cfg.B;
    std::vector<double> x(static_cast<size_t>(B) * D);
    y->assign(B, 0);
    for (int r = 0; r < B; ++r) {
      const int img = perm[static_cast<size_t>(i) * B + r];
      for (int j = 0; j < D; ++j) x[static_cast<size_t>(r) * D + j] = static_cast<float>(px[static_cast<size_t>(img) * D + j]) / 255.0f;
      (*y)[r] = labels[img];
    }
    return x;
  }
};

// pipelined (rung 5e): step k is the last step of one launch of steps 0 .. k from the start, so that
// steps after the first run the fused W1 update + next first layer (a launch's first step runs only
// the forward half); its state before step k (parameters, Adam's moments) is the state the launch of
// steps 0 .. k-1 ended with.
//
// Everything is checked step by step from the kernel's own state, not against a float64 trajectory
// of its own: after one Adam step the two trajectories differ by up to ~lr in the elements whose
// gradient lies within fp32 rounding of zero (Adam normalises the gradient, so rounding decides
// the sign of such a step), and every later step inherits the difference. Step k's loss and
// gradients are float64's at the kernel's parameters of step k; its update is float64's step from
// the kernel's parameters and moments with float64's gradient, element by element within
// common/mlp/step_bound.h's bounds (the kernel's gradient error as Adam's normalisation scales it, the
// update's own rounding).
void check_against_reference(const Config& c, Rung rung = Rung::Persistent) {
  const int K = 3;
  const bool pipelined = rung == Rung::Pipelined;
  INFO(rung_name(rung) << " B=" << c.B << " H1=" << c.H1 << " H2=" << c.H2 << " C=" << c.classes << " blocks=" << c.blocks << " adam=" << c.adam
            << " dropout=" << c.dropout);
  std::string plan;
  INFO("plan: " << plan);
  Setup s(c, K);
  double worst_loss = 0, worst_grad = 0;
  for (int k = 0; k < K; ++k) {
    StepState st = s.state();
    const nb::MlpParams at_k = s.ref_params(s.P.get());
    s.G.poison();
    if (pipelined) s.reset();
    const PersistPlan pl = pipelined ? s.run(0, k + 1, true, rung) : s.run(k, 1, true, rung);
    if (pipelined) CHECK(pipelined_fuses_first_layer(s.params(), pl) == (pl.NC == 1 && c.B <= 32));
    if (k == 0)
      plan = "blocks " + std::to_string(pl.blocks) + ", units " + std::to_string(pl.nc) + "/" + std::to_string(pl.nj) +
             ", smem " + std::to_string(pl.smem);
    std::vector<int> y;
    const std::vector<double> x = s.batch(k, &y);
    const std::vector<std::vector<double>> masks = s.masks(k);
    const auto* mp = c.dropout > 0 ? &masks : nullptr;
    const nb::MlpForward fk = nb::mlp_forward(at_k, x.data(), y.data(), c.B, mp);
    const nb::MlpParams gk = nb::mlp_backward(at_k, fk, y.data(), c.B, mp);
    const float loss = s.loss.get()[static_cast<size_t>(k)];
    worst_loss = std::max(worst_loss, std::fabs(loss - fk.loss) / std::fabs(fk.loss));
    const std::vector<double> ours_g = s.packed(s.G.get()), g = flatten(gk);
    // Norm-wise only in a step without a gate near zero (step_bound.h: fp32 may flip such a gate,
    // which moves whole gradient rows within the element-wise bound); a NaN always counts.
    size_t near_zero = 0;
    const std::vector<double> gbound = mlp_grad_error_bound(at_k, fk, y.data(), c.B, mp, &near_zero);
    const double rg = nb::rel_error(ours_g, g);
    if (std::isnan(rg)) worst_grad = rg;
    else if (near_zero == 0) worst_grad = std::max(worst_grad, rg);
    else MESSAGE("step " << k << ": " << near_zero << " gate(s) at fp32's rounding of zero: norm-wise gradient check skipped");
    // Element by element: the gradient within fp32's worst-case rounding bound, then the step from
    // the gradient the kernel applied (G holds the very value each update used), within what that
    // gradient's own error allows through Adam's normalisation.
    const UpdateCheck gc = check_within("g", ours_g, g, gbound);
    std::vector<double> dg(g.size());
    for (size_t i = 0; i < g.size(); ++i) dg[i] = std::fabs(ours_g[i] - g[i]);
    s.after(&st);
    const UpdateCheck up = check_update(st, g, dg, c.adam, s.lr(), k + 1);
    INFO("step " << k << " gradients: " << gc.summary());
    INFO("step " << k << " update: " << up.summary());
    CHECK(gc.bad == 0u);
    CHECK(up.bad == 0u);
    CHECK(up.loose * 4 <= up.n);  // a bound that excuses most elements checks nothing
  }
  CHECK(worst_loss <= 1e-5);
  CHECK(worst_grad <= 1e-5);
  CHECK(s.copy_mismatches() == 0u);
  unsigned long long bad = 0;
  CUDA_CHECK(cudaMemcpy(&bad, s.bad.p, sizeof bad, cudaMemcpyDeviceToHost));
  CHECK(bad == ~0ull);
}

TEST_CASE("mlp persistent: every step's loss, gradients and update against the float64 reference") {
  NB_SKIP_WITHOUT_DEVICE();
  // blocks 0: one per first-layer unit (at most one per SM: 300 units give 3 per block); explicit
  // counts give 8, 4, 2 and 1 units per block, blocks
  // with no second-layer unit (H2 < blocks), and a last block with fewer first-layer units.
  const Config cases[] = {
      {33, 100, 30, 0, true, 0.2},  {1, 10, 300, 3, true, 0.0},  {64, 300, 10, 0, false, 0.0},
      {32, 128, 64, 16, true, 0.2}, {33, 100, 30, 50, true, 0.5}, {33, 100, 30, 100, false, 0.2},
      {7, 30, 100, 9, true, 0.0},
      // W1's shape and split: the instance with the shape compiled in
      {32, 128, 64, 0, true, 0.2},
      // last layers of 3 and kMaxClasses classes (the transposed W3's row stride: 4 and 12)
      {33, 100, 30, 0, true, 0.2, 3},  {20, 50, 70, 0, false, 0.0, kMaxClasses},
  };
  for (const Config& c : cases) check_against_reference(c);
}

// The element-wise checks are tight enough to fail wrong steps: the kernel's step 1 (Adam, so the
// moments hold step 0) passes; judged with a learning rate 1% off, with one element's step skipped,
// or with v not written back, the update check fails, and a gradient element of the wrong sign
// fails the gradient check. The altered element is the best conditioned one (largest |g| over its
// rounding bound); a wrong learning rate fails wherever the kernel's gradient error is small.
TEST_CASE("mlp persistent: the element-wise gradient and update checks fail wrong steps") {
  NB_SKIP_WITHOUT_DEVICE();
  const Config c{7, 30, 100, 9, true, 0.0};
  Setup s(c, 2);
  s.run(0, 1);
  StepState st = s.state();
  const nb::MlpParams at = s.ref_params(s.P.get());
  s.run(1, 1);
  s.after(&st);
  std::vector<int> y;
  const std::vector<double> x = s.batch(1, &y);
  const nb::MlpForward f = nb::mlp_forward(at, x.data(), y.data(), c.B);
  const std::vector<double> g = flatten(nb::mlp_backward(at, f, y.data(), c.B)), ours_g = s.packed(s.G.get());
  const std::vector<double> bound = mlp_grad_error_bound(at, f, y.data(), c.B);
  std::vector<double> dg(g.size());
  for (size_t j = 0; j < g.size(); ++j) dg[j] = std::fabs(ours_g[j] - g[j]);
  const UpdateCheck gc = check_within("g", ours_g, g, bound), ok = check_update(st, g, dg, true, s.lr(), 2);
  INFO("the kernel's step: gradients " << gc.summary() << "; update " << ok.summary());
  CHECK(gc.bad == 0u);
  CHECK(ok.bad == 0u);
  size_t i = 0;
  double best = 0;
  for (size_t j = 0; j < g.size(); ++j)
    if (bound[j] > 0 && std::fabs(g[j]) / bound[j] > best) best = std::fabs(g[j]) / bound[j], i = j;
  INFO("altered element " << i << ": g " << g[i] << ", bound " << bound[i]);
  CHECK(check_update(st, g, dg, true, 1.01 * s.lr(), 2).bad > 0u);
  StepState skipped = st;
  skipped.p1[i] = skipped.p0[i];
  CHECK(check_update(skipped, g, dg, true, s.lr(), 2).bad == 1u);
  StepState stale_v = st;
  stale_v.v1 = stale_v.v0;
  CHECK(check_update(stale_v, g, dg, true, s.lr(), 2).bad > 0u);
  std::vector<double> flipped = ours_g;
  flipped[i] = -flipped[i];
  CHECK(check_within("g", flipped, g, bound).bad == 1u);
}

// ---- properties both rungs keep (pipelined: rung 5e's kernel, else 5c's)

// The steps of one launch, split over launches of `counts` steps, and run again: bit-identical
// parameters, Adam moments and losses.
void check_split_launches(const Config& c, Rung rung, const std::vector<int>& counts) {
  INFO(rung_name(rung) << " B=" << c.B << " H1=" << c.H1);
  int total = 0;
  for (int n : counts) total += n;
  Setup s(c, total);
  s.run(0, total, true, rung);
  const std::vector<float> one = s.P.get(), m_one = s.M.get(), loss_one = s.loss.get();
  s.reset();
  for (int first = 0, i = 0; i < static_cast<int>(counts.size()); first += counts[i++]) s.run(first, counts[i], true, rung);
  const std::vector<float> two = s.P.get(), m_two = s.M.get(), loss_two = s.loss.get();
  s.reset();
  s.run(0, total, true, rung);
  const std::vector<float> again = s.P.get();
  CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(m_one.data(), m_two.data(), m_one.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(loss_one.data(), loss_two.data(), loss_one.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(one.data(), again.data(), one.size() * sizeof(float)) == 0);
}

// W1's compiled-in instance and the generic one: bit-identical steps.
void check_w1_instance(Rung rung) {
  const Config c{32, 128, 64, 0, true, 0.2};
  Setup s(c, 6);
  const PersistPlan special = s.run(0, 6, true, rung);
  if (!special.specialized) {  // 5c/5e: W1's split is one block per first-layer unit: 128 SMs needed
    MESSAGE("skipped: this GPU cannot run W1's split, so its instance does not apply");
    return;
  }
  const std::vector<float> p1 = s.P.get(), m1 = s.M.get(), loss1 = s.loss.get();
  s.reset();
  const PersistPlan generic = s.run(0, 6, false, rung);
  CHECK_FALSE(generic.specialized);
  const std::vector<float> p2 = s.P.get(), m2 = s.M.get(), loss2 = s.loss.get();
  CHECK(std::memcmp(p1.data(), p2.data(), p1.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(m1.data(), m2.data(), m1.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(loss1.data(), loss2.data(), loss1.size() * sizeof(float)) == 0);
}

// A NaN weight in the last layer: the first step's loss is NaN and the flag names step 0.
void check_divergence_flag(const Config& c, Rung rung) {
  INFO(rung_name(rung) << " B=" << c.B << " H1=" << c.H1);
  Setup s(c, 4);
  std::vector<float> p = s.p0;
  p[s.woff[2] + 3] = NAN;
  s.P.set(p);
  s.run(0, 4, true, rung);
  unsigned long long bad = 0;
  CUDA_CHECK(cudaMemcpy(&bad, s.bad.p, sizeof bad, cudaMemcpyDeviceToHost));
  CHECK(bad == 0ull);
  CHECK(std::isnan(s.loss.get()[0]));
}

// Plans the kernel cannot run: exit code 2, the message naming the launch mode.
void check_refusals(Rung rung) {
  Setup s(Config{32, 128, 64, 0, true, 0.0}, 1);
  const std::string mode = std::string("--launch ") + rung_name(rung);
  auto refused = [&](PersistParams p, int blocks) {
    try {
      if (rung == Rung::Pipelined) plan_pipelined(p, blocks, 0);
      else if (rung == Rung::Cluster32) plan_cluster32(p, blocks, 0);
      else plan_persistent(p, blocks, 0);
      FAIL("expected a refusal");
    } catch (const nb::Error& e) {
      CHECK(e.code == nb::kExitUsage);
      CHECK(std::string(e.what()).find(mode) == 0);
    }
  };
  PersistParams p = s.params();
  refused(p, 2);  // 2 blocks would need 64 first-layer units each (at most 8)
  if (rung == Rung::Cluster32) refused(p, 17);  // a cluster of at most 16 blocks
  p.C = kMaxClasses + 1;
  refused(p, 0);  // a last layer wider than the kernel's class registers
  p.C = s.C;
  p.B = 200;
  refused(p, 0);  // a batch past the kernel's rows (kRowsPerWarp a warp)
}

TEST_CASE("mlp persistent: steps split over launches and repeated runs are bit-identical") {
  NB_SKIP_WITHOUT_DEVICE();
  check_split_launches(Config{33, 100, 30, 0, true, 0.2}, Rung::Persistent, {2, 3});
}

TEST_CASE("mlp persistent: W1's compiled-in instance and the generic one give bit-identical steps") {
  NB_SKIP_WITHOUT_DEVICE();
  check_w1_instance(Rung::Persistent);
}

TEST_CASE("mlp persistent: a non-finite loss sets the divergence flag at its step") {
  NB_SKIP_WITHOUT_DEVICE();
  check_divergence_flag(Config{33, 100, 30, 0, false, 0.0}, Rung::Persistent);
}

TEST_CASE("mlp persistent: plans it cannot run are refused with exit code 2") {
  NB_SKIP_WITHOUT_DEVICE();
  check_refusals(Rung::Persistent);
}

// ---- rung 5e (--launch pipelined, 5e_pipelined.cuh): the same kernel with fewer dependent phases

TEST_CASE("mlp pipelined: every step's loss, gradients and update against the float64 reference") {
  NB_SKIP_WITHOUT_DEVICE();
  // The fused W1 update + next first layer runs with one first-layer unit a block and batch <= 32
  // (batch 1, 17, 20, 32; widths 37 and 128; 3, 10 and 12 classes); the others run 5c's two passes
  // (batch 31 with 2 units a block at width 200, batch 33 and 64, 4 units a block).
  const Config cases[] = {
      {1, 37, 20, 0, true, 0.2},        {17, 37, 30, 0, true, 0.2, 3},   {20, 50, 70, 0, false, 0.0, kMaxClasses},
      {32, 128, 64, 0, true, 0.2},      {32, 128, 64, 0, true, 0.0},     {31, 200, 64, 0, true, 0.2},
      {33, 200, 37, 0, true, 0.2},      {64, 100, 30, 0, false, 0.0},    {7, 30, 100, 9, true, 0.0},
      {33, 100, 30, 100, false, 0.2},
  };
  for (const Config& c : cases) check_against_reference(c, Rung::Pipelined);
}

TEST_CASE("mlp pipelined: steps split over launches and repeated runs are bit-identical") {
  NB_SKIP_WITHOUT_DEVICE();
  // fused (one unit a block, batch 17 and W1's 32) and not (batch 33)
  for (const Config& c : {Config{17, 37, 30, 0, true, 0.2}, Config{32, 128, 64, 0, true, 0.2}, Config{33, 100, 30, 0, true, 0.2}})
    check_split_launches(c, Rung::Pipelined, {2, 1, 2});
}

TEST_CASE("mlp pipelined: W1's compiled-in instance and the generic one give bit-identical steps") {
  NB_SKIP_WITHOUT_DEVICE();
  check_w1_instance(Rung::Pipelined);
}

TEST_CASE("mlp pipelined: a non-finite loss sets the divergence flag at its step") {
  NB_SKIP_WITHOUT_DEVICE();
  for (const Config& c : {Config{33, 100, 30, 0, false, 0.0}, Config{17, 37, 30, 0, false, 0.0}}) check_divergence_flag(c, Rung::Pipelined);
}

TEST_CASE("mlp pipelined: plans it cannot run are refused with exit code 2, named after the launch mode") {
  NB_SKIP_WITHOUT_DEVICE();
  check_refusals(Rung::Pipelined);
}

// ---- rung 5f (--launch cluster32, 5f_cluster32.cuh): the model in one cluster, 3xTF32 tensor cores.
// Every case also checks that W2's column copies and the W3 replicas never disagree with the rows
// they mirror (copy_mismatches, counted by the kernel against the owners' shared memory).

TEST_CASE("mlp cluster32: every step's loss, gradients and update against the float64 reference") {
  NB_SKIP_WITHOUT_DEVICE();
  // W1's shape (the compiled-in instance) with and without dropout; batch 1, 7, 17, 20, 31 (32-row
  // instance) and 33, 64 (64-row instance, at narrow first layers: W1's widths do not fit beside 64 rows);
  // first-layer widths 30, 37 (3-4 units a block, blocks that own fewer or none), 50; second-layer
  // widths 20, 30 (blocks that own no second-layer unit), 70, 100 (7-12 a block); 3, 10 and 12
  // classes; clusters of 16, 13 and 9 blocks.
  const Config cases[] = {
      {32, 128, 64, 0, true, 0.2},     {32, 128, 64, 0, true, 0.0},        {1, 37, 20, 0, true, 0.2},
      {17, 37, 100, 0, true, 0.2, 3},  {33, 37, 30, 0, false, 0.2},        {64, 37, 30, 0, true, 0.2},
      {20, 50, 70, 13, false, 0.0, 12}, {7, 30, 100, 9, true, 0.0},        {31, 128, 64, 16, true, 0.5},
  };
  for (const Config& c : cases) check_against_reference(c, Rung::Cluster32);
}

TEST_CASE("mlp cluster32: steps split over launches and repeated runs are bit-identical") {
  NB_SKIP_WITHOUT_DEVICE();
  for (const Config& c : {Config{32, 128, 64, 0, true, 0.2}, Config{33, 37, 30, 0, false, 0.2}})
    check_split_launches(c, Rung::Cluster32, {2, 1, 2});
}

TEST_CASE("mlp cluster32: W1's compiled-in instance and the generic one give bit-identical steps") {
  NB_SKIP_WITHOUT_DEVICE();
  check_w1_instance(Rung::Cluster32);
}

TEST_CASE("mlp cluster32: a non-finite loss sets the divergence flag at its step") {
  NB_SKIP_WITHOUT_DEVICE();
  for (const Config& c : {Config{33, 37, 30, 0, false, 0.0}, Config{32, 128, 64, 0, true, 0.2}}) check_divergence_flag(c, Rung::Cluster32);
}

TEST_CASE("mlp cluster32: plans it cannot run are refused with exit code 2, named after the launch mode") {
  NB_SKIP_WITHOUT_DEVICE();
  check_refusals(Rung::Cluster32);
}

}  // namespace
}  // namespace nbtest
