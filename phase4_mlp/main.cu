// phase4_mlp — the MNIST MLP, written the way a first trainer is written, in fp32 and in fp16.
//
// What this chapter adds over phase 3: a real model (784-128-64-10 by default, any widths by
// flag), real data (MNIST / Fashion-MNIST through common/idx.h) and its one idea, PRECISION:
//   --precision fp32  every product is the shared-memory tiled SIMT GEMM of common/mlp/kernels.cuh;
//   --precision fp16  every product is our own tensor-core GEMM (WMMA, fp16 operands, fp32
//                     accumulation); activations and a copy of the weights are fp16, the master
//                     weights, gradients and Adam state stay fp32.
// Everything else is deliberately plain: one kernel per operation (GEMM, bias+ReLU, dropout,
// softmax-CE, mean, backward GEMMs, bias gradient, ReLU/dropout backward, one optimizer launch per
// tensor), the host drives every step, gathers the batch on the host, copies it over with
// cudaMemcpy and reads the loss back after every step (that is also where a diverging run is
// caught: the mean kernel raises a flag on a non-finite loss). Phase 5 removes all of that.
//
// Prediction (two numbers, W1 = 784-128-64-10, batch 32, Adam): a step is ~14.5 MFLOP (forward
// 7.0, weight gradients 7.0, input gradients 0.6) and moves ~4.4 MB (weights read twice, gradient
// written and read, Adam's p/m/v read and written: 109,386 parameters), all of it L2-resident. On
// an H100 that is ~0.3 us of math and ~1.5 us of traffic per step, i.e. ~3 ms per epoch if the GPU
// were busy. It is not: a step is 26 kernel launches + a host gather + 2 blocking copies. At
// ~3-4 us per dependent launch plus ~20 us of copies and synchronisation we predict ~100-130 us per
// step, ~190-250 ms per W1 epoch, and no gain from fp16 at this size (launch-bound). At W2 with
// h >= 2048 the SIMT products are compute-bound (27 GFLOP/step at h = 8192) while the fp16 path is
// bound by ~22 bytes of traffic per weight per step, so fp16 should be >= 2x faster there.
//
// Measured (NVIDIA H200, profiles/nvidia-h200/, make run FULL=1 at 8fea4d0; timed without
// our CUPTI tracer; an epoch = total / 5 epochs, a step = total / steps):
//   W1: fp32 220.1 ms an epoch (phase4_mlp__w1-fp32.json), fp16 229.4 (__w1-fp16.json): fp16
//   gains nothing at W1, as predicted (117 / 122 µs a step: launch-bound). Test accuracy after
//   5 epochs: 97.50% (fp32), 97.63% (fp16). Against the fastest framework mode measured on this
//   device, JAX jit-epoch (76.28 ms an epoch, jax_mlp__w1-jit-epoch.json, the ed919e5 run; PyTorch
//   compiled-graph 255.9): phase 4 is 0.347x (fp32) and 0.333x (fp16), a host-driven step.
//   W2 at h = 8192 (ms a step): fp16 1.225 (__w2-h8192-fp16.json) vs fp32 2.107
//   (__w2-h8192-fp32.json): 1.72x, short of the predicted >= 2x (both precisions carry the same
//   fp32 optimizer traffic: see the notes). The fastest framework mode, JAX jit-run (0.8148 ms:
//   jax_mlp__w2-h8192-jit-run.json, ed919e5), is ahead of both: fp16 0.665x, fp32 0.387x.
//
// Notes (the H100 runs in profiles/nvidia-h100-80gb-hbm3/, the bandwidth floor that keeps fp16
//   under 2x, what was tried): report/phase_notes/phase4_mlp.md. Flags: --help lists every one.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.h"
#include "device_info.h"
#include "errors.h"
#include "idx.h"
#include "mlp/kernels.cuh"
#include "mlp/mlp_common.h"
#include "mlp/mlp_record.h"
#include "mlp/validate.h"
#include "nvtx.h"
#include "record.h"
#include "reference.h"
#include "stats.h"
#include "timing.cuh"

