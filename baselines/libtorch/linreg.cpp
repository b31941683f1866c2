// baselines/libtorch/linreg.cpp — the libtorch twin of baselines/pytorch/linreg.py (GPU only):
// linear regression y = w*x + b by full-batch gradient descent, written in C++ against the
// libtorch that ships inside the installed torch package (make libtorch -> build/libtorch_linreg).
//
// What it is for: the Python twin's eager epoch takes ~670 us of which ~110 us are kernels. This
// program runs the very same tensor program without the Python interpreter, so the difference
// between the two is what Python costs, and the rest of the gap to phases 1-3 is the framework's
// own (dispatcher, autograd, allocator, one launch per op).
//
// Same work as linreg.py, flag for flag where they apply:
//   * the points of --data FILE.npy (phase1_naive --save-data: float32 (n, 2), x and y in storage
//     order, the first linreg_train_count(n) = n - n/5 rows the train split, the rest the test);
//   * float32 w = 0.83, b = 0.7645, --lr 0.01, --epochs 200, MSE; epoch e computes the loss at the
//     parameters it starts with (loss[e]), then updates;
//   * the gradient by autograd (loss.backward()) and the update by torch::optim::SGD (no momentum),
//     the way a C++ user writes it; the loss of epoch e goes into slot e of a device tensor.
// Implementations (--impl eager,graph; records libtorch-eager, libtorch-graph):
//   eager  one epoch = zero_grad, forward, backward, SGD step, loss slot copy, all from C++;
//   graph  one whole epoch captured once with at::cuda::CUDAGraph as PyTorch's recipe does it
//          (3 warm-up epochs on a side stream, then capture on a pool stream; the loss goes into
//          loss[ctr] through index_copy_ with a device-side epoch counter, ctr += 1) and replayed
//          once per epoch. Parameters and the counter are reset in place, so the graph stays valid.
// Timing as every program here: data resident before the clock starts, --warmup untimed runs,
// CUDA events around the training loop only (torch::cuda::synchronize before each start), median
// of --repeats; re-initialisation, capture (timing.capture_ms), test loss and validation are
// outside. --validate: common/linreg_harness.h's, as the phases' (float64 reference on the same
// points; w, b 1e-4 relative, every epoch's loss and the test loss 1e-3 or fp32 rounding's floor).
// Records: profiles/<gpu-slug>/libtorch_linreg__<tag>-<eager|graph>.json, schema v1.
// Exit codes (common/errors.h): 1 validation failed, 2 usage, 3 no CUDA device, 4 bad data file,
// 5 out of GPU memory, 6 output not writable, 7 diverged, 8 a libtorch/CUDA call failed.
//
// Measured (NVIDIA H200, profiles/nvidia-h200/libtorch_linreg__headline-*.json, 5M x 200): eager
// 47.8 ms against 144.7 ms from Python (pytorch_linreg__headline-eager.json): two thirds of eager's
// epoch is Python; graph 26.2 ms against Python's 26.5 ms: a graph replay leaves nothing to Python.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "linreg_data.h"
#include "linreg_harness.h"
#include "npy.h"
#include "stats.h"
#include "twin_common.h"

