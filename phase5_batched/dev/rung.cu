// phase5_batched/dev/rung.cu — one of phase 5's one-launch rungs alone, in the manner of llm.c's
// dev/cuda: no Trainer, no data files, no record. Random bytes as images, random labels and random
// initial weights (all from --seed, on the host), then the rung's plan and launch entry points (its
// public header: 5c_persistent.h, 5e_pipelined.h, 5f_cluster32.h, 5d_cluster.h, 5g_grid.h) and nothing else.
//
//   make phase5-rung && build/phase5_rung --rung pipelined
//   build/phase5_rung --rung persistent|pipelined|cluster32|cluster|grid [--layers 784,30,100,10] [--batch 7]
//       [--steps 4] [--blocks 0] [--seed 42] [--repeats 20] [--optimizer adam|sgd] [--dropout 0]
//
// persistent (5c), pipelined (5e), cluster32 (5f): fp32, Adam (or SGD), optional dropout; default
// shape 784-30-100-10 at batch 7. cluster (5d) and grid (5g): fp16 weights and activations, SGD, no
// dropout (W2's recipe); default 784-40-40-40-10 at batch 7. --blocks 0: the plan's choice.
// Step k is checked at the rung's own state: a launch of steps 0..k from the initial state (the one
// of steps 0..k-1 gave the state before it), so a launch's later steps (5e's fused first layer) are
// checked too. The tolerances are the GPU tests':
//   fp32 (tests/gpu/test_mlp_persistent.cu): loss and gradients 1e-5 of float64 (relative,
//     norm-wise; the gradients' not in a step with a gate near zero, step_bound.h); gradients element by element within fp32's rounding bound, the update (parameters,
//     Adam's moments) within what that allows (common/mlp/step_bound.h);
//   cluster and grid (tests/gpu/test_mlp_cluster.cu): against a float64 reference that rounds to fp16 where
//     the kernel does, loss 1e-4 and gradients 2e-3; against plain float64, loss 1e-2 and gradients
//     no farther than that reference + 5e-3; the parameters' change 5e-3 of SGD's with the rounding
//     reference's gradient; the fp16 copies written back the masters rounded.
// Timing: launches of --steps steps as the Trainer makes them (no gradient or copy checks), CUDA
// events, 3 warm-up launches, the median of --repeats.
// Output: one line per check, then PASS (exit 0) or FAIL (exit 1). A bad flag or a shape the rung's
// plan refuses: one line, exit 2; no GPU: 3; a failed CUDA call: 8 (docs/ERRORS.md).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "5c_persistent.h"
#include "5d_cluster.h"
#include "5g_grid.h"
#include "5e_pipelined.h"
#include "5f_cluster32.h"
#include "check.cuh"
#include "cli.h"
#include "cuda_handles.h"
#include "device_info.h"
#include "errors.h"
#include "mlp/step_bound.h"  // the element-wise bounds the GPU tests use too
#include "mlp/layers.cuh"        // AdamHyper
#include "mlp/validate.h"        // flatten
#include "reference.h"
#include "stats.h"
#include "timing.cuh"

