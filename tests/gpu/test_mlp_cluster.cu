// tests/gpu/test_mlp_cluster.cu — phase 5's thread-block cluster epoch kernel
// (phase5_batched/5d_cluster.cuh) and the grid kernel that runs its model over up to every SM
// (phase5_batched/5g_grid.cuh), step by step against two float64 references:
//   * one that rounds where the kernel rounds (pixels x/255, weights, activations and output
//     gradients to fp16; sums, softmax and SGD in float64): the gradients must agree to 2e-3 and the
//     loss to 1e-4 (relative, norm-wise). What is left is fp32 against float64 summation and the odd
//     fp16 rounding that lands on the other side of a tie; a ReLU decision within the kernel's
//     rounding of zero is taken the kernel's way (searched, not assumed: see check_against_references);
//   * the plain float64 reference (no rounding): no farther from it than the rounding-aware one.
// After the steps, the parameters' change against the rounding-aware reference's own trajectory
// (5e-3).
// Fresh random images, labels, order and weights; awkward shapes (batch 1, 7, 20, 32; widths 10,
// 30, 100, 300; 1 to 4 hidden layers; 10 and 12 classes) and cluster sizes (1, 3, 8, 16: units
// split unevenly, blocks that own none). Losses and gradients are poisoned before every run; the
// kernel counts mismatches between its column copies and the row copies they mirror (must be 0). Also:
// steps split over launches and repeated runs are bit-identical, the fp16 copies written back are
// the masters rounded, a NaN loss sets the divergence flag, and what the kernel cannot run is refused.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "mlp/mlp_record.h"
#include "../../phase5_batched/5d_cluster.cuh"
#include "../../phase5_batched/5g_grid.cuh"
#include "check.cuh"
#include "gpu_test.cuh"
#include "reference.h"

namespace nbtest {
namespace {

using namespace nb::mlp;

struct CConfig {
  int B;
  std::vector<int> layers;  // 784, hidden..., classes
  int blocks;               // cluster size (0: the largest that fits); grid: blocks (0: the plan's)
  bool grid = false;        // the grid kernel (5g) instead of the cluster kernel (5d)
};

// What a run's plan chose (either kernel's).
struct RunPlan {
  int blocks = 0;
  size_t smem = 0;
};

double h16(double v) { return static_cast<double>(__half2float(__float2half_rn(static_cast<float>(v)))); }

struct CSetup {
  CConfig cfg;
  int L, D, C, n_images;
  std::vector<uint8_t> px, labels;
  std::vector<int> perm;
  std::vector<size_t> woff, boff;
  size_t nparams = 0;
  std::vector<float> p0;
  Dev<uint8_t> dpx, dlab;
  Dev<int> dperm;
  Dev<float> P, G, loss;
  Dev<__half> P16;
  Dev<unsigned long long> bad;
  Dev<unsigned> mismatches;  // column copies against row copies, counted by the kernel
  float lr = 0.05f;

