// baselines/libtorch/mlp.cpp — the libtorch twin of baselines/pytorch/mlp.py: the MNIST MLP (W1:
// 784-128-64-10, Adam 1e-3, dropout 0.2, batch 32) trained from C++ against the libtorch inside
// the installed torch package (make libtorch -> build/libtorch_mlp).
//
// What it is for: is PyTorch's per-step cost Python or the framework? The same model, data, init,
// order and step as mlp.py, with the interpreter taken out. A probe on an H100 saw an eager W1
// epoch at 2.3-2.6 s from C++ against 3.2 s from Python: most of the step is not Python.
//
// The same work as mlp.py, flag for flag (--layers --optimizer adam|sgd --lr --dropout --batch
// --epochs|--steps --precision --data --dataset --init --order --warmup --repeats --tag --out
// --validate --impl eager,graph): --init DIR (W<l>.npy [out,in], b<l>.npy, float32), --order FILE
// (int32 [epochs, n], the first floor(n/batch)*batch of each row, or [steps*batch] with --steps),
// images as bytes on the device, gathered and scaled (x/255) per batch; torch::nn::Linear layers,
// ReLU after each hidden layer, torch::dropout (its own RNG: compare losses with --dropout 0),
// mean cross-entropy; fp32 products without TF32. fp16: at::autocast (the C++ side of
// torch.autocast: enabled for CUDA with float16, nesting counted, weight-cast cache off as in
// mlp.py's training step) around forward and loss; fp32 master weights, no loss scaling.
//   eager  torch::optim::Adam / torch::optim::SGD, the way a C++ user writes it. Note: C++ Adam
//          loops over the parameters one at a time (no foreach kernels, unlike mlp.py's
//          foreach=True) and keeps its step count on the host.
//   graph  the whole step captured once with at::cuda::CUDAGraph (warm-up on a side stream, then
//          capture, as torch.cuda.graph): batch gathered from the order by a device-side counter,
//          forward, backward, optimizer step, loss into its slot, counter += 1; replayed per step.
//          torch::optim::Adam is not capturable in C++ (host step count, bias corrections computed
//          on the host), so Adam is written here with tensor ops: in place, step counts on the
//          device, the same _foreach_ sequence as torch.optim.Adam(capturable=True, foreach=True)
//          (lerp, mul, addcmul, pow of the device step, reciprocal, sqrt, addcdiv). SGD uses
//          torch::optim::SGD (nothing on the host: capturable as it is).
// Timing as mlp.py: data resident, --warmup N = N x 50 untimed steps then parameters and
// optimizer state restored in place, CUDA events around each epoch's steps; the per-epoch loss
// read-back and evaluation are outside; capture time in timing.capture_ms.
// --validate: 3 steps of the recorded implementation itself (eager or graph, dropout 0) against the
// float64 reference of common/reference.h on the same batches: each step's loss, gradients and
// parameter change, with phase 4's derived tolerances (fp32: loss and gradients 1e-5, parameter
// change 2e-4; fp16: 1e-2, 5e-2, 5e-2); mlp.py checks no gradients and the change at 1e-5.
// Records: profiles/<gpu-slug>/libtorch_mlp__<tag>-<eager|graph>.json (phase libtorch_mlp,
// implementation libtorch-<impl>, schema v1; loss.per_step as the CUDA side's; param_checksum).
// Exit codes (common/errors.h): 1 validation failed, 2 usage, 3 no CUDA device, 4 bad
// data/init/order file, 5 out of GPU memory, 6 output not writable, 7 diverged, 8 a libtorch call
// failed.
//
// Measured (NVIDIA H200, profiles/nvidia-h200/libtorch_mlp__w1-*.json, W1, 5 epochs): eager
// 2,831 ms an epoch against 3,515 ms from Python (pytorch_mlp__w1-eager.json): Python is a fifth of
// an eager step, the framework's per-op dispatch and launches the rest; graph 423 ms against 442.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "idx.h"
#include "mlp/validate.h"
#include "npy.h"
#include "reference.h"
#include "stats.h"
#include "twin_common.h"