namespace {

using namespace nb::mlp;
using nb::DevBuf;

__attribute__((format(printf, 1, 2))) std::string fmt(const char* f, ...) {
  char buf[768];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

bool all_ok = true;
void report(bool pass, const std::string& what) {  // one line per check
  all_ok = all_ok && pass;
  std::printf("%-4s %s\n", pass ? "ok" : "FAIL", what.c_str());
}
// got <= tol (NaN fails)
void report_tol(int k, const char* what, double got, double tol) {
  report(got <= tol, fmt("step %d: %s %.3g (tolerance %.3g)", k, what, got, tol));
}

template <class T>
void poison(DevBuf<T>& b) { CUDA_CHECK(cudaMemset(b.get(), 0xFF, b.bytes())); }  // NaN for float and half
template <class T>
void fill(DevBuf<T>& b, const std::vector<T>& h) { b.upload(h.data(), h.size()); }

double h16(double v) { return static_cast<double>(__half2float(__float2half_rn(static_cast<float>(v)))); }

// The float64 reference that rounds where rung 5d rounds (as tests/gpu/test_mlp_cluster.cu): pixels,
// weights, activations and output gradients to fp16; sums, softmax and SGD in float64. Returns the
// loss and (*g) the gradients in flatten() order. A hidden pre-activation within the kernel's fp32
// summation error of 0 may take the other ReLU decision there: `amb` (if given) receives those
// (layer, element); `flip` decides the listed ones the other way.
using Amb = std::pair<int, size_t>;
double rounded_step(const nb::MlpParams& m, const std::vector<double>& x, const std::vector<int>& y, int B,
                    std::vector<double>* g, std::vector<Amb>* amb, const std::vector<Amb>& flip) {
  const int L = static_cast<int>(m.layers.size()) - 1;
  std::vector<std::vector<double>> a(L + 1), w16(L), gw(L), gb(L);
  for (double v : x) a[0].push_back(h16(v));
  for (int l = 0; l < L; ++l)
    for (double v : m.W[l]) w16[l].push_back(h16(v));
  std::vector<double> z;
  for (int l = 0; l < L; ++l) {
    const size_t in = m.layers[l], out = m.layers[l + 1];
    z.assign(B * out, 0.0);
    for (size_t r = 0; r < static_cast<size_t>(B); ++r)
      for (size_t u = 0; u < out; ++u) {
        double s = 0, mag = std::fabs(m.b[l][u]);
        for (size_t k = 0; k < in; ++k) s += a[l][r * in + k] * w16[l][u * in + k], mag += std::fabs(a[l][r * in + k] * w16[l][u * in + k]);
        z[r * out + u] = s + m.b[l][u];
        if (amb && l + 1 < L && std::fabs(z[r * out + u]) <= 8.0 * std::sqrt(static_cast<double>(in)) * 0x1p-24 * mag)
          amb->push_back({l + 1, r * out + u});
      }
    if (l + 1 == L) break;
    for (double v : z) a[l + 1].push_back(h16(std::max(v, 0.0)));
    for (const Amb& f : flip)
      if (f.first == l + 1) a[l + 1][f.second] = a[l + 1][f.second] > 0 ? 0.0 : h16(std::fabs(z[f.second]));
  }
  const size_t C = m.layers[L];
  std::vector<double> dz(B * C);
  double loss = 0;
  for (size_t r = 0; r < static_cast<size_t>(B); ++r) {
    const double* zr = &z[r * C];
    const double mx = *std::max_element(zr, zr + C);
    double se = 0;
    for (size_t c = 0; c < C; ++c) se += std::exp(zr[c] - mx);
    const double lse = mx + std::log(se);
    loss += lse - zr[y[r]];
    for (size_t c = 0; c < C; ++c) dz[r * C + c] = h16((std::exp(zr[c] - lse) - (static_cast<int>(c) == y[r] ? 1.0 : 0.0)) / B);
  }
  for (int l = L - 1; l >= 0; --l) {
    const size_t in = m.layers[l], out = m.layers[l + 1];
    gw[l].assign(out * in, 0.0), gb[l].assign(out, 0.0);
    for (size_t u = 0; u < out; ++u)
      for (size_t r = 0; r < static_cast<size_t>(B); ++r) {
        const double d = dz[r * out + u];
        gb[l][u] += d;
        for (size_t k = 0; k < in; ++k) gw[l][u * in + k] += d * a[l][r * in + k];
      }
    if (l == 0) break;
    std::vector<double> dp(B * in);
    for (size_t r = 0; r < static_cast<size_t>(B); ++r)
      for (size_t k = 0; k < in; ++k) {
        double s = 0;
        for (size_t u = 0; u < out; ++u) s += dz[r * out + u] * w16[l][u * in + k];
        dp[r * in + k] = a[l][r * in + k] > 0 ? h16(s) : 0.0;
      }
    dz.swap(dp);
  }
  g->clear();
  for (int l = 0; l < L; ++l) g->insert(g->end(), gw[l].begin(), gw[l].end()), g->insert(g->end(), gb[l].begin(), gb[l].end());
  return loss / B;
}

int run(int argc, char** argv) {
  std::string rung = "persistent", opt;
  std::vector<int> layers;
  int B = 7, K = 4, blocks = 0, repeats = 20;
  uint64_t seed = 42;
  double dropout = 0;
  nb::Cli cli("phase5_rung", "One of phase 5's one-launch rungs alone: random data, every step against float64, timed.");
  cli.add_string("--rung", &rung, "the rung", {"persistent", "pipelined", "cluster32", "cluster", "grid"});
  cli.add_int_list("--layers", &layers, "widths (default 784,30,100,10; cluster, grid: 784,40,40,40,10)");
  cli.add_int("--batch", &B, "rows a step");
  cli.add_int("--steps", &K, "steps checked (and steps a timed launch)", 1, 256);
  cli.add_int("--blocks", &blocks, "blocks (cluster rungs: the cluster's size; grid: one an SM at most); 0: the plan's choice", 0, 4096);
  cli.add_uint64("--seed", &seed, "seed of the data and the initial weights");
  cli.add_int("--repeats", &repeats, "timed launches (the median is printed)", 1, 100000);
  cli.add_string("--optimizer", &opt, "fp32 rungs: adam (default) or sgd; cluster, grid: sgd", {"adam", "sgd"});
  cli.add_double("--dropout", &dropout, "fp32 rungs: dropout rate of the hidden layers", false, 0.0, 1.0);
  if (!cli.parse(argc, argv)) return 0;
  const bool gr = rung == "grid", cl = rung == "cluster" || gr;  // 5g takes 5d's parameter block
  if (layers.empty()) layers = cl ? std::vector<int>{784, 40, 40, 40, 10} : std::vector<int>{784, 30, 100, 10};
  const int L = static_cast<int>(layers.size()) - 1;
  if (cl ? (L < 2 || L > kClMaxLayers) : L != 3)
    throw nb::Error(nb::kExitUsage, "--layers: rung " + rung + " needs " + (cl ? "1 to 4 hidden layers" : "two hidden layers"));
  if (!(dropout < 1)) throw nb::Error(nb::kExitUsage, fmt("--dropout: must be in [0, 1), got %f", dropout));
  if (cl && (opt == "adam" || dropout > 0)) throw nb::Error(nb::kExitUsage, "--rung " + rung + ": trains with --optimizer sgd and --dropout 0");
  const bool adam = !cl && opt != "sgd";
  const double lr = adam ? 1e-3 : 0.05;
  const nb::DeviceInfo dev = nb::require_device();

  // ---- host: data, order, initial parameters (the Trainer's layout: every W and b 8-aligned)
  const int D = layers[0], C = layers[L], n_img = B * K + 5;
  const int total = K * (repeats + 5);  // steps launched in all (the loss buffer is indexed by step)
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> px(static_cast<size_t>(n_img) * D), lab(n_img);
  std::vector<int> perm(n_img);
  for (auto& b : px) b = static_cast<uint8_t>(rng() % 256);
  for (auto& l : lab) l = static_cast<uint8_t>(rng() % static_cast<unsigned>(C));
  for (int i = 0; i < n_img; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<size_t> woff, boff;
  size_t np = 0;
  for (int l = 0; l < L; ++l) {
    woff.push_back(np), np = (np + static_cast<size_t>(layers[l + 1]) * layers[l] + 7) / 8 * 8;
    boff.push_back(np), np = (np + layers[l + 1] + 7) / 8 * 8;
  }
  std::vector<float> p0(np, 0.f);
  for (int l = 0; l < L; ++l) {
    std::uniform_real_distribution<float> u(-1.f / std::sqrt(static_cast<float>(layers[l])), 1.f / std::sqrt(static_cast<float>(layers[l])));
    for (size_t i = 0; i < static_cast<size_t>(layers[l + 1]) * layers[l]; ++i) p0[woff[l] + i] = u(rng);
    for (int i = 0; i < layers[l + 1]; ++i) p0[boff[l] + i] = u(rng);
  }
  std::vector<AdamHyper> hyper(total + 2);
  for (size_t t = 1; t < hyper.size(); ++t) hyper[t] = adam_hyper(lr, static_cast<int64_t>(t));
  const uint64_t key = dropout_key(seed);
  auto packed = [&](const std::vector<float>& flat) {  // flatten() order
    std::vector<double> out;
    for (int l = 0; l < L; ++l) {
      out.insert(out.end(), flat.begin() + woff[l], flat.begin() + woff[l] + static_cast<size_t>(layers[l + 1]) * layers[l]);
      out.insert(out.end(), flat.begin() + boff[l], flat.begin() + boff[l] + layers[l + 1]);
    }
    return out;
  };
  auto ref_params = [&](const std::vector<float>& flat) { return nb::mlp::unflatten(layers, packed(flat)); };
  auto batch = [&](int i, std::vector<int>* y) {  // step i's images (x/255 in fp32, as the kernels) and labels
    std::vector<double> x(static_cast<size_t>(B) * D);
    y->assign(B, 0);
    for (int r = 0; r < B; ++r) {
      const size_t img = perm[static_cast<size_t>(i) * B + r];
      for (int j = 0; j < D; ++j) x[static_cast<size_t>(r) * D + j] = static_cast<float>(px[img * D + j]) / 255.0f;
      (*y)[r] = lab[img];
    }
    return x;
  };
  auto masks = [&](int k) {  // step k's dropout masks as the kernels draw them (0 or 1/(1-p))
    std::vector<std::vector<double>> out;
    for (int l = 0; l < 2 && dropout > 0; ++l) {
      std::vector<double> m(static_cast<size_t>(B) * layers[l + 1]);
      for (size_t i = 0; i < m.size(); ++i)
        m[i] = dropout_bits_host(key, l, k, static_cast<uint32_t>(i)) >= dropout_threshold(dropout) ? 1.0 / (1.0 - dropout) : 0.0;
      out.push_back(std::move(m));
    }
    return out;
  };

  // ---- device buffers and the plan
  DevBuf<uint8_t> dpx(px.size()), dlab(lab.size());
  DevBuf<int> dperm(perm.size());
  DevBuf<float> P(np), M(np), V(np), G(np), loss(total);
  DevBuf<__half> P16(np);
  DevBuf<AdamHyper> dhyper(hyper.size());
  DevBuf<unsigned long long> bad(1);
  DevBuf<unsigned> mism(1);
  const size_t H1 = layers[1], H2 = layers[2];
  DevBuf<xword> h1x(cl ? 1 : 2 * B * H1), h2x(cl ? 1 : 2 * B * H2), w2x(cl ? 1 : 2 * H2 * H1), w3x(cl ? 1 : 2 * (C * H2 + C));
  fill(dpx, px), fill(dlab, lab), fill(dperm, perm), fill(dhyper, hyper);
  PersistParams pp;
  ClusterParams cp;
  PersistPlan ppl;
  ClusterPlan cpl;
  GridPlan gpl;
  if (cl) {
    cp.images = dpx.get(), cp.labels = dlab.get(), cp.perm = dperm.get(), cp.L = L, cp.B = B;
    for (int l = 0; l <= L; ++l) cp.w[l] = layers[l];
    for (int l = 0; l < L; ++l) cp.woff[l] = woff[l], cp.boff[l] = boff[l];
    cp.params = P.get(), cp.params16 = P16.get(), cp.grads_out = G.get(), cp.lr = static_cast<float>(lr);
    cp.step_loss = loss.get(), cp.bad_step = bad.get(), cp.copy_mismatches = mism.get();
    if (gr) {
      gpl = grid_rung_plan(cp, blocks, dev.index);
      cpl.blocks = gpl.blocks, cpl.smem = gpl.smem;  // what the lines below print
    } else {
      cpl = cluster_rung_plan(cp, blocks, dev.index);
    }
  } else {
    pp.images = dpx.get(), pp.labels = dlab.get(), pp.perm = dperm.get();
    pp.D = D, pp.H1 = layers[1], pp.H2 = layers[2], pp.C = C, pp.B = B;
    pp.params = P.get(), pp.grads_out = G.get();
    if (adam) pp.adam_m = M.get(), pp.adam_v = V.get(), pp.hyper = dhyper.get(), pp.hyper_n = static_cast<int64_t>(hyper.size());
    pp.w0 = woff[0], pp.b0 = boff[0], pp.w1 = woff[1], pp.b1 = boff[1], pp.w2 = woff[2], pp.b2 = boff[2];
    pp.h1_words = h1x.get(), pp.h2_words = h2x.get(), pp.w2_words = w2x.get(), pp.w3_words = w3x.get();
    pp.adam = adam, pp.lr = static_cast<float>(lr);
    pp.dropout = dropout > 0, pp.key = key, pp.threshold = dropout_threshold(dropout);
    pp.scale = static_cast<float>(1.0 / (1.0 - dropout));
    pp.step_loss = loss.get(), pp.bad_step = bad.get(), pp.copy_mismatches = mism.get();
    ppl = rung == "pipelined" ? pipelined_rung_plan(pp, blocks, dev.index, true)
          : rung == "cluster32" ? cluster32_rung_plan(pp, blocks, dev.index, true)
                                : persistent_rung_plan(pp, blocks, dev.index, true);
  }
  // One launch of steps [s0, s0 + count), batches 0 .. count-1 of the epoch; checked: the gradients
  // and the copies' agreement are written for the checks.
  auto launch = [&](int64_t s0, int count, bool checked) {
    if (cl) {
      ClusterParams q = cp;
      q.s0 = s0, q.i0 = 0, q.count = count;
      if (!checked) q.grads_out = nullptr, q.copy_mismatches = nullptr;
      if (gr) grid_rung_launch(gpl, q, nullptr);
      else cluster_rung_launch(cpl, q, nullptr);
    } else {
      PersistParams q = pp;
      q.s0 = s0, q.i0 = 0, q.count = count;
      if (!checked) q.grads_out = nullptr, q.copy_mismatches = nullptr;
      if (rung == "pipelined") pipelined_rung_launch(ppl, q, nullptr);
      else if (rung == "cluster32") cluster32_rung_launch(ppl, q, nullptr);
      else persistent_rung_launch(ppl, q, nullptr);
    }
  };
  auto reset = [&] {  // the initial state; outputs and exchange words poisoned
    fill(P, p0);
    CUDA_CHECK(cudaMemset(M.get(), 0, M.bytes()));
    CUDA_CHECK(cudaMemset(V.get(), 0, V.bytes()));
    CUDA_CHECK(cudaMemset(mism.get(), 0, mism.bytes()));
    CUDA_CHECK(cudaMemset(bad.get(), 0xFF, bad.bytes()));  // ~0: no step diverged
    poison(G), poison(loss), poison(P16), poison(h1x), poison(h2x), poison(w2x), poison(w3x);
  };
  std::string shape;
  for (int w : layers) shape += (shape.empty() ? "" : "-") + std::to_string(w);
  std::printf("rung %s on %s: layers %s, batch %d, %s%s, seed %llu; plan: %d blocks", rung.c_str(), dev.name.c_str(),
              shape.c_str(), B, cl ? "fp16 " : "", adam ? "adam" : "sgd", static_cast<unsigned long long>(seed),
              cl ? cpl.blocks : ppl.blocks);
  if (!cl) std::printf(", units a block %d/%d%s", ppl.nc, ppl.nj, ppl.specialized ? " (W1's instance)" : "");
  std::printf(", %zu bytes of shared memory\n", cl ? cpl.smem : ppl.smem);
  if (dropout > 0) std::printf("dropout %.3g\n", dropout);

  // ---- every step against the reference, at the rung's own state before it
  std::vector<float> before = p0, m_before(np, 0.f), v_before(np, 0.f);
  for (int k = 0; k < K; ++k) {
    reset();
    launch(0, k + 1, true);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> after = P.download(), got_loss = loss.download();
    const std::vector<double> g_dev = packed(G.download());
    const nb::MlpParams at = ref_params(before);
    std::vector<int> y;
    const std::vector<double> x = batch(k, &y);
    const std::vector<std::vector<double>> mk = masks(k);
    const auto* mp = mk.empty() ? nullptr : &mk;
    const nb::MlpForward f = nb::mlp_forward(at, x.data(), y.data(), B, mp);
    const std::vector<double> g = flatten(nb::mlp_backward(at, f, y.data(), B, mp));
    const double loss_err = std::fabs(got_loss[k] - f.loss) / std::fabs(f.loss), grad_err = nb::rel_error(g_dev, g);
    if (!cl) {
      report_tol(k, fmt("loss %.6f (float64 %.6f): relative error", got_loss[k], f.loss).c_str(), loss_err, 1e-5);
      size_t near_zero = 0;
      const std::vector<double> gbound = nbtest::mlp_grad_error_bound(at, f, y.data(), B, mp, &near_zero);
      if (near_zero == 0 || std::isnan(grad_err))
        report_tol(k, "gradients: relative error (norm-wise)", grad_err, 1e-5);
      else  // a gate the fp32 run may flip: the element-wise check below is the one that holds
        std::printf("step %d: %zu gate(s) at fp32's rounding of zero: norm-wise gradient check skipped\n", k, near_zero);
      const nbtest::UpdateCheck gc = nbtest::check_within("g", g_dev, g, gbound);
      report(gc.bad == 0, fmt("step %d: gradients element by element within fp32's rounding bound: %s", k, gc.summary().c_str()));
      std::vector<double> dg(g.size());
      for (size_t i = 0; i < g.size(); ++i) dg[i] = std::fabs(g_dev[i] - g[i]);
      nbtest::StepState st;
      st.p0 = packed(before), st.p1 = packed(after);
      const std::vector<float> m1 = M.download(), v1 = V.download();
      if (adam) st.m0 = packed(m_before), st.v0 = packed(v_before), st.m1 = packed(m1), st.v1 = packed(v1);
      const nbtest::UpdateCheck up = nbtest::check_update(st, g, dg, adam, lr, k + 1);
      report(up.bad == 0 && up.loose * 4 <= up.n, fmt("step %d: update element by element (%s): %s", k, adam ? "adam" : "sgd", up.summary().c_str()));
      m_before = m1, v_before = v1;
    } else {
      std::vector<double> gr;
      std::vector<Amb> amb;
      const double loss_r = rounded_step(at, x, y, B, &gr, &amb, {});
      if (!amb.empty()) {  // decided the way that matches the kernel best, over every combination of at most 4
        const size_t n = std::min<size_t>(amb.size(), 4);
        double best = nb::rel_error(g_dev, gr);
        for (unsigned mask = 1; mask < (1u << n); ++mask) {
          std::vector<Amb> fl;
          std::vector<double> g2;
          for (size_t j = 0; j < n; ++j)
            if (mask & (1u << j)) fl.push_back(amb[j]);
          rounded_step(at, x, y, B, &g2, nullptr, fl);
          const double e = nb::rel_error(g_dev, g2);
          if (e < best) best = e, gr = std::move(g2);
        }
        std::printf("note step %d: %zu ReLU decision(s) within the kernel's rounding of 0\n", k, amb.size());
      }
      report_tol(k, fmt("loss %.6f (fp16-rounding reference %.6f): relative error", got_loss[k], loss_r).c_str(),
                 std::fabs(got_loss[k] - loss_r) / std::fabs(loss_r), 1e-4);
      report_tol(k, "gradients against the fp16-rounding reference: relative error", nb::rel_error(g_dev, gr), 2e-3);
      report_tol(k, fmt("loss against float64 (%.6f): relative error", f.loss).c_str(), loss_err, 1e-2);
      report_tol(k, "gradients against float64 (tolerance: the rounding reference's + 5e-3)", grad_err, nb::rel_error(gr, g) + 5e-3);
      const std::vector<double> b0 = packed(before), b1 = packed(after);
      std::vector<double> d_dev(b0.size()), d_ref(b0.size());
      for (size_t i = 0; i < b0.size(); ++i) d_dev[i] = b1[i] - b0[i], d_ref[i] = -static_cast<double>(static_cast<float>(lr)) * gr[i];
      report_tol(k, "parameters' change against SGD with the rounding reference's gradient", nb::rel_error(d_dev, d_ref), 5e-3);
    }
    before = after;
  }
  // ---- after the last launch (steps 0 .. K-1)
  if (cl) {
    const std::vector<__half> p16 = P16.download();
    size_t off = 0;
    for (int l = 0; l < L; ++l) {
      for (size_t i = 0; i < static_cast<size_t>(layers[l + 1]) * layers[l]; ++i)
        off += __half_as_ushort(p16[woff[l] + i]) != __half_as_ushort(__float2half_rn(before[woff[l] + i]));
      for (int i = 0; i < layers[l + 1]; ++i)
        off += __half_as_ushort(p16[boff[l] + i]) != __half_as_ushort(__float2half_rn(before[boff[l] + i]));
    }
    report(off == 0, fmt("fp16 copies written back are the masters rounded: %zu differ", off));
  }
  const unsigned mismatches = mism.download()[0];
  const unsigned long long bad_step = bad.download()[0];
  if ((cl && !gr) || rung == "cluster32") report(mismatches == 0, fmt("copies of a weight agree with the rows they mirror: %u bits differ", mismatches));
  report(bad_step == ~0ull, bad_step == ~0ull ? std::string("no step flagged non-finite") : fmt("step %llu flagged non-finite", bad_step));

  // ---- timing: launches of K steps, continuing from the state the checks left, each at new steps
  nb::EventTimer timer;
  int64_t s0 = 0;
  const std::vector<double> ms = nb::time_runs(timer, 3, repeats, [&] { launch(s0 += K, K, false); });
  CUDA_CHECK(cudaDeviceSynchronize());
  const nb::Stats s = nb::summarize(ms);
  std::printf("time: %.2f us a step (median %.1f us a launch of %d steps, min %.1f, max %.1f, %d launches)\n",
              1e3 * s.median / K, 1e3 * s.median, K, 1e3 * s.min, 1e3 * s.max, s.count);
  std::printf("%s\n", all_ok ? "PASS" : "FAIL");
  return all_ok ? nb::kExitOk : nb::kExitValidation;
}

}  // namespace

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, run); }
