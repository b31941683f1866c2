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
// outside. --validate: the float64 reference of common/reference.h on the same train points,
// tolerances as linreg.py (w, b 1e-4 relative; every epoch's loss and the test loss 1e-3).
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
#include "npy.h"
#include "reference.h"
#include "stats.h"
#include "twin_common.h"

namespace {

using nb::Error;
constexpr const char* kPhase = "libtorch_linreg";
constexpr double kParamTol = 1e-4, kLossTol = 1e-3;

struct Options {
  std::string data;
  int64_t n = 0;  // 0: as many as --data holds
  int epochs = 200;
  double lr = 0.01;
  std::string impl = "eager";
  nb::CommonOptions common;
};

struct Results {
  float w = 0, b = 0;
  std::vector<float> loss;
  double test_loss = NAN;
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

  Results results() {
    Results r;
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

double rel(double a, double r) {
  if (r != 0) return std::fabs(a - r) / std::fabs(r);
  return a == r ? 0.0 : INFINITY;
}

// linreg.py's validate(): errors against the float64 reference on the same points.
nlohmann::json validate(const std::vector<float>& pts, size_t n, double lr, int epochs, const Results& got, bool* ok) {
  const size_t nt = nb::linreg_train_count(n);
  std::vector<float> x(n), y(n);
  for (size_t i = 0; i < n; ++i) x[i] = pts[2 * i], y[i] = pts[2 * i + 1];
  const nb::LinregSums s = nb::linreg_sums(x.data(), y.data(), nt);
  const nb::LinregTrace ref = nb::linreg_reference(s, static_cast<float>(nb::kLinregInitW),
                                                   static_cast<float>(nb::kLinregInitB), lr, epochs);
  nlohmann::json errors, tol;
  double ew = rel(got.w, ref.w), eb = rel(got.b, ref.b), el = 0;
  if (got.loss.size() != ref.loss.size()) {
    el = INFINITY;
  } else {
    for (size_t e = 0; e < ref.loss.size(); ++e) {
      double v = rel(got.loss[e], ref.loss[e]);
      el = std::max(el, v == v ? v : INFINITY);  // a NaN loss counts as an infinite error
    }
  }
  std::vector<std::pair<std::string, double>> errs = {{"w_rel", ew}, {"b_rel", eb}, {"max_loss_rel", el}};
  tol = {{"w_rel", kParamTol}, {"b_rel", kParamTol}, {"max_loss_rel", kLossTol}};
  if (n > nt) {
    const nb::LinregSums st = nb::linreg_sums(x.data() + nt, y.data() + nt, n - nt);
    errs.push_back({"test_loss_rel", rel(got.test_loss, nb::linreg_loss(st, ref.w, ref.b))});
    tol["test_loss_rel"] = kLossTol;
  }
  *ok = true;
  std::printf("validate (float64 reference, %zu train / %zu test points):", nt, n - nt);
  for (auto& [k, v] : errs) {
    errors[k] = nb::finite_or_null(v);
    if (!(v <= tol[k].get<double>())) *ok = false;
    std::printf(" %s=%.3e", k.c_str(), v);
  }
  std::printf(" -> %s\n", *ok ? "PASS" : "FAIL");
  return {{"performed", true},
          {"passed", *ok},
          {"reference", "float64 (common/reference.cpp) over the same points"},
          {"errors", errors},
          {"tolerances", tol},
          {"reference_w", ref.w},
          {"reference_b", ref.b}};
}

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
      const nb::DeviceInfo dev = nb::lt::device_info();
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
      const Results got = tr.results();
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
      const double train_loss = got.loss.empty() ? NAN : got.loss.back();
      rec["metrics"] = {{"w", nb::finite_or_null(got.w)},
                        {"b", nb::finite_or_null(got.b)},
                        {"train_loss", nb::finite_or_null(train_loss)},
                        {"test_loss", nb::finite_or_null(got.test_loss)}};
      rec["loss"] = {{"per_epoch", nb::finite_array(got.loss)}};
      rec["kernels"] = nlohmann::json::array();
      rec["memcpy"] = nlohmann::json::array();
      rec["ranges"] = nlohmann::json::array();
      rec["trace_file"] = nullptr;
      bool ok = true;
      if (o.common.validate)
        rec["validation"] = validate(a.data, n, o.lr, o.epochs, got, &ok);
      else
        rec["validation"] = {{"performed", false}, {"passed", nullptr}, {"errors", nlohmann::json::object()},
                             {"tolerances", nlohmann::json::object()}};
      bool finite = std::isfinite(got.w) && std::isfinite(got.b);
      for (float v : got.loss) finite = finite && std::isfinite(v);
      if (!finite)
        rec["status"] = "diverged";
      else if (!ok)
        rec["status"] = "validation_failed";
      const std::string problem = nb::validate_record(rec);
      if (!problem.empty()) throw Error(nb::kExitInternal, "refusing to write an invalid record: " + problem);
      const std::string path = nb::write_record(rec, o.common.out, dev.slug, kPhase, tag);
      std::printf("%s %s: n=%zu epochs=%d w=%.7f b=%.7f train_loss=%.7f test_loss=%.7f time median %.3f ms (%d runs)%s -> %s\n",
                  kPhase, implementation.c_str(), n, o.epochs, got.w, got.b, train_loss, got.test_loss, st.median,
                  o.common.repeats,
                  impl == "graph" ? (" capture " + std::to_string(tr.capture_ms) + " ms").c_str() : "", path.c_str());
      std::fflush(stdout);
      if (!finite) throw Error(nb::kExitDiverged, "training diverged (non-finite loss or parameters); record: " + path);
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