namespace {

using nb::Error;
using torch::Tensor;
constexpr const char* kPhase = "libtorch_mlp";
constexpr int kEvalRows = 2048, kWarmupSteps = 50, kValidateSteps = 3;

struct Options {
  std::vector<int> layers{784, 128, 64, 10};
  int batch = 32;
  int epochs = 5;
  int64_t steps = 0;
  double lr = 1e-3;
  std::string optimizer = "adam";
  double dropout = 0.2;
  std::string precision = "fp32";
  std::string dataset = "mnist";
  std::string data_dir;
  std::string workload = "auto";
  std::string init, order;
  std::string impl = "eager";
  nb::CommonOptions common;
  bool adam() const { return optimizer == "adam"; }
  bool fp16() const { return precision == "fp16"; }
};

struct Schedule {
  int64_t spe = 0, total = 0;
  int epochs = 0;
};

Schedule schedule(int64_t n_train, const Options& o) {
  if (o.batch > n_train)
    throw Error(nb::kExitUsage, "--batch: " + std::to_string(o.batch) + " exceeds the " + std::to_string(n_train) +
                                    " training images");
  Schedule s;
  s.spe = n_train / o.batch;
  s.total = o.steps > 0 ? o.steps : s.spe * o.epochs;
  s.epochs = static_cast<int>((s.total + s.spe - 1) / s.spe);
  return s;
}

struct Layer {
  std::vector<float> W, b;  // W [out][in]
};

// mlp.py's load_init: W<l>.npy float32 [out, in], b<l>.npy [out], finite, no extra layer.
std::vector<Layer> load_init(const std::string& d, const std::vector<int>& layers) {
  std::vector<Layer> out;
  const size_t L = layers.size() - 1;
  for (size_t l = 0; l < L; ++l) {
    const size_t in = layers[l], o = layers[l + 1];
    const std::string wp = d + "/W" + std::to_string(l) + ".npy", bp = d + "/b" + std::to_string(l) + ".npy";
    if (!std::filesystem::exists(wp)) throw Error(nb::kExitData, wp + ": no such file (initial weights: phase4_mlp --save-init DIR)");
    if (!std::filesystem::exists(bp)) throw Error(nb::kExitData, bp + ": no such file (initial biases: phase4_mlp --save-init DIR)");
    nb::NpyArray<float> W = nb::load_npy_f32(wp), b = nb::load_npy_f32(bp);
    if (W.shape != std::vector<size_t>{o, in})
      throw Error(nb::kExitData, wp + ": expected float32 (" + std::to_string(o) + ", " + std::to_string(in) + ")");
    if (b.shape != std::vector<size_t>{o}) throw Error(nb::kExitData, bp + ": expected float32 (" + std::to_string(o) + ",)");
    for (float v : W.data)
      if (!std::isfinite(v)) throw Error(nb::kExitData, d + ": layer " + std::to_string(l) + " holds non-finite values");
    for (float v : b.data)
      if (!std::isfinite(v)) throw Error(nb::kExitData, d + ": layer " + std::to_string(l) + " holds non-finite values");
    out.push_back({std::move(W.data), std::move(b.data)});
  }
  const std::string extra = d + "/W" + std::to_string(L) + ".npy";
  if (std::filesystem::exists(extra)) throw Error(nb::kExitData, extra + ": more layers in " + d + " than --layers has");
  return out;
}

// mlp.py's load_order: the flat image order of every step, int64 [total * batch].
std::vector<int64_t> load_order(const std::string& path, int64_t n_train, const Options& o, const Schedule& sc) {
  if (!std::filesystem::exists(path)) throw Error(nb::kExitData, path + ": no such file (batch order: phase4_mlp --save-order FILE)");
  nb::NpyArray<int32_t> a = nb::load_npy_i32(path);
  const int64_t B = o.batch, need = sc.total * B;
  std::vector<int64_t> flat;
  flat.reserve(static_cast<size_t>(need));
  if (o.steps > 0) {
    if (a.shape.size() != 1 || static_cast<int64_t>(a.shape[0]) < need)
      throw Error(nb::kExitData, path + ": expected int32 [>= " + std::to_string(need) + "] for --steps " + std::to_string(o.steps));
    flat.assign(a.data.begin(), a.data.begin() + need);
  } else {
    if (a.shape.size() != 2 || static_cast<int64_t>(a.shape[0]) < sc.epochs || static_cast<int64_t>(a.shape[1]) != n_train)
      throw Error(nb::kExitData, path + ": expected int32 [>= " + std::to_string(sc.epochs) + ", " + std::to_string(n_train) + "]");
    for (int e = 0; e < sc.epochs; ++e)
      for (int64_t i = 0; i < sc.spe * B; ++i) flat.push_back(a.data[static_cast<size_t>(e * n_train + i)]);
  }
  for (int64_t v : flat)
    if (v < 0 || v >= n_train) throw Error(nb::kExitData, path + ": image index outside 0.." + std::to_string(n_train - 1));
  return flat;
}

// ------------------------------------------------------------------------------------- model
struct NetImpl : torch::nn::Module {
  NetImpl(const std::vector<int>& layers, double dropout) : p(dropout) {
    for (size_t l = 0; l + 1 < layers.size(); ++l)
      fc.push_back(register_module("fc" + std::to_string(l), torch::nn::Linear(layers[l], layers[l + 1])));
  }
  Tensor forward(Tensor x) {
    for (size_t l = 0; l + 1 < fc.size(); ++l) {
      x = torch::relu(fc[l]->forward(x));
      if (p > 0) x = torch::dropout(x, p, is_training());
    }
    return fc.back()->forward(x);
  }
  double p;
  std::vector<torch::nn::Linear> fc;
};
TORCH_MODULE(Net);

// torch.autocast("cuda", dtype=torch.float16, cache_enabled=...) as an RAII guard.
class Autocast {
 public:
  Autocast(bool on, bool cache) : on_(on) {
    if (!on_) return;
    prev_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
    prev_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    prev_cache_ = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kHalf);
    at::autocast::increment_nesting();
    at::autocast::set_autocast_cache_enabled(cache);
  }
  ~Autocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, prev_enabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, prev_dtype_);
    at::autocast::set_autocast_cache_enabled(prev_cache_);
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool on_, prev_enabled_ = false, prev_cache_ = true;
  at::ScalarType prev_dtype_ = at::kHalf;
};