  static size_t count(const std::vector<int>& w, std::vector<size_t>* wo, std::vector<size_t>* bo) {
    size_t off = 0;
    for (size_t l = 0; l + 1 < w.size(); ++l) {
      if (wo) wo->push_back(off);
      off = (off + static_cast<size_t>(w[l + 1]) * w[l] + 7) / 8 * 8;
      if (bo) bo->push_back(off);
      off = (off + w[l + 1] + 7) / 8 * 8;
    }
    return off;
  }
  CSetup(const CConfig& c, int steps)
      : cfg(c),
        L(static_cast<int>(c.layers.size()) - 1),
        D(c.layers[0]),
        C(c.layers.back()),
        n_images(c.B * steps + 3),
        px(static_cast<size_t>(n_images) * c.layers[0]),
        labels(n_images),
        perm(n_images),
        dpx(px.size()),
        dlab(labels.size()),
        dperm(perm.size()),
        P(count(c.layers, nullptr, nullptr)),
        G(count(c.layers, nullptr, nullptr)),
        loss(static_cast<size_t>(steps)),
        P16(count(c.layers, nullptr, nullptr)),
        bad(1),
        mismatches(1) {
    for (auto& b : px) b = static_cast<uint8_t>(test_rng()() % 256);
    for (auto& l : labels) l = static_cast<uint8_t>(test_rng()() % static_cast<unsigned>(C));
    for (int i = 0; i < n_images; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), test_rng());
    dpx.set(px), dlab.set(labels), dperm.set(perm);
    nparams = count(c.layers, &woff, &boff);
    p0.assign(nparams, 0.f);
    for (int l = 0; l < L; ++l) {
      const float a = 1.f / std::sqrt(static_cast<float>(c.layers[l]));
      std::uniform_real_distribution<float> u(-a, a);
      for (size_t i = 0; i < static_cast<size_t>(c.layers[l + 1]) * c.layers[l]; ++i) p0[woff[l] + i] = u(test_rng());
      for (int i = 0; i < c.layers[l + 1]; ++i) p0[boff[l] + i] = u(test_rng());
    }
    reset();
  }
  void reset() {
    P.set(p0);
    G.poison(), loss.poison(), P16.poison(), mismatches.zero();
    const unsigned long long none = ~0ull;
    CUDA_CHECK(cudaMemcpy(bad.p, &none, sizeof none, cudaMemcpyHostToDevice));
  }
  ClusterParams params() const {
    ClusterParams p;
    p.images = dpx.p, p.labels = dlab.p, p.perm = dperm.p;
    p.L = L, p.B = cfg.B;
    for (int l = 0; l <= L; ++l) p.w[l] = cfg.layers[l];
    for (int l = 0; l < L; ++l) p.woff[l] = woff[l], p.boff[l] = boff[l];
    p.params = P.p, p.params16 = P16.p, p.grads_out = G.p, p.lr = lr;
    p.step_loss = loss.p, p.bad_step = bad.p;
    p.copy_mismatches = mismatches.p;
    return p;
  }
  RunPlan run(int first, int count) {
    ClusterParams p = params();
    if (cfg.grid) {
      const GridPlan pl = plan_grid(p, cfg.blocks, 0);
      p.s0 = first, p.i0 = first, p.count = count;
      launch_grid(pl, p, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      return {pl.blocks, pl.smem};
    }
    const ClusterPlan pl = plan_cluster(p, cfg.blocks, 0);
    p.s0 = first, p.i0 = first, p.count = count;
    launch_cluster(pl, p, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    return {pl.blocks, pl.smem};
  }
  std::vector<double> packed(const std::vector<float>& flat) const {
    std::vector<double> out;
    for (int l = 0; l < L; ++l) {
      const size_t nw = static_cast<size_t>(cfg.layers[l + 1]) * cfg.layers[l];
      out.insert(out.end(), flat.begin() + woff[l], flat.begin() + woff[l] + nw);
      out.insert(out.end(), flat.begin() + boff[l], flat.begin() + boff[l] + cfg.layers[l + 1]);
    }
    return out;
  }
  nb::MlpParams ref_params(const std::vector<float>& flat) const {
    nb::MlpParams r;
    r.layers = cfg.layers;
    for (int l = 0; l < L; ++l) {
      const size_t nw = static_cast<size_t>(cfg.layers[l + 1]) * cfg.layers[l];
      r.W.emplace_back(flat.begin() + woff[l], flat.begin() + woff[l] + nw);
      r.b.emplace_back(flat.begin() + boff[l], flat.begin() + boff[l] + cfg.layers[l + 1]);
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

// A hidden pre-activation whose sign the kernel's fp32 sums may decide otherwise: (layer of the
// activation, element).
using Amb = std::pair<int, size_t>;

// The float64 reference that rounds where the kernel rounds. Returns the loss; g gets the gradients
// in the packed layout (W0, b0, W1, b1, ...).
// A ReLU decision is the one place where that reference and the kernel can part by more than
// rounding: a pre-activation within the kernel's accumulation error of 0 (fp32 sums of the products,
// in another order) can be positive on one side and not on the other, and the unit's whole
// backward term then differs (~1e-2 of the gradients' norm, seen once in W2's case). `ambiguous`
// (if given) receives those elements; `flips` (if given) decides them the other way.
// The decision is the kernel's: a unit is on when its fp16 activation h16(max(z, 0)) is positive, and
// the backward gates on that. A flip toggles the gate itself, not only the value: a pre-activation
// that tiny (|z| < 2^-25) rounds to an fp16 zero, so a flip that only rewrote the value could not turn
// the unit on.
double rounded_step(const nb::MlpParams& m, const std::vector<double>& x, const std::vector<int>& y, int B,
                    std::vector<double>* g, std::vector<Amb>* ambiguous = nullptr,
                    const std::vector<Amb>* flips = nullptr, std::vector<std::vector<double>>* ratio = nullptr) {
  const int L = static_cast<int>(m.layers.size()) - 1;
  std::vector<std::vector<double>> a(L + 1), w16(L);
  std::vector<std::vector<char>> on(L + 1);  // the ReLU gates of the hidden activations
  std::vector<std::pair<double, Amb>> near;  // the ambiguous decisions, |z| / error
  if (ratio) ratio->assign(L, {});
  a[0].resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) a[0][i] = h16(x[i]);
  for (int l = 0; l < L; ++l) {
    w16[l].resize(m.W[l].size());
    for (size_t i = 0; i < w16[l].size(); ++i) w16[l][i] = h16(m.W[l][i]);
  }
  std::vector<double> logits;
  for (int l = 0; l < L; ++l) {
    const int in = m.layers[l], out = m.layers[l + 1];
    std::vector<double> z(static_cast<size_t>(B) * out), err(z.size());
    for (int b = 0; b < B; ++b)
      for (int u = 0; u < out; ++u) {
        double s = 0, sa = std::fabs(m.b[l][u]);
        for (int k = 0; k < in; ++k) {
          const double t = a[l][static_cast<size_t>(b) * in + k] * w16[l][static_cast<size_t>(u) * in + k];
          s += t, sa += std::fabs(t);
        }
        z[static_cast<size_t>(b) * out + u] = s + m.b[l][u];
        // fp32 sums of `in` terms: a few ulps of the terms' magnitude times sqrt(in)
        err[static_cast<size_t>(b) * out + u] = 8.0 * std::sqrt(static_cast<double>(in)) * 0x1p-24 * sa;
      }
    if (l + 1 < L) {
      a[l + 1].resize(z.size());
      on[l + 1].resize(z.size());
      for (size_t i = 0; i < z.size(); ++i) {
        a[l + 1][i] = h16(std::max(z[i], 0.0));
        on[l + 1][i] = a[l + 1][i] > 0;
        if (ambiguous && std::fabs(z[i]) <= err[i]) near.push_back({std::fabs(z[i]) / err[i], {l + 1, i}});
        if (ratio) (*ratio)[l + 1].push_back(std::fabs(z[i]) / err[i]);
      }
      if (flips)
        for (const Amb& f : *flips)
          if (f.first == l + 1) {
            char& g = on[l + 1][f.second];
            g = !g;  // the value is the rounding of |z| or 0: a few ulps of the terms either way
            a[l + 1][f.second] = g ? h16(std::fabs(z[f.second])) : 0.0;
          }
    } else {
      logits = z;
    }
  }
  const int C = m.layers[L];
  std::vector<double> dz(static_cast<size_t>(B) * C);
  double loss = 0;
  for (int b = 0; b < B; ++b) {
    const double* z = &logits[static_cast<size_t>(b) * C];
    double mx = z[0];
    for (int c = 1; c < C; ++c) mx = std::max(mx, z[c]);
    double se = 0;
    for (int c = 0; c < C; ++c) se += std::exp(z[c] - mx);
    const double lse = mx + std::log(se);
    loss += lse - z[y[b]];
    for (int c = 0; c < C; ++c) dz[static_cast<size_t>(b) * C + c] = h16((std::exp(z[c] - lse) - (c == y[b] ? 1.0 : 0.0)) / B);
  }
  std::vector<std::vector<double>> gw(L), gb(L);
  for (int l = L - 1; l >= 0; --l) {
    const int in = m.layers[l], out = m.layers[l + 1];
    gw[l].assign(static_cast<size_t>(out) * in, 0.0);
    gb[l].assign(out, 0.0);
    for (int u = 0; u < out; ++u)
      for (int b = 0; b < B; ++b) {
        const double d = dz[static_cast<size_t>(b) * out + u];
        gb[l][u] += d;
        for (int k = 0; k < in; ++k) gw[l][static_cast<size_t>(u) * in + k] += d * a[l][static_cast<size_t>(b) * in + k];
      }
    if (l == 0) break;
    std::vector<double> dp(static_cast<size_t>(B) * in);
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < in; ++k) {
        double s = 0;
        for (int u = 0; u < out; ++u) s += dz[static_cast<size_t>(b) * out + u] * w16[l][static_cast<size_t>(u) * in + k];
        dp[static_cast<size_t>(b) * in + k] = on[l][static_cast<size_t>(b) * in + k] ? h16(s) : 0.0;
      }
    dz = std::move(dp);
  }
  g->clear();
  for (int l = 0; l < L; ++l) g->insert(g->end(), gw[l].begin(), gw[l].end()), g->insert(g->end(), gb[l].begin(), gb[l].end());
  if (ambiguous) {
    std::sort(near.begin(), near.end(), [](const auto& p, const auto& q) { return p.first < q.first; });
    for (const auto& e : near) ambiguous->push_back(e.second);
  }
  return loss / B;
}

void check_against_references(const CConfig& c) {
  const int K = 3;
  std::string shape;
  for (int w : c.layers) shape += std::to_string(w) + " ";
  INFO((c.grid ? "grid " : "cluster ") << "B=" << c.B << " layers " << shape << "blocks=" << c.blocks);
  CSetup s(c, K);
  double worst_loss = 0, worst_grad = 0, worst_loss64 = 0, worst_grad64 = 0, worst_grad_r64 = 0, worst_step = 0;
  for (int k = 0; k < K; ++k) {
    const std::vector<float> before = s.P.get();
    const nb::MlpParams at_k = s.ref_params(before);  // checked at the kernel's own parameters of step k
    s.G.poison();
    const RunPlan pl = s.run(k, 1);
    if (k == 0) INFO("plan: blocks " << pl.blocks << ", smem " << pl.smem);
    std::vector<int> y;
    const std::vector<double> x = s.batch(k, &y);
    std::vector<double> gr;
    std::vector<Amb> amb;
    std::vector<std::vector<double>> ratio;  // every hidden pre-activation's |z| / its rounding error
    const double lr16 = rounded_step(at_k, x, y, c.B, &gr, &amb, nullptr, &ratio);
    // Ambiguous ReLU decisions (usually none, rarely one or two): the reference decided the way
    // that matches the kernel best, over every combination of the 6 closest to zero (relative to their
    // error; ambiguous lists them closest first).
    const std::vector<double> ours0 = s.packed(s.G.get());
    double best = nb::rel_error(ours0, gr);
    std::vector<Amb> chosen;
    if (!amb.empty()) {
      const size_t n = std::min<size_t>(amb.size(), 6);
      for (unsigned mask = 1; mask < (1u << n); ++mask) {
        std::vector<Amb> fl;
        for (size_t j = 0; j < n; ++j)
          if (mask & (1u << j)) fl.push_back(amb[j]);
        std::vector<double> g2;
        rounded_step(at_k, x, y, c.B, &g2, nullptr, &fl);
        const double e = nb::rel_error(ours0, g2);
        if (e < best) best = e, gr = std::move(g2), chosen = fl;
      }
      MESSAGE("step " << k << ": " << amb.size() << " ReLU decision(s) within the kernel's rounding of 0");
    }
    // A decision the rounding model did not flag (the kernel's inputs to a layer are its own fp16
    // activations, which may sit one ulp from the reference's): the units whose bias gradients are
    // farthest from the reference's (relative to their layer's norm) point at it. For each of the
    // kWorstUnits worst, the kRowsTried batch rows whose pre-activation is closest to zero (within
    // kFlipReach of its rounding error) are candidates; the one flip that brings the gradients
    // closest is kept, if it brings them closer at all. At most kMaxExtra such flips a step.
    constexpr double kFlipReach = 30.0;
    constexpr int kWorstUnits = 3, kRowsTried = 3, kMaxExtra = 6;
    for (int extra = 0; extra < kMaxExtra && best > 5e-4; ++extra) {
      const std::vector<double>& g0 = gr;  // the reference with the decisions taken so far
      std::vector<std::pair<double, std::pair<int, int>>> units;  // (error, (hidden layer, unit))
      size_t off = 0;
      for (int l = 0; l + 1 < s.L; ++l) {  // weight layer l feeds hidden activation l + 1
        const int in = c.layers[l], out = c.layers[l + 1];
        off += static_cast<size_t>(out) * in;  // b_l follows W_l in the packed layout
        double nrm = 0;
        for (int u = 0; u < out; ++u) nrm += g0[off + u] * g0[off + u];
        nrm = std::sqrt(nrm) + 1e-30;
        for (int u = 0; u < out; ++u) units.push_back({std::fabs(ours0[off + u] - g0[off + u]) / nrm, {l + 1, u}});
        off += static_cast<size_t>(out);
      }
      const size_t nu = std::min<size_t>(units.size(), kWorstUnits);
      std::partial_sort(units.begin(), units.begin() + static_cast<std::ptrdiff_t>(nu), units.end(),
                        [](const auto& p, const auto& q) { return p.first > q.first; });
      std::vector<std::pair<double, Amb>> cands;  // (|z| / error, decision)
      for (size_t k2 = 0; k2 < nu; ++k2) {
        const int h = units[k2].second.first, u = units[k2].second.second, out = c.layers[h];
        std::vector<std::pair<double, Amb>> rows;
        for (int b = 0; b < c.B; ++b) {
          const size_t i = static_cast<size_t>(b) * out + u;
          const bool taken = std::find(chosen.begin(), chosen.end(), Amb{h, i}) != chosen.end();
          if (!taken && ratio[h][i] <= kFlipReach) rows.push_back({ratio[h][i], {h, i}});
        }
        std::sort(rows.begin(), rows.end(), [](const auto& p, const auto& q) { return p.first < q.first; });
        for (size_t j = 0; j < rows.size() && j < static_cast<size_t>(kRowsTried); ++j) cands.push_back(rows[j]);
      }
      double round_best = best, round_r = 0;
      std::vector<Amb> round_fl;
      std::vector<double> round_g;
      for (const auto& cand : cands) {
        std::vector<Amb> fl = chosen;
        fl.push_back(cand.second);
        std::vector<double> g2;
        rounded_step(at_k, x, y, c.B, &g2, nullptr, &fl);
        const double e = nb::rel_error(ours0, g2);
        if (e < round_best) round_best = e, round_r = cand.first, round_fl = std::move(fl), round_g = std::move(g2);
      }
      if (round_fl.empty()) break;
      best = round_best, gr = std::move(round_g), chosen = std::move(round_fl);
      const Amb& f = chosen.back();
      MESSAGE("step " << k << ": a ReLU decision " << round_r << " rounding errors from 0 (layer " << f.first
                      << ", unit " << f.second % c.layers[f.first] << ") taken the kernel's way");
    }
    const nb::MlpForward fk = nb::mlp_forward(at_k, x.data(), y.data(), c.B, nullptr);
    const nb::MlpParams gk = nb::mlp_backward(at_k, fk, y.data(), c.B, nullptr);
    const float loss = s.loss.get()[static_cast<size_t>(k)];
    const std::vector<double> ours_g = s.packed(s.G.get());
    worst_loss = std::max(worst_loss, std::fabs(loss - lr16) / std::fabs(lr16));
    worst_grad = std::max(worst_grad, nb::rel_error(ours_g, gr));
    worst_loss64 = std::max(worst_loss64, std::fabs(loss - fk.loss) / std::fabs(fk.loss));
    worst_grad64 = std::max(worst_grad64, nb::rel_error(ours_g, flatten(gk)));
    worst_grad_r64 = std::max(worst_grad_r64, nb::rel_error(gr, flatten(gk)));
    // The step's parameter change against SGD's with the rounding-aware gradient, from the same
    // (the kernel's own) parameters. Checked step by step: along a 3-step trajectory of its own the
    // reference drifts from the kernel's (a parameter a hair apart rounds to another fp16 copy),
    // and that drift compounded to 5.8e-3 once in a memcheck run (fresh random inputs; 5e-3 bound).
    const std::vector<double> b0 = s.packed(before), b1 = s.packed(s.P.get());
    std::vector<double> d_ours(b0.size()), d_ref(b0.size());
    for (size_t i = 0; i < b0.size(); ++i) d_ours[i] = b1[i] - b0[i], d_ref[i] = -static_cast<double>(s.lr) * gr[i];
    worst_step = std::max(worst_step, nb::rel_error(d_ours, d_ref));
  }
  CHECK(worst_loss <= 1e-4);
  CHECK(worst_grad <= 2e-3);
  // Against plain float64 the distance is fp16's own: the kernel may be no farther from it than the
  // rounding-aware reference is, plus 5e-3. (On these random-byte images at batch 7 both are ~5e-2
  // away, past --validate's 5e-2, which phase 5 checks on MNIST: 5.2e-2 was seen once.)
  CHECK(worst_loss64 <= 1e-2);
  CHECK(worst_grad64 <= worst_grad_r64 + 5e-3);
  CHECK(worst_step <= 5e-3);
  const std::vector<float> pf = s.P.get();
  // the fp16 copies written back are the masters rounded (every parameter, no gap)
  const std::vector<__half> p16 = s.P16.get();
  size_t mismatched = 0;
  for (int l = 0; l < s.L; ++l) {
    const size_t nw = static_cast<size_t>(c.layers[l + 1]) * c.layers[l];
    for (size_t i = 0; i < nw; ++i)
      mismatched += __half_as_ushort(p16[s.woff[l] + i]) != __half_as_ushort(__float2half_rn(pf[s.woff[l] + i]));
    for (int i = 0; i < c.layers[l + 1]; ++i)
      mismatched += __half_as_ushort(p16[s.boff[l] + i]) != __half_as_ushort(__float2half_rn(pf[s.boff[l] + i]));
  }
  CHECK(mismatched == 0);
  CHECK(s.mismatches.get()[0] == 0u);  // every column copy equals the row copy it mirrors
  unsigned long long bad = 0;
  CUDA_CHECK(cudaMemcpy(&bad, s.bad.p, sizeof bad, cudaMemcpyDeviceToHost));
  CHECK(bad == ~0ull);
}

bool clusters_supported() {
  int cc = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, 0));
  return cc >= 9;
}

#define NB_SKIP_WITHOUT_CLUSTERS()                                                    \
  NB_SKIP_WITHOUT_DEVICE();                                                           \
  if (!clusters_supported()) {                                                        \
    MESSAGE("skipped: thread-block clusters need compute capability 9.0 or newer"); \
    return;                                                                           \
  }

TEST_CASE("mlp cluster: every step's loss, gradients and update against the float64 references") {
  NB_SKIP_WITHOUT_CLUSTERS();
  const CConfig cases[] = {
      {32, {784, 128, 128, 128, 10}, 0},       // W2 at h = 128
      {7, {784, 100, 300, 10}, 16},            // 7 and 19 units a block, the last ones fewer
      {1, {784, 10, 10}, 16},                  // one hidden layer; blocks 10..15 own nothing
      {20, {784, 30, 50, 70, 20, 12}, 3},      // four hidden layers, 12 classes, uneven splits
      {32, {784, 24, 10}, 1},                  // a cluster of one
      {13, {784, 100, 30, 10}, 8},
  };
  for (const CConfig& c : cases) check_against_references(c);
}

// Five steps in one launch, in two (2 + 3), and again in one: the same parameters and losses, bit for bit.
void check_split_and_repeat(const CConfig& c) {
  CSetup s(c, 5);
  s.run(0, 5);
  const std::vector<float> one = s.P.get(), loss_one = s.loss.get();
  s.reset();
  s.run(0, 2);
  s.run(2, 3);
  const std::vector<float> two = s.P.get(), loss_two = s.loss.get();
  s.reset();
  s.run(0, 5);
  const std::vector<float> again = s.P.get();
  CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(loss_one.data(), loss_two.data(), loss_one.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(one.data(), again.data(), one.size() * sizeof(float)) == 0);
  for (float l : loss_one) CHECK(std::isfinite(l));
  CHECK(s.mismatches.get()[0] == 0u);  // the cluster kernel's column copies (the grid kernel has none)
}

TEST_CASE("mlp cluster: steps split over launches and repeated runs are bit-identical") {
  NB_SKIP_WITHOUT_CLUSTERS();
  check_split_and_repeat(CConfig{29, {784, 100, 60, 40, 10}, 16});
}

// Small enough for racecheck (which slows the kernel ~1000x): two launches of two steps, units split
// unevenly over four blocks, four hidden layers.
TEST_CASE("mlp cluster: a short run for the sanitizers") {
  NB_SKIP_WITHOUT_CLUSTERS();
  CSetup s(CConfig{5, {784, 20, 13, 27, 9, 10}, 4}, 4);
  s.run(0, 2);
  s.run(2, 2);
  for (float l : s.loss.get()) CHECK(std::isfinite(l));
  CHECK(s.mismatches.get()[0] == 0u);
}

TEST_CASE("mlp cluster: a non-finite loss sets the divergence flag at its step") {
  NB_SKIP_WITHOUT_CLUSTERS();
  CSetup s(CConfig{32, {784, 128, 128, 128, 10}, 0}, 4);
  std::vector<float> p = s.p0;
  p[s.woff[3] + 3] = NAN;  // a NaN weight in the last layer: the first step's loss is NaN
  s.P.set(p);
  s.run(0, 4);
  unsigned long long bad = 0;
  CUDA_CHECK(cudaMemcpy(&bad, s.bad.p, sizeof bad, cudaMemcpyDeviceToHost));
  CHECK(bad == 0ull);
  CHECK(std::isnan(s.loss.get()[0]));
}

TEST_CASE("mlp cluster: what the kernel cannot run is refused with exit code 2") {
  NB_SKIP_WITHOUT_CLUSTERS();
  CSetup s(CConfig{32, {784, 128, 128, 128, 10}, 0}, 1);
  auto refused = [](ClusterParams p, int blocks) {
    try {
      plan_cluster(p, blocks, 0);
    } catch (const nb::Error& e) {
      return e.code == nb::kExitUsage;
    }
    return false;
  };
  ClusterParams p = s.params();
  CHECK_FALSE(refused(p, 0));
  CHECK(refused(p, 17));  // larger than a cluster can be
  CHECK(refused(p, 1));   // the whole model in one block's shared memory: too large
  ClusterParams q = p;
  q.B = 33;  // more than one m32 tile of rows
  CHECK(refused(q, 0));
  q = p;
  q.w[0] = 780;  // input rows not whole 16-byte chunks
  CHECK(refused(q, 0));
  q = p;
  for (int l = 1; l < 4; ++l) q.w[l] = 2048;  // W2 at h = 2048: far beyond 16 blocks' shared memory
  CHECK(refused(q, 0));
}

// ---------------------------------------------------------------- the grid kernel (5g)
// The same references and tolerances: the grid kernel rounds where the cluster kernel rounds (fp16
// operands, activations and output gradients; fp32 sums, in another order).

TEST_CASE("mlp grid: every step's loss, gradients and update against the float64 references") {
  NB_SKIP_WITHOUT_DEVICE();
  const CConfig cases[] = {
      {32, {784, 128, 128, 128, 10}, 0, true},   // W2 at h = 128: 8 blocks of 16 units
      {7, {784, 100, 300, 10}, 5, true},         // 20 / 64 units a block: the last blocks own fewer
      {1, {784, 10, 10}, 3, true},               // one hidden layer (one barrier a step); blocks 1, 2 own nothing
      {20, {784, 30, 50, 70, 20, 12}, 3, true},  // four hidden layers, 12 classes, uneven splits
      {32, {784, 24, 10}, 1, true},              // a grid of one block
      {13, {784, 300, 100, 10}, 40, true},       // 16 units a block: blocks 19 .. 39 own nothing
      {9, {784, 45, 33, 27, 10}, 2, true},       // odd input widths: the update's one-column path
      {7, {784, 3000, 1000, 10}, 0, true},       // the second layer's rows and every master past shared memory: read through L2
  };
  for (const CConfig& c : cases) check_against_references(c);
}

TEST_CASE("mlp grid: the plan keeps what fits in shared memory and reads the rest from global memory") {
  NB_SKIP_WITHOUT_DEVICE();
  CSetup s(CConfig{32, {784, 1024, 1024, 1024, 10}, 0, true}, 1);
  ClusterParams p = s.params();
  const GridPlan small = plan_grid(p, 0, 0);
  CHECK(small.blocks == 64);  // 16 units of each hidden layer a block
  for (int l = 0; l < 3; ++l) CHECK(small.g.ly[l].U == 16);
  for (int l = 0; l < 3; ++l) CHECK(small.g.ly[l].w16_smem);
  CSetup w(CConfig{32, {784, 3000, 3000, 10}, 0, true}, 1);
  ClusterParams q = w.params();
  const GridPlan wide = plan_grid(q, 0, 0);
  CHECK(wide.g.ly[0].U == 32);
  CHECK_FALSE(wide.g.ly[1].w16_smem);  // 32 rows of 3,000 fp16 weights: past a block's shared memory
  CHECK_FALSE(wide.g.ly[1].m32_smem);
  // what --launch auto asks of the plan: the most units of a hidden layer a block holds
  CHECK(grid_units(s.params(), 0, 0) == 16);
  CHECK(grid_units(w.params(), 0, 0) == 32);
}

TEST_CASE("mlp grid: steps split over launches and repeated runs are bit-identical") {
  NB_SKIP_WITHOUT_DEVICE();
  check_split_and_repeat(CConfig{29, {784, 100, 60, 40, 10}, 0, true});
  check_split_and_repeat(CConfig{3, {784, 40, 10}, 2, true});  // one barrier a step
}

// Small enough for racecheck: two launches of two steps, units split unevenly over three blocks (the
// last owns none of the narrowest layer), four hidden layers.
TEST_CASE("mlp grid: a short run for the sanitizers") {
  NB_SKIP_WITHOUT_DEVICE();
  CSetup s(CConfig{5, {784, 40, 13, 27, 9, 10}, 3, true}, 4);
  s.run(0, 2);
  s.run(2, 2);
  for (float l : s.loss.get()) CHECK(std::isfinite(l));
}

TEST_CASE("mlp grid: a non-finite loss sets the divergence flag at its step") {
  NB_SKIP_WITHOUT_DEVICE();
  CSetup s(CConfig{32, {784, 128, 128, 128, 10}, 0, true}, 4);
  std::vector<float> p = s.p0;
  p[s.woff[3] + 3] = NAN;  // a NaN weight in the last layer: the first step's loss is NaN
  s.P.set(p);
  s.run(0, 4);
  unsigned long long bad = 0;
  CUDA_CHECK(cudaMemcpy(&bad, s.bad.p, sizeof bad, cudaMemcpyDeviceToHost));
  CHECK(bad == 0ull);
  CHECK(std::isnan(s.loss.get()[0]));
}

TEST_CASE("mlp grid: what the kernel cannot run is refused with exit code 2") {
  NB_SKIP_WITHOUT_DEVICE();
  CSetup s(CConfig{32, {784, 128, 128, 128, 10}, 0, true}, 1);
  auto refused = [](ClusterParams p, int blocks) {
    try {
      plan_grid(p, blocks, 0);
    } catch (const nb::Error& e) {
      return e.code == nb::kExitUsage;
    }
    return false;
  };
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  ClusterParams p = s.params();
  CHECK_FALSE(refused(p, 0));
  CHECK_FALSE(refused(p, 1));  // one block: 128 units of every layer, the rows through L2
  CHECK(refused(p, sms + 1));  // more blocks than SMs
  ClusterParams q = p;
  q.B = 33;
  CHECK(refused(q, 0));
  q = p;
  q.w[0] = 780;  // input rows not whole 16-byte chunks
  CHECK(refused(q, 0));
  q = p;
  q.w[4] = 17;  // more classes than a half-warp's softmax
  CHECK(refused(q, 0));
  q = p;
  for (int l = 1; l < 4; ++l) q.w[l] = 300 * sms;  // more than 256 units a block
  CHECK(refused(q, 0));
}

}  // namespace
}  // namespace nbtest
