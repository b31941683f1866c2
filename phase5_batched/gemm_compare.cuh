// phase5_batched/gemm_compare.cuh — the GEMM benchmark (--gemm-compare): not a rung of the ladder,
// a measurement of every rung against cuBLASLt on every product of the configured model's step.
//
// For each layer's three products (forward, backward data above the first layer, weight gradient)
// at the configured batch: fresh random operands, outputs poisoned before every checked run, a
// float64 reference computed on the GPU, then each implementation checked against it and timed
// (CUDA events around a graph of 10 launches of the product, the median of 30 replays / 10, after 5
// warm-ups):
//   fp32: own-tile (the 32 x 64 SIMT tile, steps 1-4), own-fma64 (step 7: FMA warp tiles in step
//         5's 64 x 64 tile; with own-tile, the CUDA cores' rungs), own-tf32x3 (step 5), cublaslt-fp32
//         (CUBLAS_COMPUTE_32F: the yardstick), cublaslt-tf32 (COMPUTE_32F_FAST_TF32: faster
//         arithmetic, not the same numerics; its error is recorded, never judged);
//   fp16: own-tile (WMMA), own-f16-mma (step 6: mma.sync in step 5's tile), own-f16-wgmma (step 9:
//         wgmma in the same tile, where it takes the product: the first layer's two, on sm_90a),
//         cublaslt-fp16.
// The first layer's X is what the step reads: bytes of a batch of images picked at random from a
// pool of 60,000 (or the batch, if larger), gathered by the own rungs through GatherView (the step's
// view: step 5 stages them as bytes, steps 1-4 convert them in the operand loader); the reference and
// cuBLASLt read the same values materialized (the cuBLASLt path's gather kernel is not timed).
// The fp32-accurate implementations must be within 2u·sqrt(K) + 8u of the reference (u = 2^-24;
// the bound tests/gpu/test_mlp_kernels.cu holds step 5 to); fp16 ones, whose reference multiplies
// the same fp16 operands, within the same bound with u = 2^-22. Steps 6 and 9 multiply the first layer's
// bytes as integers (byte / 255 itself, not rounded to fp16): their reference there takes X as
// byte / 255 in fp32 (within 2^-24 of the quotient), the others' X in fp16. Own products are
// planned as phase 5 plans them (split-K and its fix-up) and end in a plain fp32 store (no fused
// epilogue).
// A probe beside them (fp16, layer 0; rows in metrics.gemm_probe_x_dense, which the report does not
// read): steps 6 and 9 on X materialized in fp16 (impl "... x-dense", judged against the operands as
// stored, counted in the record's validation), and the time of the gather kernel that materializes
// it (product "gather", GB/s of bytes read and fp16 written): what the two products would cost if a
// gather ran ahead of the step.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
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
#include "reference.h"
#include "stats.h"
#include "timing.cuh"

