// tests/gpu/test_mlp_fused_backward.cu — phase 5's one-pass backward kernel
// (phase5_batched/5b_fused_backward.cuh) against float64 CPU references: the weight update (SGD and
// Adam, bias included), the gradients it applied, the fp16 copy, and dZ_prev = relu'(dZ · W_old)
// with dropout scaling. Fresh random inputs, awkward shapes (batch 1, 20, 32; 10, 100 and 1000
// output units, 8, 104 and 296 inputs: none a multiple of the 64-column tile, 1000 rows cut into
// 16 row splits whose partials the fix-up adds), outputs poisoned before each run; fp16 operands,
// so 1e-2 relative (norm-wise) for the products, as the other fp16 kernels.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../../phase5_batched/5b_fused_backward.cuh"
#include "check.cuh"
#include "gpu_test.cuh"
#include "reference.h"

namespace nbtest {
namespace {

using namespace nb::mlp;

std::vector<float> uni(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(test_rng());
  return v;
}
std::vector<__half> to_h(const std::vector<float>& v) {
  std::vector<__half> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __float2half_rn(v[i]);
  return o;
}
double hd(float x) { return static_cast<double>(__half2float(__float2half_rn(x))); }
double rel(const std::vector<float>& a, const std::vector<double>& b) { return nb::rel_error(a.data(), b.data(), b.size()); }

struct Case {
  int B, out, in;
  bool adam, first;  // first: H gathered from bytes (no backward-data product)
  int sms = 132;     // the SM count the row split is planned for (1: long slices, every stage reused)
};

// run_case's comparisons of the cluster hand-over with the global one.
int* cluster_cases() {
  static int n = 0;
  return &n;
}
// check_next_forward's runs of the cluster hand-over.
int* next_cluster_cases() {
  static int n = 0;
  return &n;
}

// The first layer's pass with the next step's first forward (FusedBwdParams::next_fwd, phase 5's
// --next-forward): the pass's own outputs have the bits of the pass without it, and H_0 of the next
// batch (its bytes / 255 times the new fp16 weights, plus the new bias; ReLU; dropout 0 or 0.25)
// matches float64 on those operands within fp32 sums over K and the fp16 output's rounding (2^-11);
// one missing column tile would err by ~1/13. Both hand-overs (a counter a slice, reset for the
// next launch; the column tiles as one cluster where the GPU holds one) give the same bits.
void check_next_forward(const Case& c, const FusedBwdParams& p0, const std::vector<float>& w, const std::vector<float>& b,
                        const std::vector<float>& m0, const std::vector<float>& v0, const std::vector<uint8_t>& px,
                        const std::vector<int>& perm, Dev<float>& dW, Dev<float>& dB, Dev<__half>& w16, Dev<float>& gout,
                        Dev<float>& bgout, Dev<float>& dmW, Dev<float>& dvW, Dev<float>& dmB, Dev<float>& dvB) {
  const int B = c.B, M = c.out, N = c.in;
  const auto w_1 = dW.get(), b_1 = dB.get(), g_1 = gout.get(), bg_1 = bgout.get();
  const auto h_1 = w16.get();
  const auto mw_1 = dmW.get(), vw_1 = dvW.get();
  std::vector<__half> first_out;  // (the counter hand-over's H_0, for the cluster's)
  for (int run = 0; run < 4; ++run) {
    const double rate = run % 2 ? 0.25 : 0.0;
    const bool cluster = run >= 2;
    INFO("next forward, dropout " << rate << ", cluster hand-over " << cluster);
    dW.set(w), dB.set(b);
    dmW.set(std::vector<float>(m0.begin(), m0.begin() + w.size())), dvW.set(std::vector<float>(v0.begin(), v0.begin() + w.size()));
    dmB.set(std::vector<float>(m0.begin() + w.size(), m0.end())), dvB.set(std::vector<float>(v0.begin() + w.size(), v0.end()));
    w16.poison(), gout.poison(), bgout.poison();
    FusedBwdParams p = p0;
    Dev<__half> out(static_cast<size_t>(B) * M);
    out.poison();
    Dev<float> fws(fused_next_ws_floats(p));
    fws.poison();
    Dev<unsigned> fcnt(static_cast<size_t>(p.splits));
    fcnt.zero();
    const int next_i = 1;  // the 2nd batch of the permutation
    p.next_fwd = true, p.fws = fws.p, p.fcnt = fcnt.p;
    if (cluster) {
      if (fused_next_clusters<p5_fused_update_bwd>(p) < 1) break;  // (none fits this GPU: the counter only)
      p.next_cluster = true;
      ++*next_cluster_cases();
    }
    p.next_rows = p.rows, p.next_rows.i = next_i;
    p.next.bias = dB.p, p.next.out = out.p, p.next.dropout = rate > 0, p.next.key = 0x5EEDull, p.next.layer = 0;
    p.next.threshold = dropout_threshold(rate), p.next.scale = static_cast<float>(1.0 / (1.0 - rate));
    p.next.step = StepRef{p.step.base, 1};
    launch_fused_bwd<p5_fused_update_bwd>(p, nullptr);
    CHECK_LAUNCH();
    auto same = [](const auto& x, const auto& y) { return std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0; };
    const auto nw = dW.get(), nbias = dB.get();
    const auto h16 = w16.get();
    CHECK(same(nw, w_1));
    CHECK(same(nbias, b_1));
    CHECK(same(gout.get(), g_1));
    CHECK(same(bgout.get(), bg_1));
    CHECK(same(h16, h_1));
    if (c.adam) {
      CHECK(same(dmW.get(), mw_1));
      CHECK(same(dvW.get(), vw_1));
    }
    int64_t st = 0;
    CUDA_CHECK(cudaMemcpy(&st, p.step.base, sizeof(st), cudaMemcpyDeviceToHost));
    std::vector<double> ref(static_cast<size_t>(B) * M);
    for (int k = 0; k < B; ++k) {
      const uint8_t* x = &px[static_cast<size_t>(perm[next_i * B + k]) * N];
      for (int o = 0; o < M; ++o) {
        double s = 0;
        for (int i = 0; i < N; ++i) s += x[i] / 255.0 * __half2float(h16[static_cast<size_t>(o) * N + i]);
        double v = std::max(s + nbias[o], 0.0);
        if (rate > 0)
          v = dropout_bits_host(p.next.key, 0, static_cast<uint64_t>(st + 1), static_cast<uint32_t>(k * M + o)) >=
                      p.next.threshold
                  ? v * p.next.scale
                  : 0.0;
        ref[static_cast<size_t>(k) * M + o] = v;
      }
    }
    const auto got = out.get();
    std::vector<float> gf(got.size());
    for (size_t i = 0; i < got.size(); ++i) gf[i] = __half2float(got[i]);
    CHECK(rel(gf, ref) <= f16mma_tol(N) + 0x1p-11);
    if (run == 1) first_out = got;  // (dropout 0.25, by the counter)
    if (run == 3) CHECK(std::memcmp(got.data(), first_out.data(), got.size() * sizeof(__half)) == 0);
    bool reset = true;
    for (unsigned v : fcnt.get()) reset &= v == 0u;
    CHECK(reset);
  }
}

void run_case(const Case& c) {
  const int B = c.B, M = c.out, N = c.in;
  const int64_t step = 3;
  INFO("B=" << B << " out=" << M << " in=" << N << " adam=" << c.adam << " first=" << c.first);
  const float scale = 1.25f, lr = c.adam ? 1e-3f : 0.003f;
  const auto dzv = uni(static_cast<size_t>(B) * M, -0.1f, 0.1f);
  std::vector<float> hv = uni(static_cast<size_t>(B) * N, -0.5f, 1.f);
  for (auto& x : hv) x = std::max(x, 0.f) * scale;  // after ReLU / dropout
  std::vector<uint8_t> px(static_cast<size_t>(3 * B) * N);
  for (auto& b : px) b = static_cast<uint8_t>(test_rng()() % 256);
  std::vector<int> perm(3 * B);
  for (int i = 0; i < 3 * B; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), test_rng());
  // Parameters about as large as a step, so that p' - p is not swamped by the rounding of p'.
  const auto w = uni(static_cast<size_t>(M) * N, -0.01f, 0.01f), b = uni(M, -0.01f, 0.01f);
  const auto m0 = uni(w.size() + M, -1e-3f, 1e-3f), v0 = uni(w.size() + M, 0.f, 1e-4f);