struct HostData {
  Tensor x, y, tx, ty;  // CPU: uint8 [n,784], int64 [n], test likewise
};

class Trainer {
 public:
  Trainer(const Options& o, bool graph, double dropout, const HostData& d, const std::vector<Layer>& init,
          const std::vector<int64_t>& order, const Schedule& sc)
      : o_(o), graph_(graph), B_(o.batch), sc_(sc), model_(o.layers, dropout) {
    x_ = d.x.to(torch::kCUDA);
    y_ = d.y.to(torch::kCUDA);
    tx_ = d.tx.to(torch::kCUDA);
    ty_ = d.ty.to(torch::kCUDA);
    order_ = torch::from_blob(const_cast<int64_t*>(order.data()), {static_cast<int64_t>(order.size())}, torch::kInt64)
                 .to(torch::kCUDA);
    model_->to(torch::kCUDA);
    {
      torch::NoGradGuard ng;
      for (size_t l = 0; l < init.size(); ++l) {
        const int64_t in = o.layers[l], out = o.layers[l + 1];
        Tensor W = torch::from_blob(const_cast<float*>(init[l].W.data()), {out, in}, torch::kFloat32).to(torch::kCUDA);
        Tensor b = torch::from_blob(const_cast<float*>(init[l].b.data()), {out}, torch::kFloat32).to(torch::kCUDA);
        model_->fc[l]->weight.copy_(W);
        model_->fc[l]->bias.copy_(b);
        init_.push_back(W);
        init_.push_back(b);
      }
    }
    params_ = model_->parameters();  // W0, b0, W1, b1, ...
    auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA);
    loss_buf_ = torch::full({sc.total}, NAN, f32);
    ctr_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt64).device(torch::kCUDA));
    arange_ = torch::arange(B_, torch::TensorOptions().dtype(torch::kInt64).device(torch::kCUDA));
    if (o.adam() && graph_) {
      for (const Tensor& p : params_) {
        m_.push_back(torch::zeros_like(p));
        v_.push_back(torch::zeros_like(p));
        steps_.push_back(torch::zeros({}, f32));
      }
    } else if (o.adam()) {
      opt_ = std::make_unique<torch::optim::Adam>(params_, torch::optim::AdamOptions(o.lr).betas({0.9, 0.999}).eps(1e-8));
    } else {
      opt_ = std::make_unique<torch::optim::SGD>(params_, torch::optim::SGDOptions(o.lr));
    }
    if (graph_) capture();
    reset();
  }

  // Initial parameters, zero optimizer state, step 0: in place (graph-safe).
  void reset() {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(init_[i]);
    for (auto& t : m_) t.zero_();
    for (auto& t : v_) t.zero_();
    for (auto& t : steps_) t.zero_();
    if (opt_) opt_->state().clear();  // torch::optim::Adam re-creates zero state at step 1
    loss_buf_.fill_(NAN);
    ctr_.zero_();
    model_->train();
  }

  void run_steps(int64_t s0, int64_t s1) {
    if (graph_) {
      for (int64_t s = s0; s < s1; ++s) graph_obj_.replay();
    } else {
      for (int64_t s = s0; s < s1; ++s) step(s);
    }
  }

  // Test loss and accuracy (%), dropout off, untimed.
  std::pair<double, double> evaluate() {
    torch::NoGradGuard ng;
    model_->eval();
    const int64_t n = tx_.size(0);
    double loss_sum = 0;
    int64_t correct = 0;
    for (int64_t c0 = 0; c0 < n; c0 += kEvalRows) {
      const int64_t c1 = std::min(n, c0 + kEvalRows);
      Tensor xb = tx_.slice(0, c0, c1).to(torch::kFloat32).div_(255.0);
      Tensor yb = ty_.slice(0, c0, c1);
      Tensor z;
      {
        Autocast ac(o_.fp16(), true);
        z = model_->forward(xb);
      }
      z = z.to(torch::kFloat32);
      loss_sum += torch::nn::functional::cross_entropy(
                      z, yb, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                      .item<double>();
      correct += (z.argmax(1) == yb).sum().item<int64_t>();
    }
    model_->train();
    return {loss_sum / n, 100.0 * static_cast<double>(correct) / n};
  }

  std::vector<float> losses(int64_t s0, int64_t s1) {
    Tensor l = loss_buf_.slice(0, s0, s1).cpu();
    return std::vector<float>(l.data_ptr<float>(), l.data_ptr<float>() + l.numel());
  }

  std::vector<float> params_host() { return flat_host(false); }
  // The gradients of the last step (eager: until the next zero_grad; graph: the static grads).
  std::vector<float> grads_host() { return flat_host(true); }

  double capture_ms = NAN;

 private:
  Tensor loss_fn(const Tensor& xb, const Tensor& yb) {
    Autocast ac(o_.fp16(), false);  // no weight-cast cache: required inside CUDA graphs
    return torch::nn::functional::cross_entropy(model_->forward(xb), yb);
  }

  void zero_grad() { model_->zero_grad(true); }

  std::vector<float> flat_host(bool grads) {
    std::vector<float> out;
    for (const Tensor& p : params_) {
      Tensor t = grads ? p.grad() : p;
      if (!t.defined()) t = torch::zeros_like(p);
      Tensor h = t.detach().to(torch::kFloat32).cpu().contiguous();
      out.insert(out.end(), h.data_ptr<float>(), h.data_ptr<float>() + h.numel());
    }
    return out;
  }

  void step(int64_t s) {
    Tensor idx = order_.slice(0, s * B_, (s + 1) * B_);
    Tensor xb = x_.index_select(0, idx).to(torch::kFloat32).div_(255.0);
    Tensor yb = y_.index_select(0, idx);
    zero_grad();
    Tensor loss = loss_fn(xb, yb);
    loss.backward();
    opt_->step();
    loss_buf_.select(0, s).copy_(loss.detach());
  }

  // torch.optim.Adam(capturable=True, foreach=True)'s update (torch/optim/adam.py,
  // _multi_tensor_adam, capturable branch), op for op; step counts live on the device.
  void adam_capturable_step() {
    torch::NoGradGuard ng;
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    std::vector<Tensor> grads;
    for (const Tensor& p : params_) grads.push_back(p.grad());
    at::_foreach_add_(steps_, 1);
    at::_foreach_lerp_(m_, grads, 1 - b1);
    at::_foreach_mul_(v_, b2);
    at::_foreach_addcmul_(v_, grads, grads, 1 - b2);
    std::vector<Tensor> bc1 = at::_foreach_pow(b1, steps_);
    std::vector<Tensor> bc2 = at::_foreach_pow(b2, steps_);
    at::_foreach_sub_(bc1, 1);
    at::_foreach_sub_(bc2, 1);
    at::_foreach_neg_(bc2);
    at::_foreach_div_(bc1, o_.lr);
    at::_foreach_reciprocal_(bc1);  // step size: -lr / (1 - b1^t)
    at::_foreach_sqrt_(bc2);        // sqrt(1 - b2^t)
    std::vector<Tensor> denom = at::_foreach_sqrt(v_);
    at::_foreach_div_(denom, at::_foreach_mul(bc2, bc1));
    std::vector<Tensor> eps_over_step = at::_foreach_div(bc1, eps);
    at::_foreach_reciprocal_(eps_over_step);
    at::_foreach_add_(denom, eps_over_step);
    at::_foreach_addcdiv_(params_, m_, denom);
  }

  // The graph's step: everything indexed by the device-side counter.
  void graph_step_body() {
    Tensor idx = order_.index_select(0, ctr_ * B_ + arange_);
    Tensor xb = x_.index_select(0, idx).to(torch::kFloat32).div_(255.0);
    Tensor yb = y_.index_select(0, idx);
    Tensor loss = loss_fn(xb, yb);
    loss.backward();
    if (opt_)
      opt_->step();
    else
      adam_capturable_step();
    loss_buf_.index_copy_(0, ctr_, loss.detach().to(torch::kFloat32).view({1}));
    ctr_.add_(1);
  }

  // torch.cuda.graph's recipe: 3 warm-up steps on a side stream, grads set to None, capture on a
  // pool stream (global capture mode); reset() afterwards restores the state the warm-up changed.
  void capture() {
    nb::HostTimer t;
    torch::cuda::synchronize();
    {
      c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
      for (int i = 0; i < 3; ++i) {
        zero_grad();
        graph_step_body();
      }
    }
    torch::cuda::synchronize();
    zero_grad();
    c10::cuda::CUDACachingAllocator::emptyCache();
    {
      c10::cuda::CUDAStreamGuard cap(c10::cuda::getStreamFromPool());
      graph_obj_.capture_begin();
      graph_step_body();
      graph_obj_.capture_end();
    }
    torch::cuda::synchronize();
    capture_ms = t.elapsed_ms();
  }

  const Options& o_;
  bool graph_;
  int64_t B_;
  Schedule sc_;
  Net model_;
  Tensor x_, y_, tx_, ty_, order_, loss_buf_, ctr_, arange_;
  std::vector<Tensor> params_, init_, m_, v_, steps_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  at::cuda::CUDAGraph graph_obj_;
};