namespace nb {
namespace {

using namespace nb::mlp;

template <class Dummy = void>
__global__ void fill_bytes_kernel(uint8_t* x, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = static_cast<uint8_t>(splitmix64(seed ^ splitmix64(i)) >> 56);
}

template <class Dummy = void>
__global__ void fill_random_kernel(float* x, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = static_cast<float>(static_cast<double>(splitmix64(seed ^ splitmix64(i)) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

// The float64 reference of one product, C[m][n] = sum_k A(m, k) B(k, n), with A and B read through
// element strides (a_m, a_k), (b_k, b_n) from the operands as the GEMMs see them (widened).
template <class TA, class TB>
__global__ void reference_gemm_kernel(const TA* A, size_t a_m, size_t a_k, const TB* B, size_t b_k, size_t b_n, double* C,
                                      int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N) return;
  double s = 0;
  for (int k = 0; k < K; ++k)
    s += static_cast<double>(to_f(A[m * a_m + k * a_k])) * static_cast<double>(to_f(B[k * b_k + n * b_n]));
  C[static_cast<size_t>(m) * N + n] = s;
}

// The plain fp32 store, with phase 5's split-K fix-up (float4 partials; see 5a_graph_step.cuh), which is
// how the trainer's own GEMMs sum their slices.
struct CompareStoreEpi : StoreEpi {
  static constexpr bool kVecFixup = true;
};

template <class T>
int gemm_compare(const MlpOptions& o, const Cli& cli, const DeviceInfo& dev, const char* phase) {
  constexpr bool kHalf = std::is_same<T, __half>::value;
  const auto& w = o.layers;
  const int B = o.batch;
  std::string shape;
  for (size_t i = 0; i < w.size(); ++i) shape += (i ? "-" : "") + std::to_string(w[i]);
  std::printf("GEMM benchmark: every product of a %s step at batch %d, %s (layer 0's X gathered from bytes)\n",
              shape.c_str(), B, o.precision.c_str());
  cudaStream_t st{};
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  auto rnd = [&](size_t n, uint64_t seed) {
    DevBuf<float> f(n);
    DevBuf<T> t(n);
    fill_random_kernel<<<ew_blocks(n), 256, 0, st>>>(f.get(), n, seed);
    CHECK_LAUNCH();
    if constexpr (kHalf) {
      to_half_kernel<<<ew_blocks(n), 256, 0, st>>>(f.get(), t.get(), n);
      CHECK_LAUNCH();
    } else {
      CUDA_CHECK(cudaMemcpyAsync(t.get(), f.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, st));
    }
    CUDA_CHECK(cudaStreamSynchronize(st));
    return t;
  };
  // A product's time: kGraphLaunches launches of it back to back in one graph, the median over 30
  // replays divided by the launches (METHOD.md: a launch timed alone between two events also counts
  // the gap while the host enqueues it, which for a cuBLASLt call is several microseconds).
  constexpr int kGraphLaunches = 10;
  auto time_it = [&](const std::function<void()>& launch) {
    for (int i = 0; i < 5; ++i) launch();
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kGraphLaunches; ++i) launch();
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaGraphLaunch(exec, st));  // (its first replay uploads it)
    EventTimer t(st);
    std::vector<double> ms;
    for (int i = 0; i < 30; ++i) {
      t.start();
      CUDA_CHECK(cudaGraphLaunch(exec, st));
      t.stop();
      ms.push_back(t.elapsed_ms() / kGraphLaunches);
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    return summarize(ms).median;
  };
  // The reference multiplies the very operands the GEMMs read (fp16 ones widened), so only the
  // accumulation errs: u = 2^-24. fp16 products get 4u: tensor cores may truncate their fp32 sums.
  const double u = kHalf ? std::ldexp(1.0, -22) : std::ldexp(1.0, -24);
  LtHandle lt;
  nlohmann::json rows = nlohmann::json::array(), probe_rows = nlohmann::json::array();
  std::vector<double> own_best;
  bool all_ok = true;
  double worst_ratio = 0;

  // The first layer's images: a pool of random bytes and the batch's rows in it (distinct, random).
  const int pool_images = std::max(B, 60000);
  DevBuf<uint8_t> pool(static_cast<size_t>(pool_images) * w[0]);
  fill_bytes_kernel<<<ew_blocks(pool.size()), 256, 0, st>>>(pool.get(), pool.size(), 0x9e3779b97f4a7c15ull);
  CHECK_LAUNCH();
  DevBuf<int> batch_rows(static_cast<size_t>(B));
  {
    std::vector<int> idx(static_cast<size_t>(pool_images));
    for (int i = 0; i < pool_images; ++i) idx[static_cast<size_t>(i)] = i;
    uint64_t state = 0x243f6a8885a308d3ull;
    for (int i = 0; i < B; ++i) {  // the first B of a Fisher-Yates shuffle
      state = splitmix64(state);
      const int j = i + static_cast<int>(state % static_cast<uint64_t>(pool_images - i));
      std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(j)]);
    }
    // on st, which the kernels that read it follow; done before idx goes out of scope
    CUDA_CHECK(cudaMemcpyAsync(batch_rows.get(), idx.data(), batch_rows.bytes(), cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
  }
  RowMap batch_map;
  batch_map.perm = batch_rows.get(), batch_map.batch = B;
  GatherView<T> gathered;
  gathered.data = pool.get(), gathered.ld = w[0], gathered.rows = batch_map;

  for (int l = 0; l < o.nlayers(); ++l) {
    const int in = w[l], out = w[l + 1];
    DevBuf<T> X = rnd(static_cast<size_t>(B) * in, 3 * l + 1), W = rnd(static_cast<size_t>(out) * in, 3 * l + 2),
              dZ = rnd(static_cast<size_t>(B) * out, 3 * l + 3);
    DevBuf<float> X32(kHalf && l == 0 ? static_cast<size_t>(B) * in : 0);  // step 6's X: byte / 255 in fp32
    if (l == 0) {  // X = the gathered images, materialized for the reference and cuBLASLt
      gather_kernel<T><<<ew_blocks(X.size()), 256, 0, st>>>(X.get(), pool.get(), batch_map, B, in);
      CHECK_LAUNCH();
      if (kHalf) {
        gather_kernel<float><<<ew_blocks(X32.size()), 256, 0, st>>>(X32.get(), pool.get(), batch_map, B, in);
        CHECK_LAUNCH();
      }
    }
    LtLayer lay, lay_tf32;
    lay.plan<T>(lt, B, in, out, l > 0);
    if (!kHalf) lay_tf32.plan<T>(lt, B, in, out, l > 0, true);
    const size_t cmax = std::max(static_cast<size_t>(B) * std::max(in, out), static_cast<size_t>(out) * in);
    DevBuf<float> c(cmax);
    DevBuf<double> ref(cmax), ref_bytes(X32.size() > 0 ? cmax : 0);

    // One product: reference, then each implementation checked and timed.
    auto product = [&](const char* name, int M, int N, int K, const T* A, size_t a_m, size_t a_k, const T* Bm,
                       size_t b_k, size_t b_n, auto own_problem, const LtGemm& lt32, const LtGemm* lt_tf32,
                       std::function<void(const LtGemm&, float*)> lt_run, std::function<void(double*)> bytes_ref,
                       bool x_dense = false) {
      reference_gemm_kernel<T, T><<<dim3((N + 127) / 128, M), 128, 0, st>>>(A, a_m, a_k, Bm, b_k, b_n, ref.get(), M, N, K);
      CHECK_LAUNCH();
      std::vector<double> r(static_cast<size_t>(M) * N), rb;
      CUDA_CHECK(cudaMemcpyAsync(r.data(), ref.get(), r.size() * sizeof(double), cudaMemcpyDeviceToHost, st));
      if (bytes_ref) {  // step 6's own reference: X as byte / 255
        bytes_ref(ref_bytes.get());
        rb.resize(r.size());
        CUDA_CHECK(cudaMemcpyAsync(rb.data(), ref_bytes.get(), rb.size() * sizeof(double), cudaMemcpyDeviceToHost, st));
      }
      CUDA_CHECK(cudaStreamSynchronize(st));
      const double tol = 2 * u * std::sqrt(static_cast<double>(K)) + 8 * u;
      const double flops = 2.0 * M * N * K;
      auto one = [&](std::string impl, const std::function<void()>& launch, bool judged, int splits,
                     bool on_bytes = false) {
        if (x_dense) impl += " x-dense";
        const std::vector<double>& want = on_bytes && !rb.empty() ? rb : r;
        CUDA_CHECK(cudaMemsetAsync(c.get(), 0xFF, c.bytes(), st));
        launch();
        std::vector<float> got(static_cast<size_t>(M) * N);
        CUDA_CHECK(cudaMemcpyAsync(got.data(), c.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        const double err = rel_error(got.data(), want.data(), got.size());
        const bool ok = std::isfinite(err) && err <= tol;
        if (judged) {
          all_ok = all_ok && ok;
          worst_ratio = std::max(worst_ratio, std::isfinite(err) ? err / tol : 1e30);
        }
        const double ms = time_it(launch);
        (x_dense ? probe_rows : rows).push_back({{"layer", l}, {"product", name}, {"M", M}, {"N", N}, {"K", K}, {"impl", impl}, {"ms", ms},
                        {"tflops", flops / ms / 1e9}, {"rel_err", finite_or_null(err)}, {"tol", judged ? nlohmann::json(tol) : nlohmann::json()},
                        {"passed", judged ? nlohmann::json(ok) : nlohmann::json()}, {"splits", splits},
                        {"reference", &want == &rb ? "x = byte / 255" : "the operands as stored"}});
        std::printf("  L%d %-15s %5d x %5d x %5d  %-14s %8.4f ms  %6.2f TFLOP/s  rel.err %.2e%s\n", l, name, M, N, K,
                    impl.c_str(), ms, flops / ms / 1e9, err, judged ? (ok ? "  ok" : "  FAIL") : "  (not judged)");
        return ms;
      };
      auto p = own_problem;
      p.M = M, p.N = N, p.K = K, p.epi.c = c.get(), p.epi.ldc = N;
      plan_splits_p5(p, dev.sm_count);
      auto q = p;  // the 64 x 64 tensor-core tile: step 5 (fp32) or step 6 (fp16)
      if constexpr (kHalf) plan_f16mma(q, dev.sm_count);
      else plan_tf32x3(q, dev.sm_count);
      auto f = q;  // fp32: step 7, FMAs in the same tile (its own plan past 16 slices: plan_fma64)
      if constexpr (!kHalf) plan_fma64(f, dev.sm_count);
      DevBuf<float> ws(std::max({ws_floats(p), ws_floats(q), ws_floats(f), size_t{1}}));
      DevBuf<unsigned> counters(std::max({counter_slots(p), counter_slots(q), counter_slots(f), size_t{1}}));
      CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
      p.ws = q.ws = f.ws = ws.get(), p.counters = q.counters = f.counters = counters.get();
      if (x_dense) {  // the probe: only the tensor-core rungs, on X materialized (see the lambdas below)
        one(kHalf ? "own-f16-mma" : "own-tf32x3", [&] { launch_gemm<p4_gemm_fwd, T>(q, st); }, true, q.splits);
        if constexpr (kHalf) {
          if (wgmma_ok(q, 10 * dev.cc_major + dev.cc_minor)) {
            auto g = q;
            plan_f16wgmma(g, dev.sm_count);
            one("own-f16-wgmma", [&] { launch_gemm<p4_gemm_fwd, T>(g, st); }, true, g.splits);
          }
        }
        return;
      }
      double best = one(kHalf ? "own-tile-wmma" : "own-tile", [&] { launch_gemm<p4_gemm_fwd, T>(p, st); }, true, p.splits);
      if constexpr (!kHalf)
        best = std::min(best, one("own-fma64", [&] { launch_gemm<p4_gemm_fwd, T>(f, st); }, true, f.splits));
      best = std::min(best, one(kHalf ? "own-f16-mma" : "own-tf32x3", [&] { launch_gemm<p4_gemm_fwd, T>(q, st); }, true,
                                q.splits, true));
      if constexpr (kHalf) {  // step 9 (wgmma) where it takes the product: the first layer's two
        if (wgmma_ok(q, 10 * dev.cc_major + dev.cc_minor)) {
          auto g = q;  // step 6's split plan, so its workspace and counters fit
          plan_f16wgmma(g, dev.sm_count);
          best = std::min(best, one("own-f16-wgmma", [&] { launch_gemm<p4_gemm_fwd, T>(g, st); }, true, g.splits, true));
        }
      }
      using QP = decltype(q);  // step 10 where it takes the product (the first layer's forward): W's digits + the GEMM
      if constexpr (!kHalf && I8DigitsFits<typename QP::AView, typename QP::BView>::value) {
        if (i8digits_ok(q, 10 * dev.cc_major + dev.cc_minor)) {
          auto g = q;  // step 5's split plan, so its workspace and counters fit
          plan_i8digits(g, dev.sm_count);
          DevBuf<uint32_t> digits(static_cast<size_t>(N) * i8_digit_ld(K));
          g.b = i8_digit_view(digits.get(), K);
          best = std::min(best, one("own-i8-digits", [&] {
            // (Bm is fp32 here; the cast only spares nvcc's instance of this lambda for fp16, never run)
            launch_i8_split_digits(reinterpret_cast<const float*>(Bm), K, N, K, digits.get(), st, false);
            launch_gemm<p4_gemm_fwd, T>(g, st);
          }, true, g.splits));
        }
      }
      own_best.push_back(best);
      one(kHalf ? "cublaslt-fp16" : "cublaslt-fp32", [&] { lt_run(lt32, c.get()); }, true, 1);
      if (lt_tf32) one("cublaslt-tf32", [&] { lt_run(*lt_tf32, c.get()); }, false, 1);
    };

    // The own rungs read X through `xv`: the gathered bytes in the first layer, X itself above it.
    auto forward = [&](auto xv, bool x_dense) {  // Z[B,out] = X · W^T
      GemmProblem<decltype(xv), MatView<T, false>, CompareStoreEpi> p;
      p.a = xv, p.b = make_view<T, false>(W.get(), in);
      product("forward", B, out, in, X.get(), in, 1, W.get(), 1, in, p, lay.fwd, kHalf ? nullptr : &lay_tf32.fwd,
              [&](const LtGemm& g, float* d) { g.run(W.get(), X.get(), d, st); },
              X32.size() == 0 || x_dense ? std::function<void(double*)>() : [&](double* d) {
                reference_gemm_kernel<float, T><<<dim3((out + 127) / 128, B), 128, 0, st>>>(X32.get(), in, 1, W.get(), 1, in,
                                                                                          d, B, out, in);
                CHECK_LAUNCH();
              }, x_dense);
    };
    auto weight_gradient = [&](auto xv, bool x_dense) {  // dW[out,in] = dZ^T · X
      GemmProblem<MatView<T, false>, decltype(xv), CompareStoreEpi> p;
      p.a = make_view<T, false>(dZ.get(), out), p.b = xv;
      product("weight-gradient", out, in, B, dZ.get(), 1, out, X.get(), in, 1, p, lay.wgrad,
              kHalf ? nullptr : &lay_tf32.wgrad, [&](const LtGemm& g, float* d) { g.run(X.get(), dZ.get(), d, st); },
              X32.size() == 0 || x_dense ? std::function<void(double*)>() : [&](double* d) {
                reference_gemm_kernel<T, float><<<dim3((in + 127) / 128, out), 128, 0, st>>>(dZ.get(), 1, out, X32.get(), in, 1,
                                                                                           d, out, in, B);
                CHECK_LAUNCH();
              }, x_dense);
    };
    // Layer 0 in fp16 also as a probe: the tensor-core rungs on X materialized in fp16 (what a gather
    // kernel ahead of the step would give them), and that gather's own time.
    const bool probe_dense = kHalf && l == 0;
    if (l == 0) forward(gathered, false);
    else forward(make_view<T, true>(X.get(), in), false);
    if (probe_dense) forward(make_view<T, true>(X.get(), in), true);
    if (l > 0) {  // backward data: dH[B,in] = dZ · W
      GemmProblem<MatView<T, true>, MatView<T, true>, CompareStoreEpi> p;
      p.a = make_view<T, true>(dZ.get(), out), p.b = make_view<T, true>(W.get(), in);
      product("backward-data", B, in, out, dZ.get(), out, 1, W.get(), in, 1, p, lay.dgrad,
              kHalf ? nullptr : &lay_tf32.dgrad, [&](const LtGemm& g, float* d) { g.run(W.get(), dZ.get(), d, st); }, {});
    }
    if (l == 0) weight_gradient(gathered, false);
    else weight_gradient(make_view<T, true>(X.get(), in), false);
    if (probe_dense) {
      weight_gradient(make_view<T, true>(X.get(), in), true);
      const double ms = time_it([&] {
        gather_kernel<T><<<ew_blocks(X.size()), 256, 0, st>>>(X.get(), pool.get(), batch_map, B, in);
        CHECK_LAUNCH();
      });
      const double bytes = static_cast<double>(X.size()) * (1 + sizeof(T));
      probe_rows.push_back({{"layer", l}, {"product", "gather"}, {"M", B}, {"N", in}, {"K", 0}, {"impl", "gather-kernel x-dense"},
                      {"ms", ms}, {"gb_per_s", bytes / ms / 1e6}, {"splits", 1}});
      std::printf("  L%d %-15s %5d x %5d          %-14s %8.4f ms  %6.1f GB/s (bytes read + fp16 written)\n", l, "gather", B, in,
                  "gather-kernel", ms, bytes / ms / 1e6);
    }
  }
  CUDA_CHECK(cudaStreamDestroy(st));

  nlohmann::json rec = new_record(phase, o.workload, "cuda-gemm-bench", cli);
  rec["device"] = to_json(dev);
  rec["software"] = software_json(dev);
  const std::string per_graph = std::to_string(kGraphLaunches);
  rec["timing"] = timing_json("cuda-events", "each product as a graph of " + per_graph + " launches back to back (median of 30 "
                              "replays, divided by " + per_graph + ", after 5 warm-up launches and one replay)",
                              "operand generation, planning, the float64 reference", 5, summarize(own_best));
  rec["metrics"] = {{"gemm_bench", rows}, {"batch", B}, {"layers", w}};
  if (!probe_rows.empty()) rec["metrics"]["gemm_probe_x_dense"] = probe_rows;
  rec["notes"].push_back("own = the GEMM ladder's rungs planned as phase 5 plans them (split-K and its fix-up) with a plain "
                         "fp32 store epilogue; timing.total_ms samples are the fastest own rung of each product");
  rec["notes"].push_back("the first layer's X: bytes of a random batch from a pool of random images, read by the own rungs "
                         "through the step's GatherView; the reference and cuBLASLt read them materialized");
  rec["notes"].push_back("tolerance: 2u*sqrt(K) + 8u norm-wise against the float64 reference on the same operands (u = 2^-24 fp32, 2^-22 fp16; "
                         "own-f16-mma's first layer against X = byte / 255, the bytes it multiplies as integers: each row's 'reference'); "
                         "cublaslt-tf32 is recorded, not judged");
  rec["validation"] = {{"performed", true}, {"passed", all_ok}, {"errors", {{"worst_error_over_tolerance", worst_ratio}}}};
  if (!all_ok) rec["status"] = "validation_failed";
  const std::string path = write_record(rec, o.common.out, dev.slug, phase, o.common.tag);
  std::printf("record: %s\n", path.c_str());
  return all_ok ? kExitOk : kExitValidation;
}

}  // namespace
}  // namespace nb