namespace {

using nb::Error;
constexpr const char* kPhase = "libtorch_linreg";

struct Options {
  std::string data;
  int64_t n = 0;  // 0: as many as --data holds
  int epochs = 200;
  double lr = 0.01;
  std::string impl = "eager";
  nb::CommonOptions common;
};

class Trainer {
 public:
  Trainer(bool graph, const std::vector<float>& pts, size_t n, int epochs, double lr)
      : graph_(graph), epochs_(epochs) {
    const size_t nt = nb::linreg_train_count(n);
    auto host = torch::from_blob(const_cast<float*>(pts.data()), {static_cast<int64_t>(n), 2}, torch::kFloat32);
    auto dev = torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA);
    const int64_t ntr = static_cast<int64_t>(nt);
    // Contiguous columns, resident on the device before any timing.
    x_ = host.slice(0, 0, ntr).select(1, 0).contiguous().to(torch::kCUDA);
    y_ = host.slice(0, 0, ntr).select(1, 1).contiguous().to(torch::kCUDA);
    xt_ = host.slice(0, ntr).select(1, 0).contiguous().to(torch::kCUDA);
    yt_ = host.slice(0, ntr).select(1, 1).contiguous().to(torch::kCUDA);
    w_ = torch::full({}, nb::kLinregInitW, dev).requires_grad_(true);
    b_ = torch::full({}, nb::kLinregInitB, dev).requires_grad_(true);
    opt_ = std::make_unique<torch::optim::SGD>(std::vector<torch::Tensor>{w_, b_}, torch::optim::SGDOptions(lr));
    loss_buf_ = torch::zeros({epochs}, dev);
    ctr_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt64).device(torch::kCUDA));
    if (graph_) capture();
  }

  void reset() {
    torch::NoGradGuard ng;
    w_.fill_(nb::kLinregInitW);
    b_.fill_(nb::kLinregInitB);
    loss_buf_.fill_(NAN);
    ctr_.zero_();
  }

  void run() {
    if (graph_) {
      for (int e = 0; e < epochs_; ++e) graph_obj_.replay();
    } else {
      for (int e = 0; e < epochs_; ++e) epoch(e);
    }
  }

  nb::LinregOutcome results() {
    nb::LinregOutcome r;
    r.w = w_.detach().cpu().item<float>();
    r.b = b_.detach().cpu().item<float>();
    auto l = loss_buf_.cpu();
    r.loss.assign(l.data_ptr<float>(), l.data_ptr<float>() + l.numel());
    if (xt_.numel() > 0) {
      torch::NoGradGuard ng;
      r.test_loss = (w_ * xt_ + b_ - yt_).pow(2).mean().item<float>();
    }
    return r;
  }

  double capture_ms = NAN;

 private:
  torch::Tensor loss_fn() { return (w_ * x_ + b_ - y_).pow(2).mean(); }

  void epoch(int e) {
    opt_->zero_grad();  // set_to_none, as Python's default
    torch::Tensor loss = loss_fn();
    loss.backward();
    opt_->step();
    loss_buf_.select(0, e).copy_(loss.detach());  // stays on the device
  }

  // PyTorch's whole-network capture recipe (torch.cuda.graph), spelled out in C++.
  void capture() {
    nb::HostTimer t;
    torch::cuda::synchronize();
    {
      c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
      for (int i = 0; i < 3; ++i) {
        opt_->zero_grad();
        torch::Tensor loss = loss_fn();
        loss.backward();
        opt_->step();
      }
    }
    torch::cuda::synchronize();
    opt_->zero_grad();
    {
      c10::cuda::CUDAStreamGuard cap(c10::cuda::getStreamFromPool());
      graph_obj_.capture_begin();
      static_loss_ = loss_fn();
      static_loss_.backward();
      opt_->step();
      loss_buf_.index_copy_(0, ctr_, static_loss_.detach().view({1}));
      ctr_.add_(1);
      graph_obj_.capture_end();
    }
    torch::cuda::synchronize();
    capture_ms = t.elapsed_ms();
  }

  bool graph_;
  int epochs_;
  torch::Tensor x_, y_, xt_, yt_, w_, b_, loss_buf_, ctr_, static_loss_;
  std::unique_ptr<torch::optim::SGD> opt_;
  at::cuda::CUDAGraph graph_obj_;
};