// kValidateSteps steps of the recorded implementation (dropout 0) against the float64 reference on
// the same batches, as phases 4 and 5 validate (common/mlp/validate.h): each step's loss, gradients
// and parameter update, the reference re-anchored at the twin's parameters before every step, the
// tolerances derived from the shape and the precision (fp16 under autocast: 11-bit operands).
nlohmann::json validate(const Options& o, const std::string& impl, const HostData& d, const nb::Dataset& ds,
                        const std::vector<Layer>& init, const std::vector<int64_t>& order, const Schedule& sc, bool* ok) {
  std::printf("validate (%s, dropout 0):\n", impl.c_str());
  Trainer tr(o, impl == "graph", 0.0, d, init, order, sc);
  std::vector<double> p0;
  for (const Layer& l : init) {
    p0.insert(p0.end(), l.W.begin(), l.W.end());
    p0.insert(p0.end(), l.b.begin(), l.b.end());
  }
  const int B = o.batch;
  const int k = static_cast<int>(std::min<int64_t>(kValidateSteps, sc.total));
  const nb::mlp::ValidateSpec spec{o.layers, B, o.fp16(), o.adam(), o.lr};
  nb::mlp::ValidationResult v = nb::mlp::validate_steps(spec, p0, k, [&](int s) {
    nb::mlp::StepSeen seen;
    seen.x.resize(static_cast<size_t>(B) * 784);
    seen.labels.resize(B);
    for (int r = 0; r < B; ++r) {
      const int64_t img = order[static_cast<size_t>(s) * B + r];
      for (int j = 0; j < 784; ++j)
        seen.x[static_cast<size_t>(r) * 784 + j] =
            static_cast<float>(ds.train_images.pixels[static_cast<size_t>(img) * 784 + j]) / 255.0f;
      seen.labels[r] = ds.train_labels.labels[static_cast<size_t>(img)];
    }
    tr.run_steps(s, s + 1);
    seen.loss = static_cast<float>(tr.losses(s, s + 1)[0]);
    const std::vector<float> g = tr.grads_host(), p = tr.params_host();
    seen.grads.assign(g.begin(), g.end());
    seen.params.assign(p.begin(), p.end());
    return seen;
  });
  *ok = v.passed;
  std::printf("validate: %s\n", v.passed ? "PASS" : "FAIL");
  nlohmann::json out = v.to_json();
  out["reference"] = "float64 (common/reference.cpp), dropout off, same batches, re-anchored at the twin's parameters "
                     "before every step; the recorded implementation's own steps";
  out["steps"] = k;
  return out;
}