  Dev<__half> ddz(to_h(dzv)), dh(to_h(hv)), w16(w.size()), dzprev(static_cast<size_t>(B) * N);
  Dev<float> dW(w), dB(b), gout(w.size()), bgout(static_cast<size_t>(M));
  Dev<float> dmW(std::vector<float>(m0.begin(), m0.begin() + w.size())), dvW(std::vector<float>(v0.begin(), v0.begin() + w.size()));
  Dev<float> dmB(std::vector<float>(m0.begin() + w.size(), m0.end())), dvB(std::vector<float>(v0.begin() + w.size(), v0.end()));
  Dev<uint8_t> dpx(px);
  Dev<int> dperm(perm);
  Dev<int64_t> base(std::vector<int64_t>{step});
  w16.poison(), dzprev.poison(), gout.poison(), bgout.poison();

  FusedBwdParams p;
  p.M = M, p.N = N, p.B = B;
  p.W = dW.p, p.W16 = w16.p, p.b = dB.p, p.grad_out = gout.p, p.bgrad_out = bgout.p;
  if (c.adam) p.mW = dmW.p, p.vW = dvW.p, p.mb = dmB.p, p.vb = dvB.p;
  p.adam = c.adam, p.lr = lr, p.step = StepRef{base.p, 0};
  p.dz = ddz.p;
  const int batch_i = 2;  // rows of the 3rd batch of the permutation (first layer)
  if (c.first) {
    p.xdata = dpx.p, p.rows.perm = dperm.p, p.rows.i = batch_i, p.rows.batch = B;
  } else {
    p.h = dh.p, p.dz_prev = dzprev.p, p.scale = scale;
  }
  plan_fused_bwd(p, c.sms);
  Dev<float> ws(std::max<size_t>(fused_bwd_ws_floats(p), 1));
  Dev<unsigned> ctr(static_cast<size_t>(p.tiles_n()));
  ctr.zero();
  p.ws = ws.p, p.counters = ctr.p;
  if (M == 1000) CHECK(p.splits > 1);  // the fix-up is exercised
  fused_bwd_setup<p5_fused_update_bwd>();
  launch_fused_bwd<p5_fused_update_bwd>(p, nullptr);

