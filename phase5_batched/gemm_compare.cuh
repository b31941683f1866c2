// phase5_batched/gemm_compare.cuh — the cuBLASLt yardstick (--gemm-compare): not a rung of the
// ladder, a measurement of how far our GEMM is from the library's on this layer's products.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.h"
#include "device_info.h"
#include "errors.h"
#include "5a_graph_step.cuh"
#include "lt.h"
#include "mlp/mlp_common.h"
#include "mlp/mlp_record.h"
#include "record.h"
#include "stats.h"
#include "timing.cuh"

namespace nb {
namespace {

using namespace nb::mlp;

// --gemm-compare: our plain GEMM (fp32 tile stored, no fused epilogue; phase 5's split planning and
// fix-up) against cuBLASLt on the three products of the configured model's largest layer, fresh
// random operands, outputs poisoned, 5 warm-ups and 30 timed launches each (median).
template <class Dummy = void>
__global__ void fill_random_kernel(float* x, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = static_cast<float>(static_cast<double>(splitmix64(seed ^ splitmix64(i)) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

// The plain fp32 store, with phase 5's split-K fix-up (float4 partials; see 5a_graph_step.cuh), which is
// how the trainer's own GEMMs sum their slices.
struct CompareStoreEpi : StoreEpi {
  static constexpr bool kVecFixup = true;
};

template <class T>
int gemm_compare(const MlpOptions& o, const Cli& cli, const DeviceInfo& dev, const char* phase) {
  const auto& w = o.layers;
  int l = 0;
  for (int i = 1; i < o.nlayers(); ++i)
    if (static_cast<double>(w[i]) * w[i + 1] > static_cast<double>(w[l]) * w[l + 1]) l = i;
  const int B = o.batch, in = w[l], out = w[l + 1];
  std::printf("GEMM comparison on layer %d (%d -> %d), batch %d, %s\n", l, in, out, B, o.precision.c_str());
  cudaStream_t st{};
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  auto rnd = [&](size_t n, uint64_t seed) {
    DevBuf<float> f(n);
    DevBuf<T> t(n);
    fill_random_kernel<<<ew_blocks(n), 256, 0, st>>>(f.get(), n, seed);
    CHECK_LAUNCH();
    if constexpr (std::is_same<T, __half>::value) {
      to_half_kernel<<<ew_blocks(n), 256, 0, st>>>(f.get(), t.get(), n);
      CHECK_LAUNCH();
    } else {
      CUDA_CHECK(cudaMemcpyAsync(t.get(), f.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, st));
    }
    CUDA_CHECK(cudaStreamSynchronize(st));
    return t;
  };
  DevBuf<T> X = rnd(static_cast<size_t>(B) * in, 1), W = rnd(static_cast<size_t>(out) * in, 2),
            dZ = rnd(static_cast<size_t>(B) * out, 3);
  DevBuf<float> c_own(static_cast<size_t>(out) * in), c_lt(static_cast<size_t>(out) * in);
  LtHandle lt;
  LtLayer lay;
  lay.plan<T>(lt, B, in, out, true);

  GemmProblem<MatView<T, true>, MatView<T, false>, CompareStoreEpi> fwd;
  fwd.M = B, fwd.N = out, fwd.K = in, fwd.a = make_view<T, true>(X.get(), in), fwd.b = make_view<T, false>(W.get(), in);
  fwd.epi.c = c_own.get(), fwd.epi.ldc = out;
  GemmProblem<MatView<T, true>, MatView<T, true>, CompareStoreEpi> dgr;
  dgr.M = B, dgr.N = in, dgr.K = out, dgr.a = make_view<T, true>(dZ.get(), out), dgr.b = make_view<T, true>(W.get(), in);
  dgr.epi.c = c_own.get(), dgr.epi.ldc = in;
  GemmProblem<MatView<T, false>, MatView<T, true>, CompareStoreEpi> wgr;
  wgr.M = out, wgr.N = in, wgr.K = B, wgr.a = make_view<T, false>(dZ.get(), out), wgr.b = make_view<T, true>(X.get(), in);
  wgr.epi.c = c_own.get(), wgr.epi.ldc = in;
  plan_splits_p5(fwd, dev.sm_count), plan_splits_p5(dgr, dev.sm_count), plan_splits_p5(wgr, dev.sm_count);
  size_t wsn = std::max({ws_floats(fwd), ws_floats(dgr), ws_floats(wgr), size_t{1}});
  size_t tiles = std::max({fwd.tiles(), dgr.tiles(), wgr.tiles()});
  DevBuf<float> ws(wsn);
  DevBuf<unsigned> counters(tiles);
  CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());
  fwd.ws = dgr.ws = wgr.ws = ws.get();
  fwd.counters = dgr.counters = wgr.counters = counters.get();

  auto time_it = [&](auto&& launch) {
    EventTimer t(st);
    for (int i = 0; i < 5; ++i) launch();
    std::vector<double> ms;
    for (int i = 0; i < 30; ++i) {
      t.start();
      launch();
      t.stop();
      ms.push_back(t.elapsed_ms());
    }
    return summarize(ms).median;
  };
  auto poison = [&](DevBuf<float>& b) { CUDA_CHECK(cudaMemsetAsync(b.get(), 0xFF, b.bytes(), st)); };
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> own_total;
  auto one = [&](const char* name, double M, double N, double K, auto&& own, auto&& ltf) {
    poison(c_own), poison(c_lt);
    own();
    ltf();
    CUDA_CHECK(cudaStreamSynchronize(st));
    const size_t n = static_cast<size_t>(M * N);
    std::vector<float> a(n), b(n);
    CUDA_CHECK(cudaMemcpy(a.data(), c_own.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(b.data(), c_lt.get(), n * sizeof(float), cudaMemcpyDeviceToHost));
    const double err = rel_error(a.data(), std::vector<double>(b.begin(), b.end()).data(), n);
    const double t_own = time_it(own), t_lt = time_it(ltf);
    const double flops = 2 * M * N * K, bytes = (M * K + K * N) * sizeof(T) + M * N * 4.0;
    rows.push_back({{"product", name}, {"M", M}, {"N", N}, {"K", K}, {"own_ms", t_own}, {"cublaslt_ms", t_lt},
                    {"own_over_cublaslt_speed", t_lt / t_own}, {"own_tflops", flops / t_own / 1e9},
                    {"cublaslt_tflops", flops / t_lt / 1e9}, {"own_gbps", bytes / t_own / 1e6},
                    {"cublaslt_gbps", bytes / t_lt / 1e6}, {"rel_diff_vs_cublaslt", finite_or_null(err)}});
    own_total.push_back(t_own);
    std::printf("  %-8s %6.0fx%6.0fx%6.0f  own %.4f ms  cuBLASLt %.4f ms  own/cuBLASLt speed %.2f  rel.diff %.1e\n",
                name, M, N, K, t_own, t_lt, t_lt / t_own, err);
  };
  one("forward", B, out, in, [&] { launch_gemm<p4_gemm_fwd, T>(fwd, st); },
      [&] { lay.forward(X.get(), W.get(), c_lt.get(), st); });
  one("dgrad", B, in, out, [&] { launch_gemm<p4_gemm_bwd_data, T>(dgr, st); },
      [&] { lay.backward_data(dZ.get(), W.get(), c_lt.get(), st); });
  one("wgrad", out, in, B, [&] { launch_gemm<p4_gemm_bwd_weight, T>(wgr, st); },
      [&] { lay.backward_weight(dZ.get(), X.get(), c_lt.get(), st); });
  CUDA_CHECK(cudaStreamDestroy(st));

  nlohmann::json rec = new_record(phase, o.workload, "cuda-vs-cublaslt", cli);
  rec["device"] = to_json(dev);
  rec["software"] = software_json(dev);
  rec["timing"] = timing_json("cuda-events", "one launch of each product (median of 30 after 5 warm-ups)",
                              "operand generation, planning", 5, summarize(own_total));
  rec["metrics"] = {{"gemm_compare", rows}, {"layer", l}, {"in", in}, {"out", out}, {"batch", B}};
  rec["notes"].push_back("own = the phase 4/5 GEMM mainloop, planned and with the split-K fix-up as phase 5's trainer runs it, "
                         "and a plain fp32 store epilogue (no fusion); timing.total_ms "
                         "samples are the own medians of forward, dgrad, wgrad");
  rec["validation"] = {{"performed", false}, {"passed", nullptr}};
  const std::string path = write_record(rec, o.common.out, dev.slug, phase, o.common.tag);
  std::printf("record: %s\n", path.c_str());
  return kExitOk;
}

}  // namespace
}  // namespace nb