int body(int argc, char** argv) {
  Options o;
  nb::Cli cli("libtorch_mlp", "libtorch twin of mlp.py: the MNIST MLP trained from C++ on the GPU.");
  cli.add_int_list("--layers", &o.layers, "layer widths, first 784, last 10", 1, 1 << 16);
  cli.add_int("--batch", &o.batch, "batch size (<= training images)", 1, 1 << 20);
  cli.add_int("--epochs", &o.epochs, "epochs (ignored when --steps > 0)", 1, 100000);
  cli.add_int("--steps", &o.steps, "train this many batches instead of whole epochs (0 = use --epochs)", 0, int64_t{1} << 40);
  cli.add_double("--lr", &o.lr, "learning rate");
  cli.add_string("--optimizer", &o.optimizer, "optimizer", {"adam", "sgd"});
  cli.add_double("--dropout", &o.dropout, "dropout rate after each hidden ReLU, in [0, 1)", false, 0.0, 1.0);
  cli.add_string("--precision", &o.precision, "fp32, or fp16 through at::autocast (fp32 master weights)", {"fp32", "fp16"});
  cli.add_string("--dataset", &o.dataset, "data set", {"mnist", "fashion-mnist"});
  cli.add_string("--data", &o.data_dir, "folder with the four IDX .gz files (default data/<dataset>)");
  cli.add_string("--workload", &o.workload, "record workload: auto (adam + 784,128,64,10 -> mlp_w1, else mlp_w2)",
                 {"auto", "mlp_w1", "mlp_w2", "mlp_batch_sweep"});
  cli.add_string("--init", &o.init, "initial weights from phase4_mlp/phase5_batched --save-init DIR");
  cli.add_string("--order", &o.order, "batch order from --save-order FILE");
  cli.add_string("--impl", &o.impl, "eager|graph, comma-separated (one record each)");
  cli.add_common(&o.common);
  if (!cli.parse(argc, argv)) return 0;
  if (o.layers.size() < 2 || o.layers.front() != 784 || o.layers.back() != 10)
    throw Error(nb::kExitUsage, "--layers: must start at 784 and end at 10");
  if (!(o.dropout >= 0.0 && o.dropout < 1.0))
    throw Error(nb::kExitUsage, "--dropout: must be in [0, 1), got " + std::to_string(o.dropout));
  if (o.data_dir.empty()) o.data_dir = "data/" + o.dataset;
  if (o.workload == "auto") o.workload = (o.adam() && o.layers == std::vector<int>{784, 128, 64, 10}) ? "mlp_w1" : "mlp_w2";
  const std::vector<std::string> impls = nb::lt::impl_list(o.impl);
  nb::check_output_dir(o.common.out);

  // Everything that needs no GPU first (bad data, init, order: exit 4; bad flags: exit 2).
  nb::Dataset ds = nb::load_dataset(o.data_dir, o.dataset);
  const int64_t n_train = ds.train_images.count;
  const Schedule sc = schedule(n_train, o);
  std::vector<Layer> init;
  if (!o.init.empty()) init = load_init(o.init, o.layers);
  std::vector<int64_t> order;
  if (!o.order.empty()) order = load_order(o.order, n_train, o, sc);

  return nb::lt::torch_guarded([&]() -> int {
    nb::lt::require_cuda();
    nb::lt::no_tf32();
    if (o.common.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
    torch::manual_seed(o.common.seed);
    std::vector<std::string> own_inputs;
    if (init.empty()) {
      own_inputs.push_back("no --init: libtorch's own default initialisation (seeded), not the CUDA side's weights");
      Net m(o.layers, 0.0);
      for (auto& fc : m->fc) {
        Tensor W = fc->weight.detach().contiguous(), b = fc->bias.detach().contiguous();
        init.push_back({std::vector<float>(W.data_ptr<float>(), W.data_ptr<float>() + W.numel()),
                        std::vector<float>(b.data_ptr<float>(), b.data_ptr<float>() + b.numel())});
      }
    }
    if (order.empty()) {
      own_inputs.push_back("no --order: torch::randperm per epoch (seeded), not the CUDA side's order");
      auto g = at::make_generator<at::CPUGeneratorImpl>(o.common.seed);
      for (int e = 0; e < sc.epochs; ++e) {
        Tensor p = torch::randperm(n_train, g, torch::kInt64);
        order.insert(order.end(), p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + sc.spe * o.batch);
      }
      order.resize(static_cast<size_t>(sc.total * o.batch));
    }
    HostData hd;
    hd.x = torch::from_blob(ds.train_images.pixels.data(), {n_train, 784}, torch::kUInt8);
    std::vector<int64_t> ytr(ds.train_labels.labels.begin(), ds.train_labels.labels.end());
    std::vector<int64_t> yte(ds.test_labels.labels.begin(), ds.test_labels.labels.end());
    hd.y = torch::from_blob(ytr.data(), {n_train}, torch::kInt64);
    hd.tx = torch::from_blob(ds.test_images.pixels.data(), {static_cast<int64_t>(ds.test_images.count), 784}, torch::kUInt8);
    hd.ty = torch::from_blob(yte.data(), {static_cast<int64_t>(yte.size())}, torch::kInt64);

    int rc = 0;
    for (const std::string& impl : impls) {
      const std::string implementation = "libtorch-" + impl, tag = o.common.tag + "-" + impl;
      nlohmann::json rec = nb::new_record(kPhase, o.workload, implementation, cli);
      rec["config"]["impl"] = impl;
      rec["config"]["record_tag"] = tag;
      rec["config"]["workload"] = o.workload;
      rec["config"]["data"] = o.data_dir;
      const nb::DeviceInfo dev = nb::query_device();
      rec["device"] = nb::to_json(dev);
      rec["software"] = nb::lt::software_json(dev);
      for (auto& s : own_inputs) rec["notes"].push_back(s);
      if (o.fp16())
        rec["notes"].push_back("fp16: at::autocast (CUDA, float16) around forward and loss, weight-cast cache off in training; "
                               "fp32 master weights, no loss scaling");
      if (o.adam())
        rec["notes"].push_back(impl == "graph" ? "optimizer: Adam written with _foreach_ tensor ops, step counts on the device "
                                                 "(torch.optim.Adam capturable+foreach's update; torch::optim::Adam is not capturable)"
                                               : "optimizer: torch::optim::Adam (per-parameter loop, host step count)");
      else
        rec["notes"].push_back("optimizer: torch::optim::SGD");
      nb::lt::reset_peak_memory();
      Trainer tr(o, impl == "graph", o.dropout, hd, init, order, sc);
      for (int w = 0; w < o.common.warmup; ++w) {
        tr.run_steps(0, std::min<int64_t>(kWarmupSteps, sc.total));
        torch::cuda::synchronize();
        tr.reset();
      }
      std::vector<double> totals, per_epoch, epoch_loss, test_loss, test_acc;
      std::vector<float> step_losses;
      std::string diverged;
      for (int rep = 0; rep < o.common.repeats && diverged.empty(); ++rep) {
        tr.reset();
        per_epoch.clear(), epoch_loss.clear(), test_loss.clear(), test_acc.clear(), step_losses.clear();
        for (int e = 0; e < sc.epochs; ++e) {
          nb::throw_if_interrupted("training");
          const int64_t s0 = e * sc.spe, s1 = std::min(sc.total, (e + 1) * sc.spe);
          torch::cuda::synchronize();
          nb::lt::EventTimer timer;
          timer.start();
          tr.run_steps(s0, s1);
          per_epoch.push_back(timer.stop());
          std::vector<float> ls = tr.losses(s0, s1);  // the once-per-epoch read-back
          size_t bad = ls.size();
          for (size_t i = 0; i < ls.size() && bad == ls.size(); ++i)
            if (!std::isfinite(ls[i])) bad = i;
          if (bad < ls.size()) {
            diverged = "training diverged: non-finite loss at epoch " + std::to_string(e) + ", step " + std::to_string(bad) +
                       " (global step " + std::to_string(s0 + static_cast<int64_t>(bad)) + ")";
            step_losses.insert(step_losses.end(), ls.begin(), ls.begin() + static_cast<long>(bad) + 1);
            epoch_loss.push_back(NAN);
            break;
          }
          step_losses.insert(step_losses.end(), ls.begin(), ls.end());
          double sum = 0;
          for (float v : ls) sum += v;
          epoch_loss.push_back(sum / static_cast<double>(ls.size()));
          auto [tl, ta] = tr.evaluate();
          test_loss.push_back(tl);
          test_acc.push_back(ta);
          std::printf("[%s] epoch %d: %.1f ms  train loss %.4f  test loss %.4f  test acc %.2f%%\n", impl.c_str(), e,
                      per_epoch.back(), epoch_loss.back(), tl, ta);
          std::fflush(stdout);
        }
        double tot = 0;
        for (double v : per_epoch) tot += v;
        totals.push_back(tot);
      }
      const nb::Stats st = nb::summarize(totals);
      rec["timing"] = nb::timing_json(
          "cuda-events",
          "per epoch: every training step from C++ (batch gathered on the device from the order, forward, backward, "
          "optimizer step, loss into its device slot)" +
              std::string(impl == "graph" ? "; one CUDA-graph replay per step" : ""),
          "data loading and upload, model construction, graph capture, warm-up, the per-epoch loss read-back, evaluation",
          o.common.warmup, st, per_epoch);
      rec["timing"]["per_step_ms"] = {
          {"median", step_losses.empty() ? nlohmann::json(nullptr) : nb::finite_or_null(st.median / step_losses.size())}};
      if (impl == "graph") rec["timing"]["capture_ms"] = tr.capture_ms;
      rec["loss"] = {{"per_epoch", nb::finite_array(epoch_loss)},
                     {"test_per_epoch", nb::finite_array(test_loss)},
                     {"per_step", nb::per_step_json(step_losses)}};
      rec["metrics"] = {
          {"test_accuracy", test_acc.empty() ? nlohmann::json(nullptr) : nlohmann::json(test_acc.back())},
          {"test_accuracy_per_epoch", test_acc},
          {"train_loss", epoch_loss.empty() ? nlohmann::json(nullptr) : nb::finite_or_null(epoch_loss.back())},
          {"peak_device_memory_bytes", nb::lt::peak_memory_allocated()},
          {"samples_per_s", st.median > 0 ? nb::finite_or_null(step_losses.size() * o.batch / (st.median / 1e3))
                                          : nlohmann::json(nullptr)},
          {"steps", step_losses.size()},
          {"param_checksum", nb::float_checksum(tr.params_host())}};
      rec["kernels"] = nlohmann::json::array();
      rec["memcpy"] = nlohmann::json::array();
      rec["ranges"] = nlohmann::json::array();
      rec["trace_file"] = nullptr;
      bool ok = true;
      if (o.common.validate)
        rec["validation"] = validate(o, impl, hd, ds, init, order, sc, &ok);
      else
        rec["validation"] = {{"performed", false}, {"passed", nullptr}, {"errors", nlohmann::json::object()},
                             {"tolerances", nlohmann::json::object()}};
      if (!diverged.empty()) {
        rec["status"] = "diverged";
        rec["notes"].push_back(diverged);
      } else if (!ok) {
        rec["status"] = "validation_failed";
      }
      const std::string problem = nb::validate_record(rec);
      if (!problem.empty()) throw Error(nb::kExitInternal, "refusing to write an invalid record: " + problem);
      const std::string path = nb::write_record(rec, o.common.out, dev.slug, kPhase, tag);
      std::printf("%s %s: epoch median %.1f ms (%d runs x %d epochs)%s, test acc %.2f%% -> %s\n", kPhase,
                  implementation.c_str(), st.median / std::max(1, sc.epochs), o.common.repeats, sc.epochs,
                  impl == "graph" ? (", capture " + std::to_string(tr.capture_ms) + " ms").c_str() : "",
                  test_acc.empty() ? NAN : test_acc.back(), path.c_str());
      std::fflush(stdout);
      if (!diverged.empty()) throw Error(nb::kExitDiverged, diverged + "; record: " + path);
      if (!ok && rc == 0) rc = nb::kExitValidation;
    }
    if (rc) std::fprintf(stderr, "error: validation failed (see the records)\n");
    return rc;
  });
}

}  // namespace

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, body); }