  // Reference (operands rounded to fp16 as the kernel reads them).
  auto dzd = [&](int k, int o) { return hd(dzv[static_cast<size_t>(k) * M + o]); };
  auto hin = [&](int k, int i) {
    if (c.first) return hd(static_cast<float>(px[static_cast<size_t>(perm[batch_i * B + k]) * N + i]) / 255.0f);
    return hd(hv[static_cast<size_t>(k) * N + i]);
  };
  std::vector<double> gW(w.size(), 0.0), gb(M, 0.0);
  for (int o = 0; o < M; ++o)
    for (int i = 0; i < N; ++i) {
      double s = 0;
      for (int k = 0; k < B; ++k) s += dzd(k, o) * hin(k, i);
      gW[static_cast<size_t>(o) * N + i] = s;
    }
  for (int k = 0; k < B; ++k)
    for (int o = 0; o < M; ++o) gb[o] += dzd(k, o);
  CHECK(rel(gout.get(), gW) <= 1e-2);
  CHECK(rel(bgout.get(), gb) <= 1e-5);  // fp16 dz summed in fp32
  {  // ... in batch order: the same fp32 sums bit for bit
    const auto bg = bgout.get();
    bool same = true;
    for (int o = 0; o < M; ++o) {
      float s = 0.f;
      for (int k = 0; k < B; ++k) s += static_cast<float>(dzd(k, o));
      same &= bg[o] == s;
    }
    CHECK(same);
  }
  if (!c.first) {
    std::vector<double> dref(static_cast<size_t>(B) * N, 0.0);
    for (int k = 0; k < B; ++k)
      for (int i = 0; i < N; ++i) {
        double s = 0;
        for (int o = 0; o < M; ++o) s += dzd(k, o) * hd(w[static_cast<size_t>(o) * N + i]);
        dref[static_cast<size_t>(k) * N + i] = hv[static_cast<size_t>(k) * N + i] > 0.f ? s * scale : 0.0;
      }
    const auto got = dzprev.get();
    std::vector<float> gf(got.size());
    for (size_t i = 0; i < got.size(); ++i) gf[i] = __half2float(got[i]);
    CHECK(rel(gf, dref) <= 1e-2);
    CHECK(ctr.get()[0] == 0u);  // reset for the next launch
  }
  const double t = static_cast<double>(step + 1);
  auto upd = [&](double pv, double g, double m, double v) {
    if (!c.adam) return pv - static_cast<double>(lr) * g;
    m = 0.9 * m + 0.1 * g;
    v = 0.999 * v + 0.001 * g * g;
    return pv - 1e-3 / (1 - std::pow(0.9, t)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8);
  };
  const auto nw = dW.get(), nb = dB.get();
  std::vector<double> dwr(w.size()), dbr(M);
  std::vector<float> dwg(w.size()), dbg(M);
  for (size_t i = 0; i < w.size(); ++i) dwr[i] = upd(w[i], gW[i], m0[i], v0[i]) - w[i], dwg[i] = nw[i] - w[i];
  for (int o = 0; o < M; ++o) dbr[o] = upd(b[o], gb[o], m0[w.size() + o], v0[w.size() + o]) - b[o], dbg[o] = nb[o] - b[o];
  CHECK(rel(dwg, dwr) <= 5e-2);
  CHECK(rel(dbg, dbr) <= 1e-3);
  // The fp16 copy is the new master rounded.
  const auto h16 = w16.get();
  bool copy_ok = true;
  for (size_t i = 0; i < w.size(); ++i) copy_ok &= __half2float(h16[i]) == __half2float(__float2half_rn(nw[i]));
  CHECK(copy_ok);
  if (c.first) check_next_forward(c, p, w, b, m0, v0, px, perm, dW, dB, w16, gout, bgout, dmW, dvW, dmB, dvB);
  // Variants with the same arithmetic, every output with the plain pass's bits: 8-warp blocks (phase 5's
  // --fused-warps 8) for a pass with a backward-data product (each element's sums in the same order,
  // split over more warps), and the masters' copies and stores with an L2 evict-first hint (--l2-evict
  // on, any pass).
  const auto w4 = dW.get(), b4 = dB.get(), g4 = gout.get(), bg4 = bgout.get();
  const auto h4 = w16.get(), z4 = dzprev.get();
  const auto mw4 = dmW.get(), vw4 = dvW.get();
  for (int variant = 0; variant < 2; ++variant) {
    if (variant == 0 && c.first) continue;
    INFO((variant == 0 ? "8-warp blocks" : "masters evict-first in L2"));
    dW.set(w), dB.set(b);
    dmW.set(std::vector<float>(m0.begin(), m0.begin() + w.size())), dvW.set(std::vector<float>(v0.begin(), v0.begin() + w.size()));
    dmB.set(std::vector<float>(m0.begin() + w.size(), m0.end())), dvB.set(std::vector<float>(v0.begin() + w.size(), v0.end()));
    w16.poison(), dzprev.poison(), gout.poison(), bgout.poison();
    FusedBwdParams e = p;
    if (variant == 0) e.warps = 8;
    else e.evict_masters = true;
    launch_fused_bwd<p5_fused_update_bwd>(e, nullptr);
    CHECK_LAUNCH();
    auto same = [](const auto& x, const auto& y) { return std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0; };
    CHECK(same(dW.get(), w4));
    CHECK(same(dB.get(), b4));
    CHECK(same(gout.get(), g4));
    CHECK(same(bgout.get(), bg4));
    CHECK(same(w16.get(), h4));
    CHECK(same(dzprev.get(), z4));
    if (c.adam) {
      CHECK(same(dmW.get(), mw4));
      CHECK(same(dvW.get(), vw4));
    }
    if (p.splits > 1) CHECK(ctr.get()[0] == 0u);
    dmW.set(std::vector<float>(m0.begin(), m0.begin() + w.size())), dvW.set(std::vector<float>(v0.begin(), v0.begin() + w.size()));
  }
  // The slices as one cluster (phase 5's --handover cluster) add their dA partials in the global
  // hand-over's order: dZ_prev has the same bits as the global hand-over of the slices the cluster
  // launch runs (fewer than planned where the GPU cannot hold every cluster at once), both from the
  // starting weights (dZ_prev reads the old ones).
  for (int warps : {4, 8}) {  // (both block sizes: 8 rows a rank of the hand-over, or 16)
    if (c.first || p.splits < 2 || p.splits > kFbMaxCluster) break;
    INFO("cluster hand-over, " << warps << " warps");
    FusedBwdParams q = p;
    q.cluster = true, q.warps = warps;
    q = fused_bwd_launched<p5_fused_update_bwd>(q);
    auto again = [&](const FusedBwdParams& r) {
      CUDA_CHECK(cudaMemcpy(dW.p, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice));
      dzprev.poison();
      launch_fused_bwd<p5_fused_update_bwd>(r, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      return dzprev.get();
    };
    const auto in_cluster = again(q);
    FusedBwdParams g = q;
    g.cluster = false;
    const auto global = again(g);
    CHECK(std::memcmp(in_cluster.data(), global.data(), global.size() * sizeof(__half)) == 0);
    CHECK(ctr.get()[0] == 0u);
    ++*cluster_cases();
  }
}

// The last layer's pass as softmax-CE's cluster tail (SoftmaxCELastBwdEpi on GEMM step 8's narrow
// kernel) against what it replaces: softmax-CE with its slices' global hand-over, then the fused
// pass of its own over the same layer. Every output, bit for bit: the weights, their fp16 copy, the
// bias, Adam's moments, the gradients applied, dZ_last, dZ_prev and the loss. Returns the slices
// the tail's launch ran.
int tail_case(int B, int C, int K, bool adam) {
  INFO("tail: B=" << B << " C=" << C << " K=" << K << " adam=" << adam);
  const int64_t step = 4;
  const float scale = 1.25f, lr = adam ? 1e-3f : 0.003f;
  std::vector<float> hv = uni(static_cast<size_t>(B) * K, -0.5f, 1.f);
  for (auto& x : hv) x = std::max(x, 0.f) * scale;
  const auto w = uni(static_cast<size_t>(C) * K, -0.05f, 0.05f), b = uni(C, -0.1f, 0.1f);
  const auto m0 = uni(w.size() + C, -1e-3f, 1e-3f), v0 = uni(w.size() + C, 0.f, 1e-4f);
  std::vector<uint8_t> labels(static_cast<size_t>(2 * B));
  for (auto& y : labels) y = static_cast<uint8_t>(test_rng()() % C);
  std::vector<int> perm(2 * B);
  for (int i = 0; i < 2 * B; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), test_rng());
  Dev<__half> dh(to_h(hv));
  Dev<uint8_t> dlab(labels);
  Dev<int> dperm(perm);
  Dev<int64_t> base(std::vector<int64_t>{step});
  struct Out {  // one path's buffers, from the same starting values
    Dev<float> W, b, mW, vW, mb, vb, gout, bgout, tile_loss;
    Dev<__half> W16, dz, dzprev;
    Out(const std::vector<float>& w, const std::vector<float>& b, const std::vector<float>& m0, const std::vector<float>& v0,
        int B, int K, int64_t step)
        : W(w), b(b), mW(std::vector<float>(m0.begin(), m0.begin() + w.size())),
          vW(std::vector<float>(v0.begin(), v0.begin() + w.size())), mb(std::vector<float>(m0.begin() + w.size(), m0.end())),
          vb(std::vector<float>(v0.begin() + w.size(), v0.end())), gout(w.size()), bgout(b.size()),
          tile_loss(static_cast<size_t>(step + 1)), W16(to_h(w)), dz(static_cast<size_t>(B) * b.size()),
          dzprev(static_cast<size_t>(B) * K) {
      gout.poison(), bgout.poison(), tile_loss.poison(), dz.poison(), dzprev.poison();
    }
  };
  Out k(w, b, m0, v0, B, K, step), t(w, b, m0, v0, B, K, step);
  auto softmax_epi = [&](Out& o) {
    SoftmaxCEEpi<__half> e;
    e.bias = o.b.p, e.labels = dlab.p, e.rows.perm = dperm.p, e.rows.i = 1, e.rows.batch = B, e.dz = o.dz.p;
    e.tile_loss = o.tile_loss.p, e.step = StepRef{base.p, 0};
    return e;
  };
  Dev<float> ws(static_cast<size_t>(kFixupGroup) * kBM * kBN);
  Dev<unsigned> ctr(1);
  ctr.zero();
  // What the tail replaces: softmax-CE (its slices through global memory), then the layer's pass.
  GemmProblem<MatView<__half, true>, MatView<__half, false>, SoftmaxCEEpi<__half>> f;
  f.M = B, f.N = C, f.K = K, f.a = make_view<__half, true>(dh.p, K), f.b = make_view<__half, false>(k.W16.p, K);
  f.epi = softmax_epi(k), f.ws = ws.p, f.counters = ctr.p;
  plan_stream_rows(f, 132, false, false);
  REQUIRE(sr_narrow(f));
  launch_gemm<p5_fwd_softmax_ce, __half>(f, nullptr);
  CHECK_LAUNCH();
  FusedBwdParams p;
  p.M = C, p.N = K, p.B = B, p.W = k.W.p, p.W16 = k.W16.p, p.b = k.b.p, p.grad_out = k.gout.p, p.bgrad_out = k.bgout.p;
  if (adam) p.mW = k.mW.p, p.vW = k.vW.p, p.mb = k.mb.p, p.vb = k.vb.p;
  p.adam = adam, p.lr = lr, p.step = StepRef{base.p, 0}, p.dz = k.dz.p, p.h = dh.p, p.dz_prev = k.dzprev.p, p.scale = scale;
  plan_fused_bwd(p, 132);
  Dev<float> fws(std::max<size_t>(fused_bwd_ws_floats(p), 1));
  p.ws = fws.p, p.counters = ctr.p;
  fused_bwd_setup<p5_fused_update_bwd>();
  launch_fused_bwd<p5_fused_update_bwd>(p, nullptr);
  CHECK_LAUNCH();
  // The tail: one launch.
  GemmProblem<MatView<__half, true>, MatView<__half, false>, SoftmaxCELastBwdEpi> q;
  q.M = B, q.N = C, q.K = K, q.a = make_view<__half, true>(dh.p, K), q.b = make_view<__half, false>(t.W16.p, K);
  static_cast<SoftmaxCEEpi<__half>&>(q.epi) = softmax_epi(t);
  SoftmaxCELastBwdEpi& e = q.epi;
  e.K = K, e.W = t.W.p, e.W16 = t.W16.p, e.b = t.b.p, e.grad_out = t.gout.p, e.bgrad_out = t.bgout.p;
  if (adam) e.mW = t.mW.p, e.vW = t.vW.p, e.mb = t.mb.p, e.vb = t.vb.p;
  e.h = dh.p, e.dz_prev = t.dzprev.p, e.scale = scale, e.adam = adam, e.lr = lr;
  q.ws = ws.p, q.counters = ctr.p;
  plan_stream_rows(q, 132, false, false);  // (a cluster tail runs as one cluster, asked for or not)
  CHECK(q.cluster);
  REQUIRE(last_bwd_tail_aligned(e));
  const auto launched = stream_rows_launched<p5_fwd_softmax_ce_bwd>(q);
  CHECK(launched.splits == f.splits);  // (a cluster of up to 16 narrow slices fits an H100 or H200)
  launch_gemm<p5_fwd_softmax_ce_bwd, __half>(q, nullptr);
  CHECK_LAUNCH();
  auto same = [](const auto& x, const auto& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
  };
  CHECK(same(k.dz.get(), t.dz.get()));
  CHECK(k.tile_loss.get()[step] == t.tile_loss.get()[step]);
  CHECK(same(k.W.get(), t.W.get()));
  CHECK(same(k.W16.get(), t.W16.get()));
  // The bias bit for bit too, under Adam as under SGD: adam_moments spells out the roundings of Adam's
  // second moment, which the compiler would otherwise contract one way in the pass and the other in the
  // tail (an ulp of v, and more than an ulp of a bias near 0).
  CHECK(same(k.b.get(), t.b.get()));
  CHECK(same(k.gout.get(), t.gout.get()));
  CHECK(same(k.bgout.get(), t.bgout.get()));
  CHECK(same(k.dzprev.get(), t.dzprev.get()));
  if (adam) {
    CHECK(same(k.mW.get(), t.mW.get()));
    CHECK(same(k.vW.get(), t.vW.get()));
    CHECK(same(k.mb.get(), t.mb.get()));
    CHECK(same(k.vb.get(), t.vb.get()));
  }
  // Not a comparison of two copies of one mistake: dZ_prev against float64 on the operands as stored
  // (dZ_last from the kernel, H and the old weights in fp16).
  const auto dzl = t.dz.get();
  std::vector<double> dref(static_cast<size_t>(B) * K, 0.0);
  for (int r = 0; r < B; ++r)
    for (int i = 0; i < K; ++i) {
      double sum = 0;
      for (int c = 0; c < C; ++c) sum += static_cast<double>(__half2float(dzl[static_cast<size_t>(r) * C + c])) * hd(w[static_cast<size_t>(c) * K + i]);
      dref[static_cast<size_t>(r) * K + i] = hv[static_cast<size_t>(r) * K + i] > 0.f ? sum * scale : 0.0;
    }
  const auto got = t.dzprev.get();
  std::vector<float> gf(got.size());
  for (size_t i = 0; i < got.size(); ++i) gf[i] = __half2float(got[i]);
  CHECK(rel(gf, dref) <= 1e-2);
  return launched.splits;
}

}  // namespace

