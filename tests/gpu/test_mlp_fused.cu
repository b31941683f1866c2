// tests/gpu/test_mlp_fused.cu — phase 5's fused kernels (phase5_batched/5a_graph_step.cuh; the row
// chain, 5a_row_chain.cuh) and its cuBLASLt products (phase5_batched/lt.h) against float64 CPU
// references: fresh random inputs, awkward shapes (batch 1, 33 and 70; widths 10, 100, 300), outputs
// poisoned with NaN before each run. fp32 <= 1e-5 relative (norm-wise; the evaluation loss within its
// fp32 rounding bound); fp16 <= 1e-2 (operands rounded to fp16 included).
#define NB_WANT_CUBLAS 1
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "../../phase5_batched/5a_graph_step.cuh"
#include "../../phase5_batched/5a_row_chain.cuh"
#include "../../phase5_batched/lt.h"
#include "../../common/mlp/step_bound.h"
#include "check.cuh"
#include "gpu_test.cuh"
#include "reference.h"

namespace nbtest {
namespace {

using namespace nb::mlp;

std::vector<float> rvec(size_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(test_rng());
  return v;
}
template <class T>
T cvt(float x) {
  if constexpr (std::is_same<T, __half>::value) return __float2half_rn(x);
  else return x;
}
template <class T>
float back(T x) {
  if constexpr (std::is_same<T, __half>::value) return __half2float(x);
  else return x;
}
template <class T>
std::vector<T> cvtv(const std::vector<float>& v) {
  std::vector<T> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = cvt<T>(v[i]);
  return o;
}

// A device buffer's contents as floats (half converted).
template <class T>
std::vector<float> getf(const Dev<T>& d) {
  const auto h = d.get();
  std::vector<float> o(h.size());
  for (size_t i = 0; i < h.size(); ++i) o[i] = back(h[i]);
  return o;
}

double rel(const std::vector<float>& a, const std::vector<double>& b) { return nb::rel_error(a.data(), b.data(), b.size()); }

// Column sums of dz ([B, N], as stored) per 32-row tile, in the producing epilogue's order
// (store_tile_colsums: rows r, r + 8, ... of a tile in 8 slices, added slice by slice).
std::vector<float> tile_colsums(const std::vector<float>& dz, int B, int N) {
  const int tiles = (B + 31) / 32;
  std::vector<float> out(static_cast<size_t>(tiles) * N);
  for (int t = 0; t < tiles; ++t)
    for (int n = 0; n < N; ++n) {
      float g = 0.f;
      for (int q = 0; q < 8; ++q) {
        float part = 0.f;
        for (int m = 32 * t + q; m < std::min(B, 32 * t + 32); m += 8) part += dz[static_cast<size_t>(m) * N + n];
        g += part;
      }
      out[static_cast<size_t>(t) * N + n] = g;
    }
  return out;
}
// A producer's stored tile column sums against float64 sums of the dz it stored, within the bound
// of a 32-term fp32 sum (unwritten, poisoned entries fail).
void check_tile_colsums(const std::vector<float>& dz, const std::vector<float>& got, int B, int N) {
  const int tiles = (B + 31) / 32;
  REQUIRE(got.size() >= static_cast<size_t>(tiles) * N);
  int bad = 0;
  for (int t = 0; t < tiles; ++t)
    for (int n = 0; n < N; ++n) {
      double s = 0, a = 0;
      for (int m = 32 * t; m < std::min(B, 32 * t + 32); ++m) s += dz[static_cast<size_t>(m) * N + n], a += std::fabs(dz[static_cast<size_t>(m) * N + n]);
      const double c = got[static_cast<size_t>(t) * N + n];
      if (!(std::fabs(c - s) <= nbtest::fp32_sum_gamma(32) * a)) ++bad;
    }
  CHECK(bad == 0);
}

// A small byte data set (images of 784 bytes), a permutation and a step base on the device.
struct Data {
  int images, dim = 784;
  std::vector<uint8_t> px, labels;
  std::vector<int> perm;
  Dev<uint8_t> dpx, dlab;
  Dev<int> dperm;
  Dev<int64_t> base;
  Data(int n, int64_t step)
      : images(n), px(static_cast<size_t>(n) * 784), labels(n), perm(n), dpx(static_cast<size_t>(n) * 784), dlab(n),
        dperm(n), base(1) {
    for (auto& b : px) b = static_cast<uint8_t>(test_rng()() % 256);
    for (auto& l : labels) l = static_cast<uint8_t>(test_rng()() % 10);
    for (int i = 0; i < n; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), test_rng());
    CUDA_CHECK(cudaMemcpy(dpx.p, px.data(), px.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dlab.p, labels.data(), labels.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dperm.p, perm.data(), perm.size() * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(base.p, &step, sizeof step, cudaMemcpyHostToDevice));
  }
  // RowMap for the i-th batch of B rows of this epoch's permutation.
  RowMap rows(int B, int i) const {
    RowMap r;
    r.perm = dperm.p, r.i = i, r.batch = B;
    return r;
  }
  int image(int B, int i, int r) const { return perm[static_cast<size_t>(i) * B + r]; }
  // Host copy of the batch as the device converts it.
  template <class T>
  std::vector<double> batch(int B, int i) const {
    std::vector<double> x(static_cast<size_t>(B) * dim);
    for (int r = 0; r < B; ++r)
      for (int j = 0; j < dim; ++j)
        x[static_cast<size_t>(r) * dim + j] =
            back(cvt<T>(static_cast<float>(px[static_cast<size_t>(image(B, i, r)) * dim + j]) / 255.0f));
    return x;
  }
};

template <class P>
struct Ws {
  Dev<float> ws;
  Dev<unsigned> ctr;
  // Phase 5's plan (down to one k-tile per split: K = 784 gives 13 slices, the fix-up's rounds).
  explicit Ws(P& p, int sm = 132) : ws((plan_splits_p5(p, sm), std::max<size_t>(ws_floats(p), 1))), ctr(std::max<size_t>(counter_slots(p), 1)) {
    ctr.zero();
    p.ws = ws.p, p.counters = ctr.p;
  }
};

// Reference C[M,N] = sum_k A(m,k) B(k,n).
template <class FA, class FB>
std::vector<double> matmul(int M, int N, int K, FA a, FB b) {
  std::vector<double> c(static_cast<size_t>(M) * N, 0.0);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += a(m, k) * b(k, n);
      c[static_cast<size_t>(m) * N + n] = s;
    }
  return c;
}

template <class T>
double tol() {
  return std::is_same<T, __half>::value ? 1e-2 : 1e-5;
}

// fp16, a batch of at most 32 rows: the same product again on GEMM step 8, its W streamed through
// registers and staged in shared memory (plans for 132 SMs: split), the slices handing over through
// global memory and as one cluster through its shared memory, the epilogue's bias loaded
// under the first stages (FwdHiddenEpi's kBiasFrom), the output poisoned first; `check` judges it.
template <class P, class T, class Check, class Tag>
void step8_again(const P& p, Dev<T>& out, Check check, Tag) {
  (void)p, (void)out, (void)check;  // (fp32 and other views: nothing to run)
  if constexpr (std::is_same<T, __half>::value && StreamRowsViews<P>::value) {
    if (p.M > kSrBM || !stream_rows_ok(p)) return;
    for (int v = 0; v < 4; ++v) {
      const bool staged = v % 2 == 1, cluster = v / 2 == 1;
      INFO("step 8, staged=" << staged << " cluster=" << cluster);
      P q = p;
      plan_stream_rows(q, 132, staged, cluster);
      Dev<float> ws(std::max<size_t>(ws_floats(q), 1));
      Dev<unsigned> ctr(std::max<size_t>(counter_slots(q), 1));
      ctr.zero();
      q.ws = ws.p, q.counters = ctr.p;
      out.poison();
      launch_gemm<Tag, T>(q, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      check();
    }
  }
}

template <class T>
void forward_first_and_hidden() {
  const int64_t step = 5;  // global step 5 (dropout counter); rows: the 2nd batch (i = 1) of the epoch
  for (int B : {1, 33})
    for (int N : {10, 100, 300})
      for (bool drop : {false, true}) {
        INFO("B=" << B << " N=" << N << " dropout=" << drop);
        Data d(2 * B + 3, step - 1);
        const auto w = rvec(static_cast<size_t>(N) * 784, -0.05f, 0.05f), b = rvec(N);
        Dev<T> dw(cvtv<T>(w));
        Dev<float> db(b);
        Dev<T> out(static_cast<size_t>(B) * N);
        out.poison();
        GemmProblem<GatherView<T>, MatView<T, false>, FwdHiddenEpi<T>> p;
        p.M = B, p.N = N, p.K = 784;
        p.a.data = d.dpx.p, p.a.ld = 784, p.a.rows = d.rows(B, 1);
        p.b = make_view<T, false>(dw.p, 784);
        const uint64_t key = dropout_key(test_rng()());
        const double rate = 0.3;
        p.epi.bias = db.p, p.epi.out = out.p, p.epi.dropout = drop, p.epi.key = key, p.epi.layer = 1;
        p.epi.threshold = dropout_threshold(rate), p.epi.scale = static_cast<float>(1 / (1 - rate));
        p.epi.step = StepRef{d.base.p, 1};
        Ws<decltype(p)> ws(p);
        launch_gemm<p5_fwd_gather, T>(p, nullptr);
        const auto x = d.batch<T>(B, 1);
        auto ref = matmul(B, N, 784, [&](int m, int k) { return x[static_cast<size_t>(m) * 784 + k]; },
                          [&](int k, int n) { return static_cast<double>(back(cvt<T>(w[static_cast<size_t>(n) * 784 + k]))); });
        for (int m = 0; m < B; ++m)
          for (int n = 0; n < N; ++n) {
            double& v = ref[static_cast<size_t>(m) * N + n];
            v = std::max(v + b[n], 0.0);
            if (drop)
              v = dropout_bits_host(key, 1, step, static_cast<uint32_t>(m * N + n)) >= dropout_threshold(rate) ? v / (1 - rate) : 0;
          }
        CHECK(rel(getf(out), ref) <= tol<T>());
        step8_again(p, out, [&] { CHECK(rel(getf(out), ref) <= tol<T>()); }, p5_fwd_gather{});

        // A hidden layer reading that output (K = N), no dropout.
        const int N2 = 100;
        const auto w2 = rvec(static_cast<size_t>(N2) * N, -0.1f, 0.1f), b2 = rvec(N2);
        Dev<T> dw2(cvtv<T>(w2));
        Dev<float> db2(b2);
        Dev<T> out2(static_cast<size_t>(B) * N2);
        out2.poison();
        GemmProblem<MatView<T, true>, MatView<T, false>, FwdHiddenEpi<T>> q;
        q.M = B, q.N = N2, q.K = N;
        q.a = make_view<T, true>(out.p, N), q.b = make_view<T, false>(dw2.p, N);
        q.epi.bias = db2.p, q.epi.out = out2.p;
        Ws<decltype(q)> ws2(q);
        launch_gemm<p5_fwd_hidden, T>(q, nullptr);
        const auto h1 = getf(out);
        auto ref2 = matmul(B, N2, N, [&](int m, int k) { return static_cast<double>(h1[static_cast<size_t>(m) * N + k]); },
                           [&](int k, int n) { return static_cast<double>(back(cvt<T>(w2[static_cast<size_t>(n) * N + k]))); });
        for (int m = 0; m < B; ++m)
          for (int n = 0; n < N2; ++n) ref2[static_cast<size_t>(m) * N2 + n] = std::max(ref2[static_cast<size_t>(m) * N2 + n] + b2[n], 0.0);
        CHECK(rel(getf(out2), ref2) <= tol<T>());
        step8_again(q, out2, [&] { CHECK(rel(getf(out2), ref2) <= tol<T>()); }, p5_fwd_hidden{});
      }
}

// fp32's rounding bound (step_bound.h's gamma) on a softmax cross-entropy loss summed over rows,
// each row's term times `scale`: each logit z_j + b_j is off by at most gamma(K + 1) (|b_j| +
// sum_k |h_k w_jk|), so a row's loss lse - z_y by twice the largest of those, plus the rounding of
// lse's own sum, exp and log (gamma(N) of |max| + log(se)), of the subtraction and of the per-tile
// sums (gamma(32) of the loss). A row whose label wins by a wide margin has a loss near zero computed
// from logits of size ~1: its error is absolute, so a tolerance relative to the loss alone fails
// correct code there.
double ce_loss_bound(const std::vector<float>& h, const std::vector<float>& w, const std::vector<float>& b,
                     const std::vector<double>& z, const std::vector<int>& y, int rows, int N, int K, double scale) {
  double tol = 0, loss = 0;
  for (int m = 0; m < rows; ++m) {
    double mx = -1e300, se = 0, mag = 0;
    for (int j = 0; j < N; ++j) {
      mx = std::max(mx, z[m * N + j] + b[j]);
      double s = std::fabs(b[j]);
      for (int k = 0; k < K; ++k) s += std::fabs(static_cast<double>(h[static_cast<size_t>(m) * K + k]) * w[static_cast<size_t>(j) * K + k]);
      mag = std::max(mag, s);
    }
    for (int j = 0; j < N; ++j) se += std::exp(z[m * N + j] + b[j] - mx);
    const double row = mx + std::log(se) - (z[m * N + y[m]] + b[y[m]]);
    loss += scale * row;
    tol += scale * (2 * nbtest::fp32_sum_gamma(static_cast<size_t>(K) + 1) * mag +
                    nbtest::fp32_sum_gamma(static_cast<size_t>(N)) * (std::fabs(mx) + std::log(se)) + nbtest::kFp32U * row);
  }
  return tol + nbtest::fp32_sum_gamma(32) * loss;
}

template <class T>
void softmax_ce_last() {
  const int64_t step = 3;  // base 3, i = 0; rows: batch 0 of the permutation
  for (int B : {1, 33, 70})
    for (int K : {10, 100, 300}) {
      INFO("B=" << B << " K=" << K);
      Data d(4 * B, step);
      const int N = 10;
      const auto h = rvec(static_cast<size_t>(B) * K, 0.f, 1.f), w = rvec(static_cast<size_t>(N) * K, -0.3f, 0.3f), b = rvec(N);
      Dev<T> dh(cvtv<T>(h)), dw(cvtv<T>(w)), dz(static_cast<size_t>(B) * N);
      const int tiles = (B + 31) / 32;
      Dev<float> db(b), tile_loss(static_cast<size_t>(step + 1) * tiles), step_loss(8), colsum(static_cast<size_t>(tiles) * N);
      Dev<unsigned long long> bad(1);
      dz.poison(), step_loss.poison(), colsum.poison(), tile_loss.poison();
      CUDA_CHECK(cudaMemset(bad.p, 0xFF, sizeof(unsigned long long)));
      GemmProblem<MatView<T, true>, MatView<T, false>, SoftmaxCEEpi<T>> p;
      p.M = B, p.N = N, p.K = K;
      p.a = make_view<T, true>(dh.p, K), p.b = make_view<T, false>(dw.p, K);
      p.epi.bias = db.p, p.epi.labels = d.dlab.p, p.epi.rows = d.rows(B, 0), p.epi.dz = dz.p;
      p.epi.tile_loss = tile_loss.p, p.epi.dz_colsum = colsum.p;
      p.epi.step = StepRef{d.base.p, 0};
      Ws<decltype(p)> ws(p);
      // The step: its tiles' losses, then their mean (as the trainer's graph runs them).
      auto run_step = [&] {
        launch_gemm<p5_fwd_softmax_ce, T>(p, nullptr);
        step_loss_kernel<<<1, 32>>>(tile_loss.p, tiles, B, StepRef{d.base.p, 0}, 1, step_loss.p, bad.p);
        CHECK_LAUNCH();
      };
      run_step();
      auto z = matmul(B, N, K, [&](int m, int k) { return static_cast<double>(back(cvt<T>(h[static_cast<size_t>(m) * K + k]))); },
                      [&](int k, int n) { return static_cast<double>(back(cvt<T>(w[static_cast<size_t>(n) * K + k]))); });
      std::vector<double> g(static_cast<size_t>(B) * N);
      double loss = 0;
      std::vector<int> ys(B);
      for (int m = 0; m < B; ++m) {
        const int y = ys[m] = d.labels[d.image(B, 0, m)];
        double mx = -1e300, se = 0;
        for (int j = 0; j < N; ++j) mx = std::max(mx, z[m * N + j] + b[j]);
        for (int j = 0; j < N; ++j) se += std::exp(z[m * N + j] + b[j] - mx);
        const double lse = mx + std::log(se);
        loss += (lse - (z[m * N + y] + b[y])) / B;
        for (int j = 0; j < N; ++j) g[m * N + j] = (std::exp(z[m * N + j] + b[j] - lse) - (j == y)) / B;
      }
      CHECK(rel(getf(dz), g) <= tol<T>());
      check_tile_colsums(getf(dz), colsum.get(), B, N);
      const auto sl = step_loss.get();
      CHECK(std::fabs(sl[step] - loss) <= tol<T>() * loss + ce_loss_bound(h, w, b, z, ys, B, N, K, 1.0 / B));
      CHECK(bad.get()[0] == ~0ull);      // finite
      // A non-finite weight: the step is recorded as the first bad one.
      std::vector<T> wn = cvtv<T>(w);
      wn[0] = cvt<T>(NAN);
      CUDA_CHECK(cudaMemcpy(dw.p, wn.data(), wn.size() * sizeof(T), cudaMemcpyHostToDevice));
      run_step();
      CHECK(bad.get()[0] == static_cast<unsigned long long>(step));
    }
}

// Backward data (+ ReLU/dropout backward) and the fused update, also paired in one launch.
template <class T>
void backward_and_update(bool adam) {
  const int64_t step = 2;
  for (int B : {1, 33})
    for (int out : {10, 100, 300})
      for (int in : {10, 100, 300}) {
        INFO("B=" << B << " out=" << out << " in=" << in << " adam=" << adam);
        const auto dzv = rvec(static_cast<size_t>(B) * out, -0.1f, 0.1f), hin = rvec(static_cast<size_t>(B) * in, -0.5f, 1.f);
        std::vector<float> hv(hin.size());
        for (size_t i = 0; i < hv.size(); ++i) hv[i] = std::max(hin[i], 0.f) * 1.25f;  // post ReLU/dropout
        // Parameters about as large as a step: p' - p is then not swamped by the rounding of p'.
        const auto w = rvec(static_cast<size_t>(out) * in, -0.01f, 0.01f), b = rvec(out, -0.01f, 0.01f);
        const auto m0 = rvec(w.size() + out, -1e-3f, 1e-3f), v0 = rvec(w.size() + out, 0.f, 1e-4f);
        Dev<T> ddz(cvtv<T>(dzv)), dh(cvtv<T>(hv)), dW16(cvtv<T>(w)), dzprev(static_cast<size_t>(B) * in);
        Dev<float> dW(w), dB(b), dmW(std::vector<float>(m0.begin(), m0.begin() + w.size())),
            dvW(std::vector<float>(v0.begin(), v0.begin() + w.size())), dmB(std::vector<float>(m0.begin() + w.size(), m0.end())),
            dvB(std::vector<float>(v0.begin() + w.size(), v0.end()));
        Dev<__half> w16copy(w.size());
        Dev<int64_t> base(1);
        CUDA_CHECK(cudaMemcpy(base.p, &step, sizeof step, cudaMemcpyHostToDevice));
        dzprev.poison(), w16copy.poison();
        // Backward data: dZprev = relu'(dZ · W) * 1.25 (W read before the update: same launch, other blocks
        // update it -> this test gives the backward-data problem its own copy of W in T, as the trainer does
        // with the fp16 copy; in fp32 the trainer never pairs a layer's update with its own backward data).
        GemmProblem<MatView<T, true>, MatView<T, true>, BwdReluEpi<T>> bd;
        bd.M = B, bd.N = in, bd.K = out;
        bd.a = make_view<T, true>(ddz.p, out), bd.b = make_view<T, true>(dW16.p, in);
        Dev<float> prev_colsum(static_cast<size_t>((B + 31) / 32) * in);
        prev_colsum.poison();
        bd.epi.h = dh.p, bd.epi.dz = dzprev.p, bd.epi.scale = 1.25f, bd.epi.dz_colsum = prev_colsum.p;
        GemmProblem<MatView<T, false>, MatView<T, true>, UpdateEpi<T>> up;
        up.M = out, up.N = in, up.K = B;
        up.a = make_view<T, false>(ddz.p, out), up.b = make_view<T, true>(dh.p, in);
        up.epi.W = dW.p, up.epi.b = dB.p, up.epi.dz = ddz.p, up.epi.batch = B, up.epi.adam = adam;
        up.epi.lr = adam ? 1e-3f : 0.003f, up.epi.step = StepRef{base.p, 1};
        up.epi.W16 = w16copy.p;
        // The bias gradient from dz's tile column sums (as the step passes them), or, for in = 100,
        // from dz's rows (no sums given).
        std::vector<float> dz_stored(dzv.size());
        for (size_t i = 0; i < dzv.size(); ++i) dz_stored[i] = back(cvt<T>(dzv[i]));
        Dev<float> dz_sums(tile_colsums(dz_stored, B, out));
        if (in != 100) up.epi.dz_colsum = dz_sums.p;
        Dev<float> gout(w.size()), bgout(static_cast<size_t>(out));
        gout.poison(), bgout.poison();
        up.epi.grad_out = gout.p, up.epi.bgrad_out = bgout.p;
        if (adam) up.epi.mW = dmW.p, up.epi.vW = dvW.p, up.epi.mb = dmB.p, up.epi.vb = dvB.p;
        // Adam's constants from a host table (as the trainer passes them) for out != 100; computed on
        // the device for out = 100 (no table) — both must give the reference update.
        std::vector<AdamHyper> hy(static_cast<size_t>(step) + 3);
        for (size_t t = 1; t < hy.size(); ++t) hy[t] = adam_hyper(1e-3, static_cast<int64_t>(t));
        Dev<AdamHyper> dhy(hy);
        if (adam && out != 100) up.epi.hyper = dhy.p, up.epi.hyper_n = static_cast<int64_t>(hy.size());
        Ws<decltype(up)> ws1(up);
        Ws<decltype(bd)> ws2(bd);
        launch_gemm_pair<p5_update_and_bwd_data, T>(up, bd, nullptr);
        // Reference.
        auto dzd = [&](int k, int o) { return static_cast<double>(back(cvt<T>(dzv[static_cast<size_t>(k) * out + o]))); };
        auto hd = [&](int k, int i) { return static_cast<double>(back(cvt<T>(hv[static_cast<size_t>(k) * in + i]))); };
        auto dh_ref = matmul(B, in, out, dzd, [&](int k, int n) { return static_cast<double>(back(cvt<T>(w[static_cast<size_t>(k) * in + n]))); });
        for (size_t i = 0; i < dh_ref.size(); ++i) dh_ref[i] = hd(static_cast<int>(i / in), static_cast<int>(i % in)) > 0 ? dh_ref[i] * 1.25 : 0;
        CHECK(rel(getf(dzprev), dh_ref) <= tol<T>());
        check_tile_colsums(getf(dzprev), prev_colsum.get(), B, in);
        auto gW = matmul(out, in, B, [&](int m, int k) { return dzd(k, m); }, hd);
        std::vector<double> gb(out, 0.0);
        for (int k = 0; k < B; ++k)
          for (int o = 0; o < out; ++o) gb[o] += dzd(k, o);
        CHECK(rel(gout.get(), gW) <= tol<T>());  // the gradients the update applied
        CHECK(rel(bgout.get(), gb) <= tol<T>());
        const double t = static_cast<double>(step + 1 + 1);
        auto upd = [&](double p, double g, double m, double v) {
          if (!adam) return p - 0.003 * g;
          m = 0.9 * m + 0.1 * g;
          v = 0.999 * v + 0.001 * g * g;
          return p - 1e-3 / (1 - std::pow(0.9, t)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8);
        };
        std::vector<double> dwr(w.size()), dbr(out);  // parameter change
        for (size_t i = 0; i < w.size(); ++i) dwr[i] = upd(w[i], gW[i], m0[i], v0[i]) - w[i];
        for (int o = 0; o < out; ++o) dbr[o] = upd(b[o], gb[o], m0[w.size() + o], v0[w.size() + o]) - b[o];
        const auto nw = dW.get(), nb = dB.get();
        std::vector<float> dwg(w.size()), dbg(out);
        for (size_t i = 0; i < w.size(); ++i) dwg[i] = nw[i] - w[i];
        for (int o = 0; o < out; ++o) dbg[o] = nb[o] - b[o];
        const double tu = std::is_same<T, __half>::value ? 5e-2 : 1e-4;
        CHECK(rel(dwg, dwr) <= tu);
        CHECK(rel(dbg, dbr) <= tu);
        std::vector<float> w16f(w.size());
        const auto w16 = w16copy.get();
        for (size_t i = 0; i < w.size(); ++i) w16f[i] = __half2float(w16[i]);
        CHECK(rel(w16f, std::vector<double>(nw.begin(), nw.end())) <= 1e-3);
      }
}

// The row chain (5a_row_chain.cuh): one kernel from the first hidden layer's output H0 to dZ of every
// layer, each output against float64 of the inputs the kernel held (the weights and H0 as T; each
// later product from the kernel's own stored H1, dZ2, dZ1, as the kernels it replaces pass them on):
// H1 with layer 1's dropout bits, dZ2 and the tile losses of the softmax cross-entropy, dZ1 and dZ0
// through the ReLU/dropout masks, every dZ's 32-row column sums; a second launch bit for bit.
// Shapes off every tile and stride: batch 1 / 33 / 70 / 129 / 4,097, widths 13 ... 300, a hidden
// layer wider than one 64-column pass (201) and two 128-column passes of dZ0 (130), 3 / 7 / 10 classes.
size_t smem_optin() {
  int dev = 0, v = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return static_cast<size_t>(v);
}
template <class T>
void row_chain_case(int B, int n0, int n1, int n2, double rate) {
  INFO("row chain B=" << B << " n0=" << n0 << " n1=" << n1 << " n2=" << n2 << " dropout=" << rate);
  const int64_t step = 7;
  const int tiles = (B + 31) / 32;
  Data d(B + 5, step);
  for (auto& l : d.labels) l = static_cast<uint8_t>(l % n2);  // labels of n2 classes
  CUDA_CHECK(cudaMemcpy(d.dlab.p, d.labels.data(), d.labels.size(), cudaMemcpyHostToDevice));
  auto h0 = rvec(static_cast<size_t>(B) * n0, -0.5f, 1.f);
  for (auto& x : h0) x = std::max(x, 0.f) * 1.25f;  // as the first layer stores it: ReLU, dropout's scale
  const auto w1 = rvec(static_cast<size_t>(n1) * n0, -0.2f, 0.2f), b1 = rvec(n1, -0.1f, 0.1f);
  const auto w2 = rvec(static_cast<size_t>(n2) * n1, -0.3f, 0.3f), b2 = rvec(n2);
  Dev<T> dh0(cvtv<T>(h0)), dw1(cvtv<T>(w1)), dw2(cvtv<T>(w2));
  Dev<float> db1(b1), db2(b2);
  Dev<T> h1(static_cast<size_t>(B) * n1), dz2(static_cast<size_t>(B) * n2), dz1(static_cast<size_t>(B) * n1),
      dz0(static_cast<size_t>(B) * n0);
  Dev<float> cs2(static_cast<size_t>(tiles) * n2), cs1(static_cast<size_t>(tiles) * n1), cs0(static_cast<size_t>(tiles) * n0),
      tl(static_cast<size_t>(step + 1) * tiles);
  auto poison = [&] { h1.poison(), dz2.poison(), dz1.poison(), dz0.poison(), cs2.poison(), cs1.poison(), cs0.poison(), tl.poison(); };
  poison();
  const uint64_t key = dropout_key(test_rng()());
  RowChainParams<T> p;
  p.M = B, p.n0 = n0, p.n1 = n1, p.n2 = n2;
  p.h0 = dh0.p, p.w1 = dw1.p, p.b1 = db1.p, p.w2 = dw2.p, p.b2 = db2.p, p.h1 = h1.p;
  p.dropout = rate > 0, p.key = key, p.threshold = dropout_threshold(rate), p.scale = static_cast<float>(1 / (1 - rate));
  p.labels = d.dlab.p, p.rows = d.rows(B, 0), p.step = StepRef{d.base.p, 0};
  p.dz2 = dz2.p, p.dz2_colsum = cs2.p, p.tile_loss = tl.p, p.dz1 = dz1.p, p.dz1_colsum = cs1.p, p.dz0 = dz0.p, p.dz0_colsum = cs0.p;
  const size_t smem = RowChainLayout(n0, n1, n2).bytes();
  REQUIRE(row_chain_fits(n0, n1, n2, smem_optin()));
  row_chain_setup<T>(smem);
  launch_row_chain(p, nullptr, false);
  CUDA_CHECK(cudaDeviceSynchronize());

  auto held = [](const std::vector<float>& v, size_t i) { return static_cast<double>(back(cvt<T>(v[i]))); };
  const double scale = 1 / (1 - rate);
  // H1 = dropout(ReLU(H0 W1^T + b1)).
  auto rh1 = matmul(B, n1, n0, [&](int m, int k) { return held(h0, static_cast<size_t>(m) * n0 + k); },
                    [&](int k, int j) { return held(w1, static_cast<size_t>(j) * n0 + k); });
  for (int m = 0; m < B; ++m)
    for (int j = 0; j < n1; ++j) {
      double& v = rh1[static_cast<size_t>(m) * n1 + j];
      v = std::max(v + b1[j], 0.0);
      if (rate > 0) v = dropout_bits_host(key, 1, step, static_cast<uint32_t>(m * n1 + j)) >= dropout_threshold(rate) ? v * scale : 0;
    }
  const auto gh1 = getf(h1);
  CHECK(rel(gh1, rh1) <= tol<T>());
  // The logits from the stored H1, softmax cross-entropy: dZ2, the tiles' losses.
  auto z = matmul(B, n2, n1, [&](int m, int k) { return static_cast<double>(gh1[static_cast<size_t>(m) * n1 + k]); },
                  [&](int k, int j) { return held(w2, static_cast<size_t>(j) * n1 + k); });
  std::vector<double> rdz2(static_cast<size_t>(B) * n2);
  std::vector<int> ys(B);
  double loss = 0;
  for (int m = 0; m < B; ++m) {
    const int y = ys[m] = d.labels[d.image(B, 0, m)];
    double mx = -1e300, se = 0;
    for (int j = 0; j < n2; ++j) mx = std::max(mx, z[m * n2 + j] + b2[j]);
    for (int j = 0; j < n2; ++j) se += std::exp(z[m * n2 + j] + b2[j] - mx);
    const double lse = mx + std::log(se);
    loss += (lse - (z[m * n2 + y] + b2[y])) / B;
    for (int j = 0; j < n2; ++j) rdz2[m * n2 + j] = (std::exp(z[m * n2 + j] + b2[j] - lse) - (j == y)) / B;
  }
  const auto gdz2 = getf(dz2);
  CHECK(rel(gdz2, rdz2) <= tol<T>());
  check_tile_colsums(gdz2, cs2.get(), B, n2);
  CHECK(cs2.get() == tile_colsums(gdz2, B, n2));  // sum_tile_columns' order, bit for bit
  // Each tile's summed loss at its own index, against float64 of its rows within fp32's bound.
  const auto gtl = tl.get();
  std::vector<float> w2held(w2.size());
  for (size_t i = 0; i < w2.size(); ++i) w2held[i] = static_cast<float>(held(w2, i));
  double tile_sum = 0;
  for (int i = 0; i < tiles; ++i) {
    const int r0 = 32 * i, nr = std::min(32, B - r0);
    const std::vector<float> th(gh1.begin() + static_cast<size_t>(r0) * n1, gh1.begin() + static_cast<size_t>(r0 + nr) * n1);
    const std::vector<double> tz(z.begin() + static_cast<size_t>(r0) * n2, z.begin() + static_cast<size_t>(r0 + nr) * n2);
    const std::vector<int> ty(ys.begin() + r0, ys.begin() + r0 + nr);
    double ref = 0;
    for (int m = 0; m < nr; ++m) {
      double mx = -1e300, se = 0;
      for (int j = 0; j < n2; ++j) mx = std::max(mx, tz[m * n2 + j] + b2[j]);
      for (int j = 0; j < n2; ++j) se += std::exp(tz[m * n2 + j] + b2[j] - mx);
      ref += mx + std::log(se) - (tz[m * n2 + ty[m]] + b2[ty[m]]);
    }
    const double got = gtl[static_cast<size_t>(step) * tiles + i];
    INFO("tile " << i << " loss " << got << " reference " << ref);
    CHECK(std::fabs(got - ref) <= tol<T>() * ref + ce_loss_bound(th, w2held, b2, tz, ty, nr, n2, n1, 1.0));
    tile_sum += got;
  }
  CHECK(std::fabs(tile_sum / B - loss) <= tol<T>() * loss + ce_loss_bound(gh1, w2held, b2, z, ys, B, n2, n1, 1.0 / B));
  // dZ1 = (dZ2 W2) * (H1 > 0) * scale, from the stored dZ2 and H1.
  auto rdz1 = matmul(B, n1, n2, [&](int m, int k) { return static_cast<double>(gdz2[static_cast<size_t>(m) * n2 + k]); },
                     [&](int k, int j) { return held(w2, static_cast<size_t>(k) * n1 + j); });
  for (size_t i = 0; i < rdz1.size(); ++i) rdz1[i] = gh1[i] > 0 ? rdz1[i] * scale : 0;
  const auto gdz1 = getf(dz1);
  CHECK(rel(gdz1, rdz1) <= tol<T>());
  check_tile_colsums(gdz1, cs1.get(), B, n1);
  CHECK(cs1.get() == tile_colsums(gdz1, B, n1));
  // dZ0 = (dZ1 W1) * (H0 > 0) * scale, from the stored dZ1.
  auto rdz0 = matmul(B, n0, n1, [&](int m, int k) { return static_cast<double>(gdz1[static_cast<size_t>(m) * n1 + k]); },
                     [&](int k, int c) { return held(w1, static_cast<size_t>(k) * n0 + c); });
  for (size_t i = 0; i < rdz0.size(); ++i) rdz0[i] = held(h0, i) > 0 ? rdz0[i] * scale : 0;
  const auto gdz0 = getf(dz0);
  CHECK(rel(gdz0, rdz0) <= tol<T>());
  check_tile_colsums(gdz0, cs0.get(), B, n0);
  CHECK(cs0.get() == tile_colsums(gdz0, B, n0));
  // A second launch: the same bits everywhere.
  const auto first = std::make_tuple(h1.get(), dz2.get(), dz1.get(), dz0.get(), cs2.get(), cs1.get(), cs0.get(), tl.get());
  poison();
  launch_row_chain(p, nullptr, false);
  CUDA_CHECK(cudaDeviceSynchronize());
  auto same = [](const auto& a, const auto& b) { return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0; };
  CHECK(same(std::get<0>(first), h1.get()));
  CHECK(same(std::get<1>(first), dz2.get()));
  CHECK(same(std::get<2>(first), dz1.get()));
  CHECK(same(std::get<3>(first), dz0.get()));
  CHECK(same(std::get<4>(first), cs2.get()));
  CHECK(same(std::get<5>(first), cs1.get()));
  CHECK(same(std::get<6>(first), cs0.get()));
  CHECK(same(std::get<7>(first), tl.get()));
}

// The row chain against the four kernels it replaces (the hidden forward, softmax-CE and the two
// backward-data products, each a GEMM with its epilogue, planned as phase 5 plans them), on the same
// inputs: every output within twice the float64 tolerance of the other, the same dropout mask (an
// element zero in one and not the other only where the ReLU input is within rounding of zero) and the
// same tile losses within their rounding. What the trainer swaps must be a drop-in.
template <class T>
void row_chain_matches_kernels(int B, int n0, int n1, int n2, double rate) {
  INFO("row chain vs kernels B=" << B << " n0=" << n0 << " n1=" << n1 << " n2=" << n2 << " dropout=" << rate);
  const int64_t step = 3;
  const int tiles = (B + 31) / 32;
  Data d(B + 3, step);
  for (auto& l : d.labels) l = static_cast<uint8_t>(l % n2);
  CUDA_CHECK(cudaMemcpy(d.dlab.p, d.labels.data(), d.labels.size(), cudaMemcpyHostToDevice));
  auto h0 = rvec(static_cast<size_t>(B) * n0, -0.5f, 1.f);
  for (auto& x : h0) x = std::max(x, 0.f) * 1.25f;
  const auto w1 = rvec(static_cast<size_t>(n1) * n0, -0.2f, 0.2f), b1 = rvec(n1, -0.1f, 0.1f);
  const auto w2 = rvec(static_cast<size_t>(n2) * n1, -0.3f, 0.3f), b2 = rvec(n2);
  Dev<T> dh0(cvtv<T>(h0)), dw1(cvtv<T>(w1)), dw2(cvtv<T>(w2));
  Dev<float> db1(b1), db2(b2);
  const uint64_t key = dropout_key(test_rng()());
  const float scale = static_cast<float>(1 / (1 - rate));
  struct Out {
    Dev<T> h1, dz2, dz1, dz0;
    Dev<float> cs2, cs1, cs0, tl;
    Out(int B, int n0, int n1, int n2, int tiles, int64_t step)
        : h1(static_cast<size_t>(B) * n1), dz2(static_cast<size_t>(B) * n2), dz1(static_cast<size_t>(B) * n1),
          dz0(static_cast<size_t>(B) * n0), cs2(static_cast<size_t>(tiles) * n2), cs1(static_cast<size_t>(tiles) * n1),
          cs0(static_cast<size_t>(tiles) * n0), tl(static_cast<size_t>(step + 1) * tiles) {
      h1.poison(), dz2.poison(), dz1.poison(), dz0.poison(), cs2.poison(), cs1.poison(), cs0.poison(), tl.poison();
    }
  } rc(B, n0, n1, n2, tiles, step), k(B, n0, n1, n2, tiles, step);
  // The row chain.
  RowChainParams<T> p;
  p.M = B, p.n0 = n0, p.n1 = n1, p.n2 = n2;
  p.h0 = dh0.p, p.w1 = dw1.p, p.b1 = db1.p, p.w2 = dw2.p, p.b2 = db2.p, p.h1 = rc.h1.p;
  p.dropout = rate > 0, p.key = key, p.threshold = dropout_threshold(rate), p.scale = scale;
  p.labels = d.dlab.p, p.rows = d.rows(B, 0), p.step = StepRef{d.base.p, 0};
  p.dz2 = rc.dz2.p, p.dz2_colsum = rc.cs2.p, p.tile_loss = rc.tl.p;
  p.dz1 = rc.dz1.p, p.dz1_colsum = rc.cs1.p, p.dz0 = rc.dz0.p, p.dz0_colsum = rc.cs0.p;
  row_chain_setup<T>(RowChainLayout(n0, n1, n2).bytes());
  launch_row_chain(p, nullptr, false);
  // The four kernels, as Trainer::fwd_hidden, fwd_last and bwd_data set them up.
  GemmProblem<MatView<T, true>, MatView<T, false>, FwdHiddenEpi<T>> f;
  f.M = B, f.N = n1, f.K = n0;
  f.a = make_view<T, true>(dh0.p, n0), f.b = make_view<T, false>(dw1.p, n0);
  f.epi.bias = db1.p, f.epi.out = k.h1.p, f.epi.dropout = rate > 0, f.epi.key = key, f.epi.layer = 1;
  f.epi.threshold = dropout_threshold(rate), f.epi.scale = scale, f.epi.step = StepRef{d.base.p, 0};
  Ws<decltype(f)> wf(f);
  launch_gemm<p5_fwd_hidden, T>(f, nullptr);
  GemmProblem<MatView<T, true>, MatView<T, false>, SoftmaxCEEpi<T>> s;
  s.M = B, s.N = n2, s.K = n1;
  s.a = make_view<T, true>(k.h1.p, n1), s.b = make_view<T, false>(dw2.p, n1);
  s.epi.bias = db2.p, s.epi.labels = d.dlab.p, s.epi.rows = d.rows(B, 0), s.epi.dz = k.dz2.p, s.epi.dz_colsum = k.cs2.p;
  s.epi.tile_loss = k.tl.p, s.epi.step = StepRef{d.base.p, 0};
  Ws<decltype(s)> wsx(s);
  launch_gemm<p5_fwd_softmax_ce, T>(s, nullptr);
  GemmProblem<MatView<T, true>, MatView<T, true>, BwdReluEpi<T>> b2p;
  b2p.M = B, b2p.N = n1, b2p.K = n2;
  b2p.a = make_view<T, true>(k.dz2.p, n2), b2p.b = make_view<T, true>(dw2.p, n1);
  b2p.epi.h = k.h1.p, b2p.epi.dz = k.dz1.p, b2p.epi.dz_colsum = k.cs1.p, b2p.epi.scale = scale;
  Ws<decltype(b2p)> wb2(b2p);
  launch_gemm<p5_bwd_data, T>(b2p, nullptr);
  GemmProblem<MatView<T, true>, MatView<T, true>, BwdReluEpi<T>> b1p;
  b1p.M = B, b1p.N = n0, b1p.K = n1;
  b1p.a = make_view<T, true>(k.dz1.p, n1), b1p.b = make_view<T, true>(dw1.p, n0);
  b1p.epi.h = dh0.p, b1p.epi.dz = k.dz0.p, b1p.epi.dz_colsum = k.cs0.p, b1p.epi.scale = scale;
  Ws<decltype(b1p)> wb1(b1p);
  launch_gemm<p5_bwd_data, T>(b1p, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  auto as_double = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  // H1: the same dropout mask; zero in one and not the other only where the value is within rounding of 0.
  const auto a1 = getf(rc.h1), k1 = getf(k.h1);
  int mask_mismatch = 0;
  for (size_t i = 0; i < a1.size(); ++i)
    if ((a1[i] == 0.f) != (k1[i] == 0.f) && std::max(std::fabs(a1[i]), std::fabs(k1[i])) > 1e-4f) ++mask_mismatch;
  CHECK(mask_mismatch == 0);
  CHECK(rel(a1, as_double(k1)) <= 2 * tol<T>());
  CHECK(rel(getf(rc.dz2), as_double(getf(k.dz2))) <= 2 * tol<T>());
  CHECK(rel(getf(rc.dz1), as_double(getf(k.dz1))) <= 2 * tol<T>());
  CHECK(rel(getf(rc.dz0), as_double(getf(k.dz0))) <= 2 * tol<T>());
  CHECK(rel(rc.cs0.get(), as_double(k.cs0.get())) <= 2 * tol<T>());
  const auto ta = rc.tl.get(), tk = k.tl.get();
  for (int i = 0; i < tiles; ++i) {
    const double a = ta[static_cast<size_t>(step) * tiles + i], b = tk[static_cast<size_t>(step) * tiles + i];
    INFO("tile " << i << " loss " << a << " against the kernels' " << b);
    CHECK(std::fabs(a - b) <= 2 * tol<T>() * std::fabs(b) + 1e-5 * 32);
  }
}

}  // namespace

TEST_CASE("mlp fused: gather + GEMM + bias + ReLU + dropout (fp32, fp16)") {
  NB_SKIP_WITHOUT_DEVICE();
  forward_first_and_hidden<float>();
  forward_first_and_hidden<__half>();
}

TEST_CASE("mlp fused: last layer softmax cross-entropy epilogue, loss per step, divergence flag") {
  NB_SKIP_WITHOUT_DEVICE();
  softmax_ce_last<float>();
  softmax_ce_last<__half>();
}

TEST_CASE("mlp fused: backward data + ReLU/dropout, fused Adam/SGD update, paired in one launch") {
  NB_SKIP_WITHOUT_DEVICE();
  for (bool adam : {true, false}) {
    backward_and_update<float>(adam);
    backward_and_update<__half>(adam);
  }
}

TEST_CASE("mlp fused: first-layer update reads the batch through the gather view") {
  NB_SKIP_WITHOUT_DEVICE();
  const int64_t step = 1;
  for (int B : {1, 33})
    for (int out : {10, 100}) {
      INFO("B=" << B << " out=" << out);
      Data d(3 * B, step);
      const auto dzv = rvec(static_cast<size_t>(B) * out, -0.1f, 0.1f), w = rvec(static_cast<size_t>(out) * 784, -0.1f, 0.1f),
                 b = rvec(out);
      Dev<float> ddz(dzv), dW(w), dB(b);
      GemmProblem<MatView<float, false>, GatherView<float>, UpdateEpi<float>> up;
      up.M = out, up.N = 784, up.K = B;
      up.a = make_view<float, false>(ddz.p, out);
      up.b.data = d.dpx.p, up.b.ld = 784, up.b.rows = d.rows(B, 2);
      up.epi.W = dW.p, up.epi.b = dB.p, up.epi.dz = ddz.p, up.epi.batch = B, up.epi.adam = false, up.epi.lr = 0.5f;
      up.epi.step = StepRef{d.base.p, 0};
      Ws<decltype(up)> ws(up);
      launch_gemm<p5_update, float>(up, nullptr);
      const auto x = d.batch<float>(B, 2);
      auto g = matmul(out, 784, B, [&](int m, int k) { return static_cast<double>(dzv[static_cast<size_t>(k) * out + m]); },
                      [&](int k, int n) { return x[static_cast<size_t>(k) * 784 + n]; });
      std::vector<double> ref(w.size());
      for (size_t i = 0; i < w.size(); ++i) ref[i] = -0.5 * g[i];
      const auto nw = dW.get();
      std::vector<float> ch(w.size());
      for (size_t i = 0; i < w.size(); ++i) ch[i] = nw[i] - w[i];
      CHECK(rel(ch, ref) <= 1e-4);
    }
}

// Steps 5 (fp32, 3xTF32), 6 (fp16) and 7 (fp32 FMAs) with the gathered images' bytes as an operand: the forward
// (A's bytes and B's weights read along k in whole words, the k-tile's values dealt to the lanes in
// their own order) and the weight gradient (B's bytes staged [k][n]; step 6 reads them by
// ldmatrix.trans, its two MMAs of a warp holding interleaved columns), each multiplying the bytes
// as integers and dividing the sums by 255. Against float64 of byte / 255 times the operands as
// the GPU holds them (fp16 ones rounded) within the rung's fp32-accumulation tolerance, at batches
// and widths off the tiles, split and unsplit (one SM's plan and an H200's), the second launch bit
// for bit.
// fma: step 7 (FMA warp tiles, the bytes converted to floats once a k-tile) instead of step 5;
// wgmma: step 9 instead of step 6 (the forward's bytes made f16x2 in registers, W from shared memory;
// the weight gradient with its roles swapped: the bytes X^T in registers, dZ from shared memory,
// the tile stored transposed), also at batch 4,097 (a long K, split).
// A StoreEpi product as planned, launched twice with its split workspace and counters (allocated
// here) and its output poisoned before each launch: the first output, the second required to be
// the same bits.
template <class T, class P>
std::vector<float> store_twice(P& p) {
  Dev<float> ws(std::max<size_t>(ws_floats(p), 1));
  Dev<unsigned> ctr(std::max<size_t>(counter_slots(p), 1));
  ctr.zero();
  p.ws = ws.p, p.counters = ctr.p;
  Dev<float> c(static_cast<size_t>(p.M) * p.N);
  p.epi.c = c.p, p.epi.ldc = p.N;
  c.poison();
  launch_gemm<p5_fwd_gather, T>(p, nullptr);
  const auto first = c.get();
  c.poison();
  launch_gemm<p5_fwd_gather, T>(p, nullptr);
  const auto second = c.get();
  REQUIRE(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0);
  return first;
}

template <class T>
void gathered_bytes_on_tensor_cores(bool fma = false, bool wgmma = false) {
  constexpr bool kHalf = std::is_same<T, __half>::value;
  const int cc = device_cc();
  auto plan = [fma, wgmma, cc](auto& p, int sm) {
    if constexpr (kHalf) {
      if (wgmma) {
        REQUIRE(wgmma_ok(p, cc));
        plan_f16wgmma(p, sm);
      } else {
        plan_f16mma(p, sm);
      }
    } else if (fma) {
      plan_fma64(p, sm);
    } else {
      plan_tf32x3(p, sm);
    }
  };
  auto tol = [](int K) { return kHalf ? f16mma_tol(K) : tf32x3_tol(K); };
  auto held = [](const std::vector<float>& v, size_t i) { return static_cast<double>(back(cvt<T>(v[i]))); };
  int splits = 0;
  std::vector<int> batches = {1, 33, 1023};
  if (wgmma) batches.push_back(4097);
  for (int B : batches)
    for (int N : {10, 130})
      for (int sm : {1, 132}) {
        Data d(2 * B + 3, 0);
        auto x = [&](int r, int k) { return d.px[static_cast<size_t>(d.image(B, 1, r)) * 784 + k] / 255.0; };
        const auto w = rvec(static_cast<size_t>(N) * 784, -0.05f, 0.05f);
        Dev<T> dw(cvtv<T>(w));
        GemmProblem<GatherView<T>, MatView<T, false>, StoreEpi> f;  // X · W^T: B rows, N columns
        f.M = B, f.N = N, f.K = 784;
        f.a.data = d.dpx.p, f.a.ld = 784, f.a.rows = d.rows(B, 1);
        f.b = make_view<T, false>(dw.p, 784);
        plan(f, sm);
        splits += f.splits > 1;
        const auto zf = store_twice<T>(f);
        const auto rf = matmul(B, N, 784, x, [&](int k, int n) { return held(w, static_cast<size_t>(n) * 784 + k); });
        INFO("forward B=" << B << " N=" << N << " sm=" << sm << " splits=" << f.splits << " err " << rel(zf, rf));
        CHECK(rel(zf, rf) <= tol(784));

        // dZ [B][ldz]: step 9 copies its rows 16 bytes at a time, so there they are padded to a
        // multiple of 8 values (the padding NaN: read, it would fail the check).
        const int ldz = wgmma ? (N + 7) / 8 * 8 : N;
        auto dz = rvec(static_cast<size_t>(B) * ldz, -0.1f, 0.1f);
        for (size_t i = 0; i < dz.size(); ++i)
          if (static_cast<int>(i % ldz) >= N) dz[i] = std::nanf("");
        Dev<T> ddz(cvtv<T>(dz));
        GemmProblem<MatView<T, false>, GatherView<T>, StoreEpi> g;  // dZ^T · X: N rows, 784 columns
        g.M = N, g.N = 784, g.K = B;
        g.a = make_view<T, false>(ddz.p, ldz);
        g.b.data = d.dpx.p, g.b.ld = 784, g.b.rows = d.rows(B, 1);
        plan(g, sm);
        splits += g.splits > 1;
        const auto zg = store_twice<T>(g);
        const auto rg = matmul(N, 784, B, [&](int m, int k) { return held(dz, static_cast<size_t>(k) * ldz + m); }, x);
        INFO("weight gradient B=" << B << " N=" << N << " sm=" << sm << " splits=" << g.splits << " err " << rel(zg, rg));
        CHECK(rel(zg, rg) <= tol(B));
      }
  CHECK(splits > 0);
}

TEST_CASE("mlp fused: steps 5, 6 and 7 on the gathered bytes (forward, weight gradient) within their tolerance") {
  NB_SKIP_WITHOUT_DEVICE();
  gathered_bytes_on_tensor_cores<float>();
  gathered_bytes_on_tensor_cores<__half>();
  gathered_bytes_on_tensor_cores<float>(true);
}

TEST_CASE("mlp fused: step 9 (wgmma) on the gathered bytes (forward, weight gradient) within step 6's tolerance") {
  NB_SKIP_WITHOUT_DEVICE();
  if (!wgmma_built(device_cc())) {
    MESSAGE("skipped: GEMM step 9 needs compute capability 9.0 and sm_90a device code; this device has " << device_cc());
    return;
  }
  gathered_bytes_on_tensor_cores<__half>(false, true);
}

// Step 10: the gathered forward on the integer tensor cores (the bytes as they are, times W's three
// 8-bit digits cut by i8_split_digits). The digits first: each row's words rebuilt on the host give
// every weight within half a unit of 2^(E - 22), E the row's exponent (max |w| < 2^E), zero past K,
// the scale NaN for a row holding a NaN. Then the product against float64 of byte / 255 times the
// fp32 weights within step 5's tolerance (tf32x3_tol), at batches, widths and K off the tiles (K a
// multiple of 4, as the rung requires), split and unsplit, the second launch bit for bit; weights
// spread over five decades and a row of zeros; the NaN row's column NaN and the others unharmed.
TEST_CASE("mlp fused: step 10 (bytes times W's 8-bit digits, integer MMAs) within the fp32 tolerance") {
  NB_SKIP_WITHOUT_DEVICE();
  if (device_cc() < 80) {
    MESSAGE("skipped: GEMM step 10 needs compute capability 8.0; this device has " << device_cc());
    return;
  }
  struct Case { int B, N, K; };
  int splits = 0;
  for (const Case c : {Case{1, 10, 4}, Case{7, 130, 12}, Case{33, 130, 788}, Case{1023, 130, 784}, Case{4097, 10, 784},
                       Case{33, 10, 8188}})
    for (int sm : {1, 132}) {
      const int B = c.B, N = c.N, K = c.K, pool = 2 * B + 3;
      std::vector<uint8_t> px(static_cast<size_t>(pool) * K);
      for (auto& b : px) b = static_cast<uint8_t>(test_rng()() % 256);
      std::vector<int> perm(pool);
      for (int i = 0; i < pool; ++i) perm[i] = i;
      std::shuffle(perm.begin(), perm.end(), test_rng());
      Dev<uint8_t> dpx(px);
      Dev<int> dperm(perm);
      // W: magnitudes spread over five decades, row 1 all zeros, row 2 (when N > 2) one NaN.
      auto w = rvec(static_cast<size_t>(N) * K);
      std::uniform_real_distribution<float> dec(-4.f, 1.f);
      for (auto& v : w) v *= std::pow(10.f, dec(test_rng()));
      if (N > 1) std::fill(w.begin() + K, w.begin() + 2 * K, 0.f);
      const int nan_row = N > 2 ? 2 : -1;
      if (nan_row >= 0) w[static_cast<size_t>(nan_row) * K + K / 2] = std::nanf("");
      Dev<float> dw(w);
      const int ld = i8_digit_ld(K);
      Dev<uint32_t> digits(static_cast<size_t>(N) * ld);
      digits.poison();
      launch_i8_split_digits(dw.p, K, N, K, digits.p, nullptr, false);
      CHECK_LAUNCH();
      const auto dg = digits.get();
      int bad_digits = 0;
      for (int n = 0; n < N; ++n) {
        float mx = 0.f;
        for (int k = 0; k < K; ++k) mx = std::max(mx, std::fabs(w[static_cast<size_t>(n) * K + k]));
        int E = 0;
        if (mx > 0.f) std::frexp(mx, &E);
        for (int g = 0; g < ld / 4; ++g) {
          const uint32_t* q = &dg[static_cast<size_t>(n) * ld + 4 * g];
          float scale;
          std::memcpy(&scale, &q[3], 4);
          if (n == nan_row) {
            bad_digits += !std::isnan(scale);
            continue;
          }
          bad_digits += scale != std::ldexp(1.f, E - 22);
          for (int e = 0; e < 4; ++e) {
            const int k = 4 * g + e;
            const auto d = [&](int j) { return static_cast<int>(static_cast<int8_t>((q[j] >> (8 * e)) & 255u)); };
            const double s = 65536.0 * d(2) + 256.0 * d(1) + d(0);
            const double want = k < K ? w[static_cast<size_t>(n) * K + k] : 0.0;
            bad_digits += !(std::fabs(s * scale - want) <= std::ldexp(1.0, E - 23)) || (k >= K && s != 0);
          }
        }
      }
      CHECK(bad_digits == 0);

      GemmProblem<GatherView<float>, MatView<float, false>, StoreEpi> f;  // X · W^T: B rows, N columns
      f.M = B, f.N = N, f.K = K;
      f.a.data = dpx.p, f.a.ld = K, f.a.rows.perm = dperm.p, f.a.rows.batch = B;
      f.b = i8_digit_view(digits.p, K);
      REQUIRE(i8digits_ok(f, device_cc()));
      plan_i8digits(f, sm);
      splits += f.splits > 1;
      const auto first = store_twice<float>(f);
      // The reference without the NaN row's column (it must come out NaN in every row).
      std::vector<float> got;
      std::vector<double> ref;
      int nan_ok = 0;
      for (int m = 0; m < B; ++m)
        for (int n = 0; n < N; ++n) {
          const float v = first[static_cast<size_t>(m) * N + n];
          if (n == nan_row) {
            nan_ok += std::isnan(v);
            continue;
          }
          double r = 0;
          for (int k = 0; k < K; ++k)
            r += px[static_cast<size_t>(perm[m]) * K + k] / 255.0 * w[static_cast<size_t>(n) * K + k];
          got.push_back(v), ref.push_back(r);
        }
      INFO("B=" << B << " N=" << N << " K=" << K << " sm=" << sm << " splits=" << f.splits << " err " << rel(got, ref)
                << " tol " << tf32x3_tol(K));
      CHECK(rel(got, ref) <= tf32x3_tol(K));
      CHECK(nan_ok == (nan_row >= 0 ? B : 0));
    }
  CHECK(splits > 0);
  // What the rung refuses: K not a multiple of 4, K from 65,536, the weight gradient's operands.
  GemmProblem<GatherView<float>, MatView<float, false>, StoreEpi> f;
  f.M = 64, f.N = 64, f.K = 786;
  CHECK_FALSE(i8digits_ok(f, device_cc()));
  f.K = 65536;
  CHECK_FALSE(i8digits_ok(f, device_cc()));
  f.K = 784;
  CHECK_FALSE(i8digits_ok(f, 75));
  GemmProblem<MatView<float, false>, GatherView<float>, StoreEpi> g;
  g.M = 64, g.N = 784, g.K = 784;
  CHECK_FALSE(i8digits_ok(g, device_cc()));
}

// Step 8 (the weights streamed) on the gathered bytes: the first layer's forward of a batch of at
// most 32 (A's bytes staged and made f16x2 integers at the fragment read, the sums divided by 255
// once). Against float64 of byte / 255 times the fp16 weights within the fp32-accumulation
// tolerance, at batches 1 / 7 / 32 and widths off the 128-column tile, one SM's plan (one slice or
// two) and an H200's (split), the second launch bit for bit.
TEST_CASE("mlp fused: step 8 on the gathered bytes (the first layer's forward of a small batch)") {
  NB_SKIP_WITHOUT_DEVICE();
  int split_runs = 0;
  for (int B : {1, 7, 32})
    for (int N : {10, 130, 300, 2048})
      for (int sm : {1, 16, 132}) {
        Data d(2 * B + 3, 0);
        auto x = [&](int r, int k) { return d.px[static_cast<size_t>(d.image(B, 1, r)) * 784 + k] / 255.0; };
        const auto w = rvec(static_cast<size_t>(N) * 784, -0.05f, 0.05f);
        Dev<__half> dw(cvtv<__half>(w));
        GemmProblem<GatherView<__half>, MatView<__half, false>, StoreEpi> f;
        f.M = B, f.N = N, f.K = 784;
        f.a.data = d.dpx.p, f.a.ld = 784, f.a.rows = d.rows(B, 1);
        f.b = make_view<__half, false>(dw.p, 784);
        REQUIRE(stream_rows_ok(f));
        plan_stream_rows(f, sm);
        split_runs += f.splits > 1;
        Dev<float> ws(std::max<size_t>(ws_floats(f), 1));
        Dev<unsigned> ctr(std::max<size_t>(counter_slots(f), 1));
        ctr.zero();
        f.ws = ws.p, f.counters = ctr.p;
        Dev<float> c(static_cast<size_t>(B) * N);
        f.epi.c = c.p, f.epi.ldc = N;
        c.poison();
        launch_gemm<p5_fwd_gather, __half>(f, nullptr);
        const auto first = c.get();
        c.poison();
        launch_gemm<p5_fwd_gather, __half>(f, nullptr);
        REQUIRE(std::memcmp(first.data(), c.get().data(), first.size() * sizeof(float)) == 0);
        for (unsigned v : ctr.get()) REQUIRE(v == 0u);
        const auto rf = matmul(B, N, 784, x, [&](int k, int n) {
          return static_cast<double>(__half2float(__float2half_rn(w[static_cast<size_t>(n) * 784 + k])));
        });
        INFO("B=" << B << " N=" << N << " sm=" << sm << " splits=" << f.splits << " err " << rel(first, rf));
        CHECK(rel(first, rf) <= f16mma_tol(784));
      }
  CHECK(split_runs > 0);
}

TEST_CASE("mlp fused: the row chain (hidden forward to dZ0 in one kernel) against float64, bit-stable") {
  NB_SKIP_WITHOUT_DEVICE();
  struct Case { int B, n0, n1, n2; double rate; };
  const Case cases[] = {{1, 128, 64, 10, 0.2}, {33, 100, 30, 10, 0.2}, {70, 300, 100, 7, 0.0},
                        {129, 13, 70, 3, 0.5}, {4097, 128, 64, 10, 0.2}, {64, 130, 201, 10, 0.2},
                        {45, 100, 30, kBN, 0.2}};
  for (const Case& c : cases) {
    row_chain_case<float>(c.B, c.n0, c.n1, c.n2, c.rate);
    row_chain_case<__half>(c.B, c.n0, c.n1, c.n2, c.rate);
  }
  // What the trainer swaps: the four kernels' outputs on the same inputs, W1's shape and two off it.
  for (const Case& c : {Case{4097, 128, 64, 10, 0.2}, Case{70, 300, 100, 7, 0.0}, Case{33, 100, 30, 10, 0.5}}) {
    row_chain_matches_kernels<float>(c.B, c.n0, c.n1, c.n2, c.rate);
    row_chain_matches_kernels<__half>(c.B, c.n0, c.n1, c.n2, c.rate);
  }
  // The layout's limit: a model whose weights do not fit a block's shared memory is refused.
  CHECK(row_chain_fits(128, 64, 10, smem_optin()));
  CHECK_FALSE(row_chain_fits(1024, 1024, 10, smem_optin()));
  CHECK_FALSE(row_chain_fits(128, 64, kBN + 1, smem_optin()));
}

TEST_CASE("mlp fused: evaluation epilogue counts correct rows and sums the loss per tile") {
  NB_SKIP_WITHOUT_DEVICE();
  for (int rows : {1, 33, 70}) {
    const int K = 100, N = 10;
    const auto h = rvec(static_cast<size_t>(rows) * K), w = rvec(static_cast<size_t>(N) * K), b = rvec(N);
    std::vector<uint8_t> lab(rows + 40);
    for (auto& l : lab) l = static_cast<uint8_t>(test_rng()() % 10);
    Dev<float> dh(h), dw(w), db(b);
    Dev<uint8_t> dl(lab);
    const int offset = 32;  // a second chunk: tiles counted from row offset / 32
    const int tiles = (offset + rows + 31) / 32;
    Dev<int> ok(tiles);
    Dev<float> ls(tiles);
    ok.poison(), ls.poison();
    GemmProblem<MatView<float, true>, MatView<float, false>, EvalEpi> p;
    p.M = rows, p.N = N, p.K = K, p.a = make_view<float, true>(dh.p, K), p.b = make_view<float, false>(dw.p, K);
    p.epi.bias = db.p, p.epi.labels = dl.p, p.epi.row_offset = offset, p.epi.tile_correct = ok.p, p.epi.tile_loss = ls.p;
    Ws<decltype(p)> ws(p);
    launch_gemm<p5_eval, float>(p, nullptr);
    auto z = matmul(rows, N, K, [&](int m, int k) { return static_cast<double>(h[static_cast<size_t>(m) * K + k]); },
                    [&](int k, int n) { return static_cast<double>(w[static_cast<size_t>(n) * K + k]); });
    int correct = 0;
    double loss = 0;
    std::vector<int> ys(rows);
    for (int m = 0; m < rows; ++m) {
      int arg = 0;
      double mx = -1e300, se = 0;
      for (int j = 0; j < N; ++j)
        if (z[m * N + j] + b[j] > mx) mx = z[m * N + j] + b[j], arg = j;
      for (int j = 0; j < N; ++j) se += std::exp(z[m * N + j] + b[j] - mx);
      const int y = ys[m] = lab[offset + m];
      correct += arg == y;
      loss += mx + std::log(se) - (z[m * N + y] + b[y]);
    }
    const double tol = ce_loss_bound(h, w, b, z, ys, rows, N, K, 1.0);
    const auto okv = ok.get();
    const auto lsv = ls.get();
    int c = 0;
    double l = 0;
    for (int t = offset / 32; t < tiles; ++t) c += okv[t], l += lsv[t];
    CHECK(c == correct);
    INFO("rows=" << rows << " loss " << loss << " tolerance " << tol);
    CHECK(std::fabs(l - loss) <= tol);
  }
}

TEST_CASE("mlp fused: the device permutation equals the host's; the step base is written") {
  NB_SKIP_WITHOUT_DEVICE();
  for (int n : {1, 33, 60000}) {
    Dev<int> perm(n);
    Dev<int64_t> base(1);
    perm.poison();
    const Perm p = make_perm(test_rng()(), 3, static_cast<uint32_t>(n));
    epoch_begin_kernel<<<(n + 255) / 256, 256>>>(perm.p, n, p, base.p, int64_t{5625});
    CHECK_LAUNCH();
    const auto d = perm.get();
    for (int i = 0; i < n; ++i) REQUIRE(d[i] == static_cast<int>(perm_apply(p, static_cast<uint32_t>(i))));
    CHECK(base.get()[0] == 5625);
  }
}

template <class T>
void lt_products() {
  nb::mlp::LtHandle h(4u << 20);
  for (int B : {1, 33})
    for (int in : {10, 100, 300})
      for (int out : {10, 100, 300}) {
        INFO("B=" << B << " in=" << in << " out=" << out);
        LtLayer lay;
        lay.plan<T>(h, B, in, out, true);
        const auto x = rvec(static_cast<size_t>(B) * in), w = rvec(static_cast<size_t>(out) * in),
                   dz = rvec(static_cast<size_t>(B) * out);
        Dev<T> dx(cvtv<T>(x)), dw(cvtv<T>(w)), ddz(cvtv<T>(dz));
        Dev<float> z(static_cast<size_t>(B) * out), dh(static_cast<size_t>(B) * in), gw(static_cast<size_t>(out) * in);
        z.poison(), dh.poison(), gw.poison();
        lay.forward(dx.p, dw.p, z.p, nullptr);
        lay.backward_data(ddz.p, dw.p, dh.p, nullptr);
        lay.backward_weight(ddz.p, dx.p, gw.p, nullptr);
        auto X = [&](int m, int k) { return static_cast<double>(x[static_cast<size_t>(m) * in + k]); };
        auto Z = [&](int m, int k) { return static_cast<double>(dz[static_cast<size_t>(m) * out + k]); };
        CHECK(rel(z.get(), matmul(B, out, in, X, [&](int k, int n) { return static_cast<double>(w[static_cast<size_t>(n) * in + k]); })) <= tol<T>());
        CHECK(rel(dh.get(), matmul(B, in, out, Z, [&](int k, int n) { return static_cast<double>(w[static_cast<size_t>(k) * in + n]); })) <= tol<T>());
        CHECK(rel(gw.get(), matmul(out, in, B, [&](int m, int k) { return Z(k, m); }, X)) <= tol<T>());
      }
}

TEST_CASE("mlp cuBLASLt: row-major forward, backward-data and backward-weight products") {
  NB_SKIP_WITHOUT_DEVICE();
  lt_products<float>();
  lt_products<__half>();
}

TEST_CASE("mlp cuBLASLt path: epilogue kernel, gather kernel, whole-model optimizer kernel") {
  NB_SKIP_WITHOUT_DEVICE();
  const int64_t step = 4;
  for (int B : {1, 33})
    for (int N : {10, 100, 300}) {
      INFO("B=" << B << " N=" << N);
      const auto z = rvec(static_cast<size_t>(B) * N), b = rvec(N);
      Dev<float> dz(z), db(b), out(static_cast<size_t>(B) * N);
      out.poison();
      FwdHiddenEpi<float> e;
      e.bias = db.p, e.out = out.p;
      launch_epilogue<p5_epi_hidden>(dz.p, B, N, e, nullptr);
      std::vector<double> ref(z.size());
      for (size_t i = 0; i < z.size(); ++i) ref[i] = std::max(static_cast<double>(z[i]) + b[i % N], 0.0);
      CHECK(rel(out.get(), ref) <= 1e-5);
      // Gather.
      Data d(2 * B + 1, step);
      Dev<float> x(static_cast<size_t>(B) * 784);
      x.poison();
      gather_kernel<float><<<64, 256>>>(x.p, d.dpx.p, d.rows(B, 1), B, 784);
      CHECK_LAUNCH();
      CHECK(rel(x.get(), d.batch<float>(B, 1)) == 0.0);
    }
  // Whole-model Adam with the step number from device memory.
  const size_t n = 1234;
  const auto p = rvec(n), g = rvec(n, -1e-2f, 1e-2f);
  Dev<float> dp(p), dg(g), dm(n), dv(n);
  dm.zero(), dv.zero();
  Dev<__half> p16(n);
  p16.poison();
  Dev<int64_t> base(1);
  const int64_t s = 0;
  CUDA_CHECK(cudaMemcpy(base.p, &s, sizeof s, cudaMemcpyHostToDevice));
  flat_update_kernel<<<ew_blocks(n), 256>>>(dp.p, dg.p, dm.p, dv.p, p16.p, n, 1e-3f, StepRef{base.p, 0});
  CHECK_LAUNCH();
  // Step 1 of Adam from zero state: p - lr * g / (|g| + eps) (bias corrections cancel).
  std::vector<float> ch(n);
  std::vector<double> rc(n);
  const auto np = dp.get();
  for (size_t i = 0; i < n; ++i) ch[i] = np[i] - p[i], rc[i] = -1e-3 * g[i] / (std::fabs(static_cast<double>(g[i])) + 1e-8);
  CHECK(rel(ch, rc) <= 1e-4);
}

}  // namespace nbtest