int body(int argc, char** argv) {
  Options o;
  nb::Cli cli("libtorch_linreg", "libtorch twin of linreg.py: linear regression by full-batch gradient descent on the GPU.");
  cli.add_string("--data", &o.data, "points from phase1_naive --save-data FILE.npy (float32 (n, 2)); required");
  cli.add_int("--n", &o.n, "expected number of points (0: as many as --data holds)", 0);
  cli.add_int("--epochs", &o.epochs, "full-batch gradient-descent epochs", 1, 10000000);
  cli.add_double("--lr", &o.lr, "learning rate");
  cli.add_string("--impl", &o.impl, "eager|graph, comma-separated (one record each)");
  cli.add_common(&o.common);
  if (!cli.parse(argc, argv)) return 0;
  if (o.data.empty()) throw Error(nb::kExitUsage, "--data: required (write the points with phase1_naive --save-data FILE.npy)");
  const std::vector<std::string> impls = nb::lt::impl_list(o.impl);
  nb::check_output_dir(o.common.out);

  // The data file, checked before the GPU is looked at (exit 4).
  nb::NpyArray<float> a = nb::load_npy_f32(o.data);
  if (a.shape.size() != 2 || a.shape[1] != 2 || a.shape[0] < 1)
    throw Error(nb::kExitData, o.data + ": expected float32 of shape (n, 2)");
  const size_t n = a.shape[0];
  if (o.n > 0 && static_cast<size_t>(o.n) != n)
    throw Error(nb::kExitData, o.data + ": holds " + std::to_string(n) + " points, --n says " + std::to_string(o.n));

  // x and y as separate columns, for the float64 reference of --validate (common/linreg_harness.h)
  std::vector<float> hx(n), hy(n);
  for (size_t i = 0; i < n; ++i) hx[i] = a.data[2 * i], hy[i] = a.data[2 * i + 1];

  return nb::lt::torch_guarded([&]() -> int {
    nb::lt::require_cuda();
    nb::lt::no_tf32();
    std::vector<std::string> failed;
    for (const std::string& impl : impls) {
      const std::string implementation = "libtorch-" + impl;
      const std::string tag = o.common.tag + "-" + impl;
      nlohmann::json rec = nb::new_record(kPhase, "linreg", implementation, cli);
      rec["config"]["n"] = n;
      rec["config"]["impl"] = impl;
      rec["config"]["record_tag"] = tag;
      const nb::DeviceInfo dev = nb::query_device();
      rec["device"] = nb::to_json(dev);
      rec["software"] = nb::lt::software_json(dev);
      const double need = 8.0 * n * 6;  // x, y and the autograd intermediates, as linreg.py
      if (need > static_cast<double>(dev.memory_free_bytes))
        throw Error(nb::kExitOutOfMemory, "needs " + std::to_string(need / 1073741824.0) +
                                              " GiB of GPU memory for the data set, only " +
                                              std::to_string(dev.memory_free_bytes / 1073741824.0) + " GiB free");
      Trainer tr(impl == "graph", a.data, n, o.epochs, o.lr);
      std::vector<double> samples;
      for (int i = 0; i < o.common.warmup + o.common.repeats; ++i) {
        nb::throw_if_interrupted("training");
        tr.reset();
        torch::cuda::synchronize();
        nb::lt::EventTimer timer;
        timer.start();
        tr.run();
        const double ms = timer.stop();
        if (i >= o.common.warmup) samples.push_back(ms);
      }
      const nb::LinregOutcome got = tr.results();
      const nb::Stats st = nb::summarize(samples);
      rec["timing"] = nb::timing_json(
          "cuda-events",
          std::to_string(o.epochs) + " epochs of training from C++ (forward, autograd backward, torch::optim::SGD step, "
                                     "loss kept on the device" +
              std::string(impl == "graph" ? "; one CUDA-graph replay per epoch" : "") + "); data resident on the device",
          "data loading and transfer, parameter re-initialisation, graph capture, test evaluation, validation",
          o.common.warmup, st);
      rec["timing"]["per_epoch_ms_median"] = nb::finite_or_null(st.median / o.epochs);
      if (impl == "graph") rec["timing"]["capture_ms"] = tr.capture_ms;
      const size_t nt = nb::linreg_train_count(n);
      rec["data"] = {{"n", n}, {"train", nt}, {"test", n - nt}, {"file", o.data}};
      nb::linreg_fill_results(rec, got);
      rec["kernels"] = nlohmann::json::array();
      rec["memcpy"] = nlohmann::json::array();
      rec["ranges"] = nlohmann::json::array();
      rec["trace_file"] = nullptr;
      bool ok = true;
      rec["validation"] = o.common.validate ? nb::linreg_validate(hx.data(), hy.data(), n, o.lr, o.epochs, got, &ok)
                                            : nb::linreg_validation_skipped();
      const bool finite = nb::linreg_finite(got);
      if (!finite)
        rec["status"] = "diverged";
      else if (!ok)
        rec["status"] = "validation_failed";
      const std::string problem = nb::validate_record(rec);
      if (!problem.empty()) throw Error(nb::kExitInternal, "refusing to write an invalid record: " + problem);
      const std::string path = nb::write_record(rec, o.common.out, dev.slug, kPhase, tag);
      std::printf("%s %s: n=%zu epochs=%d w=%.7f b=%.7f train_loss=%.7f test_loss=%.7f time median %.3f ms (%d runs)%s -> %s\n",
                  kPhase, implementation.c_str(), n, o.epochs, got.w, got.b, got.loss.empty() ? NAN : got.loss.back(),
                  got.test_loss, st.median,
                  o.common.repeats,
                  impl == "graph" ? (" capture " + std::to_string(tr.capture_ms) + " ms").c_str() : "", path.c_str());
      std::fflush(stdout);
      if (!finite) throw Error(nb::kExitDiverged, nb::linreg_divergence_message(got) + "; record: " + path);
      if (!ok) failed.push_back(path);
    }
    if (!failed.empty()) {
      std::string msg = "validation failed: ";
      for (size_t i = 0; i < failed.size(); ++i) msg += (i ? ", " : "") + failed[i];
      throw Error(nb::kExitValidation, msg);
    }
    return 0;
  });
}

}  // namespace

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, body); }