TEST_CASE("mlp fused backward: the last layer's pass as softmax-CE's cluster tail, bit for bit the pass of its own") {
  NB_SKIP_WITHOUT_DEVICE();
  int most = 0;
  for (bool adam : {false, true})
    for (int B : {1, 7, 32})
      for (int C : {10, 3})
        for (int K : {8, 136, 1000, 2056}) most = std::max(most, tail_case(B, C, K, adam));
  CHECK(most > kSrMaxCluster);  // a non-portable cluster (K = 2,056: 9 slices) was run
}

TEST_CASE("mlp fused backward: one pass over the weights updates them and gives dZ_prev (fp16)") {
  NB_SKIP_WITHOUT_DEVICE();
  for (bool adam : {false, true})
    for (int B : {1, 20, 32})
      for (int out : {10, 100, 1000})
        for (int in : {8, 104, 296}) run_case({B, out, in, adam, false});
  CHECK(*cluster_cases() > 0);
}

TEST_CASE("mlp fused backward: the first layer's update gathers its input from the byte images") {
  NB_SKIP_WITHOUT_DEVICE();
  for (bool adam : {false, true})
    for (int B : {1, 32})
      for (int out : {10, 1000}) run_case({B, out, 784, adam, true});
  CHECK(*next_cluster_cases() > 0);
}