namespace nb {
namespace {

using namespace nb::mlp;

constexpr const char* kPhase = "phase4_mlp";

// Host-side data: pixels stay bytes; the batch is converted while it is gathered.
struct HostData {
  const IdxImages* images;
  const IdxLabels* labels;
};

template <class T>
class Trainer {
 public:
  Trainer(const MlpOptions& o, const Schedule& sc, const DeviceInfo& dev, const HostParams& init)
      : o_(o), sc_(sc), dev_(dev), init_(init), L_(o.nlayers()), B_(o.batch) {
    const auto& w = o.layers;
    int maxw = 0;
    for (int x : w) maxw = std::max(maxw, x);
    for (int l = 0; l < L_; ++l) {
      const size_t nw = static_cast<size_t>(w[l + 1]) * w[l];
      W_.emplace_back(nw);
      b_.emplace_back(w[l + 1]);
      gW_.emplace_back(nw);
      gb_.emplace_back(w[l + 1]);
      if (o.adam()) {
        mW_.emplace_back(nw), vW_.emplace_back(nw), mb_.emplace_back(w[l + 1]), vb_.emplace_back(w[l + 1]);
      }
      if (kHalf) W16_.emplace_back(nw);
    }
    X_.alloc(static_cast<size_t>(B_) * w[0]);
    labels_.alloc(B_);
    Z_.alloc(static_cast<size_t>(B_) * maxw);
    dH_.alloc(static_cast<size_t>(B_) * maxw);
    for (int l = 1; l < L_; ++l) {
      H_.emplace_back(static_cast<size_t>(B_) * w[l]);
      keep_.emplace_back(static_cast<size_t>(B_) * w[l]);
    }
    logits_.alloc(static_cast<size_t>(B_) * w[L_]);
    dZ_[0].alloc(static_cast<size_t>(B_) * maxw);
    dZ_[1].alloc(static_cast<size_t>(B_) * maxw);
    row_loss_.alloc(B_);
    loss_.alloc(2);  // [0] mean loss, [1] (as int) non-finite flag
    // Split-K workspace: the largest over the products of a step.
    size_t ws = 0, tiles = 0;
    for (int l = 0; l < L_; ++l) {
      auto f = fwd_problem(l);
      auto wgt = wgrad_problem(l);
      ws = std::max({ws, ws_floats(f), ws_floats(wgt)});
      tiles = std::max({tiles, static_cast<size_t>(f.tiles()), static_cast<size_t>(wgt.tiles())});
      if (l > 0) {
        auto d = dgrad_problem(l);
        ws = std::max(ws, ws_floats(d));
        tiles = std::max(tiles, static_cast<size_t>(d.tiles()));
      }
    }
    ws_.alloc(std::max<size_t>(ws, 1));
    counters_.alloc(std::max<size_t>(tiles, 1));
    CUDA_CHECK(cudaMemset(counters_.get(), 0, counters_.bytes()));
    // Pinned staging for the host-gathered batch: B x 784 pixel bytes, then B label bytes.
    staged_bytes_ = static_cast<size_t>(B_) * w[0] + B_;
    CUDA_CHECK(cudaMallocHost(&h_stage_, staged_bytes_));
    CUDA_CHECK(cudaMallocHost(&h_loss_, 2 * sizeof(float)));
    d_stage_.alloc(staged_bytes_);
    reset();
  }
  ~Trainer() {
    cudaFreeHost(h_stage_);
    cudaFreeHost(h_loss_);
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Back to the initial weights, zero Adam state, step 0.
  void reset() {
    for (int l = 0; l < L_; ++l) {
      W_[l].upload(init_.W[l].data(), init_.W[l].size());
      b_[l].upload(init_.b[l].data(), init_.b[l].size());
      if (o_.adam()) {
        for (auto* buf : {&mW_[l], &vW_[l]}) CUDA_CHECK(cudaMemset(buf->get(), 0, buf->bytes()));
        for (auto* buf : {&mb_[l], &vb_[l]}) CUDA_CHECK(cudaMemset(buf->get(), 0, buf->bytes()));
      }
      if (kHalf) {
        to_half_kernel<<<ew_blocks(W_[l].size()), 256>>>(W_[l].get(), W16_[l].get(), W_[l].size());
        CHECK_LAUNCH();
      }
    }
    step_ = 0;
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  // One training step on the batch of global step `step_`; returns the batch loss.
  float step(const HostData& d, std::map<std::string, KernelCost>* costs) {
    const auto& w = o_.layers;
    {
      NvtxRange r(Cat::H2D, "gather+copy batch");
      gather(d, step_);
      upload_batch();
    }
    const float scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
    const uint32_t thr = dropout_threshold(o_.dropout);
    const uint64_t key = dropout_key(o_.common.seed);
    {
      NvtxRange r(Cat::Forward, "forward");
      for (int l = 0; l < L_; ++l) {
        auto p = fwd_problem(l);
        launch_gemm<p4_gemm_fwd, T>(p, nullptr);
        if (costs) add_gemm_cost(*costs, "p4_gemm_fwd", p.M, p.N, p.K, sizeof(T));
        const size_t n = static_cast<size_t>(B_) * w[l + 1];
        if (l + 1 < L_) {
          bias_act_kernel<T><<<ew_blocks(n), 256>>>(Z_.get(), b_[l].get(), H_[l].get(), B_, w[l + 1], true);
          CHECK_LAUNCH();
          if (o_.dropout > 0) {
            dropout_kernel<T><<<ew_blocks(n), 256>>>(H_[l].get(), keep_[l].get(), static_cast<int>(n), key,
                                                     static_cast<uint32_t>(l), static_cast<uint64_t>(step_), thr, scale);
            CHECK_LAUNCH();
          }
        } else {
          bias_act_kernel<float><<<ew_blocks(n), 256>>>(Z_.get(), b_[l].get(), logits_.get(), B_, w[l + 1], false);
          CHECK_LAUNCH();
        }
      }
    }
    float* h_loss = h_loss_;
    {
      NvtxRange r(Cat::Loss, "softmax-ce + mean");
      softmax_ce_kernel<T><<<(B_ + 127) / 128, 128>>>(logits_.get(), labels_.get(), B_, w[L_], row_loss_.get(),
                                                      dZ_[(L_ - 1) & 1].get());
      CHECK_LAUNCH();
      CUDA_CHECK(cudaMemset(loss_.get() + 1, 0, sizeof(float)));
      mean_kernel<<<1, 256>>>(row_loss_.get(), B_, loss_.get(), reinterpret_cast<int*>(loss_.get() + 1));
      CHECK_LAUNCH();
    }
    {
      NvtxRange r(Cat::Backward, "backward");
      for (int l = L_ - 1; l >= 0; --l) {
        T* dz = dZ_[l & 1].get();
        auto g = wgrad_problem(l);
        launch_gemm<p4_gemm_bwd_weight, T>(g, nullptr);
        if (costs) add_gemm_cost(*costs, "p4_gemm_bwd_weight", g.M, g.N, g.K, sizeof(T));
        bias_grad_kernel<T><<<(w[l + 1] + 127) / 128, 128>>>(dz, B_, w[l + 1], gb_[l].get());
        CHECK_LAUNCH();
        if (l > 0) {
          auto dp = dgrad_problem(l);
          launch_gemm<p4_gemm_bwd_data, T>(dp, nullptr);
          if (costs) add_gemm_cost(*costs, "p4_gemm_bwd_data", dp.M, dp.N, dp.K, sizeof(T));
          const size_t n = static_cast<size_t>(B_) * w[l];
          relu_dropout_bwd_kernel<T><<<ew_blocks(n), 256>>>(dH_.get(), H_[l - 1].get(),
                                                            o_.dropout > 0 ? keep_[l - 1].get() : nullptr, scale,
                                                            dZ_[(l - 1) & 1].get(), static_cast<int>(n));
          CHECK_LAUNCH();
        }
      }
    }
    {
      NvtxRange r(Cat::Update, o_.adam() ? "adam" : "sgd");
      const int64_t t = step_ + 1;
      const AdamHyper h = adam_hyper(o_.lr, t);
      for (int l = 0; l < L_; ++l) {
        __half* w16 = kHalf ? reinterpret_cast<__half*>(W16_[l].get()) : nullptr;
        if (o_.adam()) {
          adam_kernel<<<ew_blocks(W_[l].size()), 256>>>(W_[l].get(), gW_[l].get(), mW_[l].get(), vW_[l].get(), w16,
                                                        W_[l].size(), h);
          CHECK_LAUNCH();
          adam_kernel<<<ew_blocks(b_[l].size()), 256>>>(b_[l].get(), gb_[l].get(), mb_[l].get(), vb_[l].get(),
                                                        nullptr, b_[l].size(), h);
          CHECK_LAUNCH();
        } else {
          sgd_kernel<<<ew_blocks(W_[l].size()), 256>>>(W_[l].get(), gW_[l].get(), w16, W_[l].size(),
                                                       static_cast<float>(o_.lr));
          CHECK_LAUNCH();
          sgd_kernel<<<ew_blocks(b_[l].size()), 256>>>(b_[l].get(), gb_[l].get(), nullptr, b_[l].size(),
                                                       static_cast<float>(o_.lr));
          CHECK_LAUNCH();
        }
      }
    }
    // The loss read-back, once per step, after the whole step is enqueued (reading it between the
    // forward and the backward pass would also stall the host's launches on the GPU).
    {
      NvtxRange r(Cat::Sync, "loss read-back");
      CUDA_CHECK(cudaMemcpy(h_loss, loss_.get(), 2 * sizeof(float), cudaMemcpyDeviceToHost));
    }
    int flag = 0;
    std::memcpy(&flag, &h_loss[1], sizeof flag);
    last_loss_ = flag ? NAN : h_loss[0];
    ++step_;
    return last_loss_;
  }

  // Test-set loss and accuracy: the same forward kernels over chunks of the training batch size,
  // logits copied back and scored on the host in double (not timed).
  void evaluate(const IdxImages& im, const IdxLabels& lab, double* loss, double* acc) {
    const auto& w = o_.layers;
    const int n = static_cast<int>(im.count), C = w[L_];
    std::vector<float> logits(static_cast<size_t>(B_) * C);
    double ls = 0;
    int64_t correct = 0;
    for (int s = 0; s < n; s += B_) {
      const int rows = std::min(B_, n - s);
      for (int r = 0; r < B_; ++r) {
        const int idx = s + std::min(r, rows - 1);  // pad a short last chunk with its last image
        std::memcpy(h_stage_ + static_cast<size_t>(r) * w[0], &im.pixels[static_cast<size_t>(idx) * w[0]], w[0]);
        h_stage_[static_cast<size_t>(B_) * w[0] + r] = lab.labels[idx];
      }
      upload_batch();
      for (int l = 0; l < L_; ++l) {
        auto p = fwd_problem(l);
        launch_gemm<p4_gemm_fwd, T>(p, nullptr);
        const size_t m = static_cast<size_t>(B_) * w[l + 1];
        if (l + 1 < L_) bias_act_kernel<T><<<ew_blocks(m), 256>>>(Z_.get(), b_[l].get(), H_[l].get(), B_, w[l + 1], true);
        else bias_act_kernel<float><<<ew_blocks(m), 256>>>(Z_.get(), b_[l].get(), logits_.get(), B_, w[l + 1], false);
        CHECK_LAUNCH();
      }
      CUDA_CHECK(cudaMemcpy(logits.data(), logits_.get(), logits.size() * sizeof(float), cudaMemcpyDeviceToHost));
      for (int r = 0; r < rows; ++r) {
        const float* z = &logits[static_cast<size_t>(r) * C];
        int arg = 0;
        double mx = z[0];
        for (int j = 1; j < C; ++j)
          if (z[j] > mx) mx = z[j], arg = j;
        double se = 0;
        for (int j = 0; j < C; ++j) se += std::exp(z[j] - mx);
        const int y = lab.labels[s + r];
        ls += mx + std::log(se) - z[y];
        correct += (arg == y);
      }
    }
    *loss = ls / n;
    *acc = 100.0 * static_cast<double>(correct) / n;
  }

  // Copies of the device state for validation.
  std::vector<std::vector<float>> params() const {  // W0, b0, W1, b1, ...
    std::vector<std::vector<float>> out;
    for (int l = 0; l < L_; ++l) out.push_back(W_[l].download()), out.push_back(b_[l].download());
    return out;
  }
  std::vector<std::vector<float>> grads() const {
    std::vector<std::vector<float>> out;
    for (int l = 0; l < L_; ++l) out.push_back(gW_[l].download()), out.push_back(gb_[l].download());
    return out;
  }
  std::vector<std::vector<uint8_t>> masks() const {
    std::vector<std::vector<uint8_t>> out;
    for (auto& k : keep_) out.push_back(k.download());
    return out;
  }
  // The last batch as the device holds it (pixels / 255 rounded to T), and its labels.
  std::vector<double> last_batch() const {
    const size_t n = static_cast<size_t>(B_) * o_.layers[0];
    std::vector<double> x(n);
    for (size_t i = 0; i < n; ++i) {
      const float f = static_cast<float>(h_stage_[i]) / 255.0f;
      if constexpr (kHalf) x[i] = __half2float(__float2half_rn(f));
      else x[i] = f;
    }
    return x;
  }
  std::vector<int> last_labels() const {
    const size_t n = static_cast<size_t>(B_) * o_.layers[0];
    return std::vector<int>(h_stage_ + n, h_stage_ + n + B_);
  }
  int64_t steps_done() const { return step_; }

 private:
  static constexpr bool kHalf = std::is_same<T, __half>::value;
  using Fwd = GemmProblem<MatView<T, true>, MatView<T, false>, StoreEpi>;
  using Dgrad = GemmProblem<MatView<T, true>, MatView<T, true>, StoreEpi>;
  using Wgrad = GemmProblem<MatView<T, false>, MatView<T, true>, StoreEpi>;

  const T* weights(int l) const {
    if constexpr (kHalf) return W16_[l].get();
    else return W_[l].get();
  }
  const T* input_of(int l) const { return l == 0 ? X_.get() : H_[l - 1].get(); }

  // Z[B, out] = input[B, in] · W^T
  Fwd fwd_problem(int l) const {
    const int in = o_.layers[l], out = o_.layers[l + 1];
    Fwd p;
    p.M = B_, p.N = out, p.K = in;
    p.a = make_view<T, true>(input_of(l), in);
    p.b = make_view<T, false>(weights(l), in);
    p.epi.c = Z_.get(), p.epi.ldc = out;
    p.ws = ws_.get(), p.counters = counters_.get();
    plan_splits(p, dev_.sm_count);
    return p;
  }
  // dH[B, in] = dZ[B, out] · W
  Dgrad dgrad_problem(int l) const {
    const int in = o_.layers[l], out = o_.layers[l + 1];
    Dgrad p;
    p.M = B_, p.N = in, p.K = out;
    p.a = make_view<T, true>(dZ_[l & 1].get(), out);
    p.b = make_view<T, true>(weights(l), in);
    p.epi.c = dH_.get(), p.epi.ldc = in;
    p.ws = ws_.get(), p.counters = counters_.get();
    plan_splits(p, dev_.sm_count);
    return p;
  }
  // dW[out, in] = dZ^T · input
  Wgrad wgrad_problem(int l) const {
    const int in = o_.layers[l], out = o_.layers[l + 1];
    Wgrad p;
    p.M = out, p.N = in, p.K = B_;
    p.a = make_view<T, false>(dZ_[l & 1].get(), out);
    p.b = make_view<T, true>(input_of(l), in);
    p.epi.c = gW_[l].get(), p.epi.ldc = in;
    p.ws = ws_.get(), p.counters = counters_.get();
    plan_splits(p, dev_.sm_count);
    return p;
  }

  // The host gathers the batch's pixel bytes and labels into the pinned staging buffer.
  void gather(const HostData& d, int64_t step) {
    const int in = o_.layers[0];
    for (int r = 0; r < B_; ++r) {
      const uint32_t idx = sample_index(sc_, o_.common.seed, step, r, &perm_, &perm_epoch_);
      std::memcpy(h_stage_ + static_cast<size_t>(r) * in, &d.images->pixels[static_cast<size_t>(idx) * in], in);
      h_stage_[static_cast<size_t>(B_) * in + r] = d.labels->labels[idx];
    }
  }
  // One cudaMemcpy of the bytes, then one kernel turns them into x (T) and labels (int).
  void upload_batch() {
    CUDA_CHECK(cudaMemcpy(d_stage_.get(), h_stage_, staged_bytes_, cudaMemcpyHostToDevice));
    bytes_to_batch_kernel<T><<<ew_blocks(staged_bytes_), 256>>>(d_stage_.get(), B_, o_.layers[0], X_.get(),
                                                                 labels_.get());
    CHECK_LAUNCH();
  }

  const MlpOptions& o_;
  const Schedule& sc_;
  const DeviceInfo& dev_;
  const HostParams& init_;
  const int L_, B_;
  std::vector<DevBuf<float>> W_, b_, gW_, gb_, mW_, vW_, mb_, vb_;
  std::vector<DevBuf<__half>> W16_;
  std::vector<DevBuf<T>> H_;
  std::vector<DevBuf<uint8_t>> keep_;
  DevBuf<T> X_, dZ_[2];
  DevBuf<int> labels_;
  DevBuf<float> Z_, dH_, logits_, row_loss_, loss_, ws_;
  DevBuf<unsigned> counters_;
  uint8_t* h_stage_ = nullptr;
  float* h_loss_ = nullptr;
  size_t staged_bytes_ = 0;
  DevBuf<uint8_t> d_stage_;
  Perm perm_;
  int64_t perm_epoch_ = -1;
  int64_t step_ = 0;
  float last_loss_ = 0;
};

// --validate: the first K steps against the float64 reference (common/mlp/validate.h: each step
// re-anchored at the device's parameters; tolerances from the shape and the precision), on the same
// batches with the dropout masks copied back from the device.
template <class T>
ValidationResult validate(Trainer<T>& tr, const MlpOptions& o, const HostData& d, const HostParams& init) {
  const double scale = 1.0 / (1.0 - o.dropout);
  return validate_steps(validate_spec(o), flatten(to_reference(init)), o.validate_steps, [&](int) {
    StepSeen s;
    s.loss = tr.step(d, nullptr);
    s.x = tr.last_batch();  // converted exactly as on the device
    s.labels = tr.last_labels();
    if (o.dropout > 0) {
      for (auto& m : tr.masks()) {
        std::vector<double> md(m.size());
        for (size_t i = 0; i < m.size(); ++i) md[i] = m[i] ? scale : 0.0;
        s.masks.push_back(std::move(md));
      }
    }
    for (auto& t : tr.grads()) s.grads.insert(s.grads.end(), t.begin(), t.end());
    for (auto& t : tr.params()) s.params.insert(s.params.end(), t.begin(), t.end());
    return s;
  });
}

template <class T>
int train(const MlpOptions& o, const Cli& cli, const DeviceInfo& dev, const Dataset& ds, const Schedule& sc,
          const HostParams& init) {
  const HostData d{&ds.train_images, &ds.train_labels};

  const std::string impl = std::string("cuda-") + o.precision;
  nlohmann::json rec = new_record(kPhase, o.workload, impl, cli);
  rec["device"] = to_json(dev);
  rec["software"] = software_json(dev);
  rec["notes"].push_back("batch gathered on the host and copied with cudaMemcpy every step; loss read back every step");
  rec["notes"].push_back("batch order: Feistel permutation per epoch (mlp_common.h); last partial batch dropped");
  if (o.common.deterministic) rec["notes"].push_back("--deterministic: no float atomics are used in any case");

  size_t free0 = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  Trainer<T> tr(o, sc, dev, init);
  size_t free1 = 0;
  CUDA_CHECK(cudaMemGetInfo(&free1, &total));

  Peaks peaks;
  if (o.common.measure_peaks) {
    peaks = measure_peaks();
    rec["peaks"] = to_json(peaks);
  }

  int rc = kExitOk;
  if (o.common.validate) {
    ValidationResult v = validate(tr, o, d, init);
    rec["validation"] = v.to_json();
    if (!v.passed) {
      rec["status"] = "validation_failed";
      rc = kExitValidation;
    }
    tr.reset();
  } else {
    rec["validation"] = {{"performed", false}, {"passed", nullptr}};
  }

  // Warm-up: `warmup` x 50 untimed steps from the initial state, then back to it.
  const int64_t warm_steps = std::min<int64_t>(50, sc.total_steps);
  for (int w = 0; w < o.common.warmup; ++w) {
    for (int64_t s = 0; s < warm_steps; ++s) tr.step(d, nullptr);
    tr.reset();
  }

  // One training run from the initial state: every epoch timed with events, then evaluated.
  struct Run {
    double total_ms = 0;
    std::vector<double> per_epoch_ms, epoch_loss, test_loss, test_acc;
    std::vector<float> step_losses;
    std::string diverged;
  };
  EventTimer timer;
  auto one_run = [&](std::map<std::string, KernelCost>* costs) {
    Run run;
    tr.reset();
    int64_t s = 0;
    for (int e = 0; e < sc.epochs && run.diverged.empty(); ++e) {
      const int64_t s_end = std::min(sc.total_steps, (e + 1) * sc.steps_per_epoch);
      double sum = 0;
      timer.start();
      for (; s < s_end; ++s) {
        throw_if_interrupted("training");
        const float l = tr.step(d, costs);
        run.step_losses.push_back(l);
        sum += l;
        if (!std::isfinite(l)) {
          run.diverged = "training diverged: non-finite loss at epoch " + std::to_string(e) + ", step " +
                         std::to_string(s - e * sc.steps_per_epoch) + " (global step " + std::to_string(s) + ")";
          break;
        }
      }
      timer.stop();
      const double ms = timer.elapsed_ms();
      run.per_epoch_ms.push_back(ms);
      run.total_ms += ms;
      const int64_t n_steps = s_end - e * sc.steps_per_epoch;
      run.epoch_loss.push_back(sum / static_cast<double>(n_steps));
      if (run.diverged.empty()) {
        NvtxRange r(Cat::Eval, "evaluate");
        double tl = 0, ta = 0;
        tr.evaluate(ds.test_images, ds.test_labels, &tl, &ta);
        run.test_loss.push_back(tl), run.test_acc.push_back(ta);
        std::printf("epoch %d: %.1f ms  train loss %.4f  test loss %.4f  test acc %.2f%%\n", e, ms,
                    run.epoch_loss.back(), tl, ta);
      }
    }
    return run;
  };

  // The timed runs, without our CUPTI tracer: it adds ~2 us to each of the ~28 launches of a step
  // (tracer_overhead record), which on this launch-bound phase would be a quarter of the time. Then
  // one more run, untimed, with it on: the kernel/memcpy/range summaries and the efficiency table
  // (costs counted over that run, as the tracer's totals are; common/runner.h).
  Run last;
  double traced_total = 0;
  std::vector<float> final_params;  // the timed runs' result (the traced run repeats it)
  std::map<std::string, KernelCost> costs;
  const TimedRuns runs = timed_then_traced(
      {0, o.common.repeats, 1, !o.common.no_cupti},
      [&](RunKind kind) {
        if (kind != RunKind::Timed) {
          std::printf("traced run (our CUPTI tracer on; not timed):\n");
          return traced_total = one_run(&costs).total_ms;
        }
        last = one_run(nullptr);
        return last.total_ms;
      },
      [&] { return !last.diverged.empty(); },
      [&] {
        for (const auto& p : tr.params()) final_params.insert(final_params.end(), p.begin(), p.end());
      });
  const std::vector<double>& totals = runs.samples;
  const std::optional<double> traced_ms = traced_run_ms(rec, runs, !last.diverged.empty(), traced_total);
  const std::string& diverged = last.diverged;
  const std::vector<float>& step_losses = last.step_losses;

  const Stats st = summarize(totals);
  rec["timing"] = timing_json("cuda-events",
                              "training steps of every epoch: host gather, two cudaMemcpy per step, all kernels, the "
                              "per-step loss read-back",
                              "data loading, initialisation, validation, warm-up, test-set evaluation", o.common.warmup,
                              st, last.per_epoch_ms);
  rec["timing"]["per_step_ms"] = {{"median", step_losses.empty() ? 0.0 : st.median / static_cast<double>(step_losses.size())}};
  traced_run_fields(rec, traced_ms, o.common.trace);
  rec["loss"] = {{"per_epoch", finite_array(last.epoch_loss)}, {"test_per_epoch", finite_array(last.test_loss)},
                 {"per_step", per_step_json(step_losses)}};
  const double samples = static_cast<double>(step_losses.size()) * o.batch;
  rec["metrics"] = {{"test_accuracy", last.test_acc.empty() ? nlohmann::json(nullptr) : nlohmann::json(last.test_acc.back())},
                    {"test_accuracy_per_epoch", last.test_acc},
                    {"train_loss", last.epoch_loss.empty() ? nlohmann::json(nullptr) : finite_or_null(last.epoch_loss.back())},
                    {"peak_device_memory_bytes", DeviceMemoryCounter::get().peak},
                    {"device_memory_delta_bytes", free0 > free1 ? free0 - free1 : 0},
                    {"samples_per_s", st.median > 0 ? samples / (st.median / 1e3) : 0.0},
                    {"steps", static_cast<int64_t>(step_losses.size())}};
  // fingerprint of the final parameters: --deterministic runs must reproduce it bit for bit
  rec["metrics"]["param_checksum"] = float_checksum(final_params);
  if (traced_ms) rec["efficiency"] = efficiency_json(rec["kernels"], costs, o.common.measure_peaks ? &peaks : nullptr);
  if (!diverged.empty()) {
    rec["status"] = "diverged";
    rec["notes"].push_back(diverged);
  }
  const std::string path = write_record(rec, o.common.out, dev.slug, kPhase, o.common.tag);
  std::printf("record: %s\n", path.c_str());
  if (!diverged.empty()) throw Error(kExitDiverged, diverged);
  if (rc == kExitValidation) throw Error(kExitValidation, "validation failed (see the errors above and in " + path + ")");
  return rc;
}

int run(int argc, char** argv) {
  MlpOptions o;
  Cli cli(kPhase, "MNIST MLP, one kernel per operation, host-driven; fp32 SIMT or fp16 tensor-core GEMMs.");
  add_mlp_flags(cli, o);
  cli.add_common(&o.common);
  if (!cli.parse(argc, argv)) return 0;
  check_mlp_options(o);
  check_output_dir(o.common.out);  // a bad --out fails now (exit 6), not after training
  // Everything that needs no GPU first: bad data, a batch larger than the training set and the
  // hand-over files for the twin are dealt with before the device is touched.
  const MlpSetup s = prepare_mlp_run(o);
  const DeviceInfo dev = require_device();
  return o.fp16() ? train<__half>(o, cli, dev, s.ds, s.sc, s.init) : train<float>(o, cli, dev, s.ds, s.sc, s.init);
}

}  // namespace
}  // namespace nb

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, nb::run); }