TEST_CASE("mlp fused backward: long row slices reuse every stage (planned for one SM)") {
  NB_SKIP_WITHOUT_DEVICE();
  for (bool adam : {false, true}) {
    run_case({7, 1000, 104, adam, false, 1});
    run_case({32, 333, 784, adam, true, 1});
  }
}

TEST_CASE("mlp fused backward: supported shapes and the row split") {
  CHECK(fused_bwd_supported(784, 32));
  CHECK_FALSE(fused_bwd_supported(784, 33));  // batch over one tile: the paired kernels
  CHECK_FALSE(fused_bwd_supported(100, 32));  // width not a multiple of 8
  std::vector<__half> dummy(1);  // dz_prev is only tested for null by the planner
  const int sms = 132, slots = kFbBlocksPerSm * sms;
  // With a backward-data product: whole waves, as many of them (3, 2 or 1) as keep 16 slices or
  // fewer; every split a whole number of sub-tiles, none empty.
  struct Want {
    int n, splits, waves;
  };
  for (const Want w : {Want{8192, 9, 3}, Want{4096, 12, 2}, Want{2048, 11, 1}}) {
    FusedBwdParams p;
    p.M = w.n, p.N = w.n, p.B = 32, p.dz_prev = dummy.data();
    plan_fused_bwd(p, sms);
    CAPTURE(w.n);
    CHECK(p.tiles_n() == w.n / kBN);
    CHECK(p.splits == w.splits);
    CHECK(p.rows_per_split % kFbRows == 0);
    CHECK(p.splits * p.rows_per_split >= p.M);
    CHECK((p.splits - 1) * p.rows_per_split < p.M);  // no empty split
    CHECK(p.blocks() <= w.waves * slots);
    CHECK(p.blocks() > (w.waves - 1) * slots);
  }
  // Below: 16 slices (h = 1,024: 16 tiles, one wave would take 24).
  FusedBwdParams s;
  s.M = 1024, s.N = 1024, s.B = 32, s.dz_prev = dummy.data();
  plan_fused_bwd(s, sms);
  CHECK(s.splits == 16);
  // The first layer (784 columns: 13 tiles, no backward-data product, no fix-up): one wave, which
  // may split its rows more than 16 ways; with a backward-data product the partials cap it at 16.
  FusedBwdParams f;
  f.M = 8192, f.N = 784, f.B = 32;
  plan_fused_bwd(f, sms);
  CHECK(f.splits > 16);
  CHECK(f.blocks() <= slots);
  CHECK(fused_bwd_ws_floats(f) == 0);
  f.dz_prev = dummy.data();
  plan_fused_bwd(f, sms);
  CHECK(f.splits == 16);
  CHECK(fused_bwd_ws_floats(f) == static_cast<size_t>(13) * 16 * kBM * kBN);
  // The cluster hand-over where it is asked for: one-wave plans with a backward-data product only
  // (h = 1,024 and 2,048: one wave; 4,096 and 8,192: two and three; the first layer: no product).
  for (const Want w : {Want{8192, 9, 3}, Want{4096, 12, 2}, Want{2048, 11, 1}, Want{1024, 16, 1}}) {
    FusedBwdParams p;
    p.M = w.n, p.N = w.n, p.B = 32, p.dz_prev = dummy.data();
    plan_fused_bwd(p, sms, true);
    CAPTURE(w.n);
    CHECK(p.splits == w.splits);
    CHECK(p.cluster == (w.waves == 1));
    plan_fused_bwd(p, sms, false);
    CHECK_FALSE(p.cluster);
  }
  FusedBwdParams u;
  u.M = 1024, u.N = 784, u.B = 32;
  plan_fused_bwd(u, sms, true);
  CHECK_FALSE(u.cluster);
}
}  // namespace nbtest
