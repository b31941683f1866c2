// phase5_batched/trainer.cuh — phase 5's trainer: the device state of one run (parameters, optimizer
// state, the data set as bytes, the epoch's order) and the launches of every path: the CUDA graph of
// fused kernels (own GEMMs or cuBLASLt, PDL, fused or paired backward), the persistent rung
// (5c_persistent.h) and the cluster rung (5d_cluster.h). main.cu drives it: validation, the timed epochs,
// the record.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "check.cuh"
#include "cli.h"
#include "device_info.h"
#include "errors.h"
#include "idx.h"
#include "5b_fused_backward.cuh"
#include "5a_graph_step.cuh"
#include "lt.h"
#include "5c_persistent.h"
#include "5d_cluster.h"
#include "5e_pipelined.h"
#include "5f_cluster32.h"
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

// Phase 5's launch modes (--launch): one rung each. The one dispatch point is Trainer::run_epoch.
//   Graph       5a/5b: every step's kernels (fused epilogues, PDL, the fused backward) in a CUDA graph
//   Persistent  5c: one cooperative kernel runs a whole epoch of steps (5c_persistent.cuh)
//   Cluster     5d: one thread-block cluster runs a whole epoch, activations in DSMEM (5d_cluster.cuh)
//   Pipelined   5e: 5c's kernel with fewer dependent phases a step (5e_pipelined.cuh)
//   Cluster32   5f: the fp32 model in one 16-block cluster, its wide layer on tensor cores (5f_cluster32.cuh)
enum class Launch { Graph, Persistent, Cluster, Pipelined, Cluster32 };
inline Launch parse_launch(const std::string& s) {
  return s == "persistent"  ? Launch::Persistent
         : s == "cluster"   ? Launch::Cluster
         : s == "pipelined" ? Launch::Pipelined
         : s == "cluster32" ? Launch::Cluster32
                            : Launch::Graph;
}
inline const char* launch_name(Launch l) {
  switch (l) {
    case Launch::Persistent: return "persistent";
    case Launch::Cluster: return "cluster";
    case Launch::Pipelined: return "pipelined";
    case Launch::Cluster32: return "cluster32";
    case Launch::Graph: break;
  }
  return "graph";
}

constexpr int kEvalRows = 2048;  // a multiple of kBM: tile indices of the eval arrays stay global

// Which GEMM rung computes the own path's fp32 products (--fp32-gemm): per product, step 5 of the
// ladder (3xTF32 on tensor cores, common/mlp/gemm/5_tf32x3.cuh) where it pays, the 32 x 64 SIMT
// tile elsewhere (auto); or one of them for every product.
enum class Fp32Gemm { Auto, Tile, TF32x3 };
inline Fp32Gemm parse_fp32_gemm(const std::string& s) {
  return s == "tile" ? Fp32Gemm::Tile : s == "tf32x3" ? Fp32Gemm::TF32x3 : Fp32Gemm::Auto;
}
inline const char* fp32_gemm_name(Fp32Gemm g) {
  return g == Fp32Gemm::Tile ? "tile" : g == Fp32Gemm::TF32x3 ? "tf32x3" : "auto";
}
// auto's rule: 3xTF32 for products of at least kX3MinRows output rows, kX3MinMacs multiply-adds
// and kX3MinTiles of its 64 x 64 tiles; the 32 x 64 SIMT tile elsewhere. (Measured with the GEMM
// benchmark, scripts/bench_gemm.sh: below that the SIMT tile's smaller blocks fill more SMs, and a
// product with few 64 x 64 tiles, like W1's 64 x 128 weight gradient, needs 16 K slices to fill
// the GPU and their fix-up costs more than the tensor cores save.)
constexpr int kX3MinRows = 64;
constexpr double kX3MinMacs = 32.0 * 1024 * 1024;
constexpr int kX3MinTiles = 16;
inline bool use_tf32x3(Fp32Gemm choice, int M, int N, int K) {
  if (choice != Fp32Gemm::Auto) return choice == Fp32Gemm::TF32x3;
  const int tiles = ((M + kXBM - 1) / kXBM) * ((N + kXBN - 1) / kXBN);
  return M >= kX3MinRows && static_cast<double>(M) * N * K >= kX3MinMacs && tiles >= kX3MinTiles;
}

template <class T>
class Trainer {
 public:
  Trainer(const MlpOptions& o, const Schedule& sc, const DeviceInfo& dev, const Dataset& ds, const HostParams& init,
          Fp32Gemm fp32_gemm = Fp32Gemm::Auto)
      : o_(o), sc_(sc), dev_(dev), ds_(ds), init_(init), L_(o.nlayers()), B_(o.batch), cublas_(o.gemm == "cublas"),
        launch_(parse_launch(o.launch)), fp32_gemm_(fp32_gemm) {
    const auto& w = o.layers;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking));
    // Parameters: one flat fp32 buffer W0, b0, W1, b1, ... (the cuBLASLt path's optimizer is one launch).
    // Each tensor starts at a multiple of 8 elements: 16-byte (fp32) / 8-byte (fp16) vector access.
    size_t off = 0;
    auto round8 = [](size_t x) { return (x + 7) / 8 * 8; };
    for (int l = 0; l < L_; ++l) {
      woff_.push_back(off), off = round8(off + static_cast<size_t>(w[l + 1]) * w[l]);
      boff_.push_back(off), off = round8(off + static_cast<size_t>(w[l + 1]));
    }
    nparams_ = off;
    params_.alloc(nparams_);
    if (o.adam()) {
      adam_m_.alloc(nparams_), adam_v_.alloc(nparams_);
      // Adam's constants for every step t = 1 .. total_steps, formed on the host like phase 4's.
      std::vector<AdamHyper> hy(static_cast<size_t>(sc.total_steps) + 1);
      for (size_t t = 1; t < hy.size(); ++t) hy[t] = adam_hyper(o.lr, static_cast<int64_t>(t));
      hyper_.alloc(hy.size());
      hyper_.upload(hy.data(), hy.size());
    }
    if (kHalf) params16_.alloc(nparams_);
    if (cublas_) {  // zeroed: the alignment gaps between tensors are read (never written) by the flat update
      grads_.alloc(nparams_);
      CUDA_CHECK(cudaMemset(grads_.get(), 0, grads_.bytes()));
    }
    // Data, resident as bytes.
    train_x_.alloc(ds.train_images.pixels.size());
    train_x_.upload(ds.train_images.pixels.data(), ds.train_images.pixels.size());
    train_y_.alloc(ds.train_labels.labels.size());
    train_y_.upload(ds.train_labels.labels.data(), ds.train_labels.labels.size());
    test_x_.alloc(ds.test_images.pixels.size());
    test_x_.upload(ds.test_images.pixels.data(), ds.test_images.pixels.size());
    test_y_.alloc(ds.test_labels.labels.size());
    test_y_.upload(ds.test_labels.labels.data(), ds.test_labels.labels.size());
    perm_.alloc(sc.n_train);
    base_.alloc(1);
    // Activations and gradients: H_[l] is the output of layer l (input of layer l+1), dZ_[l] the
    // gradient at layer l's output.
    for (int l = 0; l + 1 < L_; ++l) H_.emplace_back(static_cast<size_t>(B_) * w[l + 1]);
    for (int l = 0; l < L_; ++l) dZ_.emplace_back(static_cast<size_t>(B_) * w[l + 1]);
    step_loss_.alloc(sc.total_steps);
    tile_loss_.alloc((B_ + kBM - 1) / kBM);
    loss_counter_.alloc(1);
    bad_step_.alloc(1);
    CUDA_CHECK(cudaMemset(loss_counter_.get(), 0, sizeof(unsigned)));
    // Evaluation buffers.
    const int n_test = static_cast<int>(ds.test_images.count);
    eval_rows_ = std::min(kEvalRows, n_test);
    for (int l = 0; l + 1 < L_; ++l) Heval_.emplace_back(static_cast<size_t>(eval_rows_) * w[l + 1]);
    eval_tiles_ = (n_test + kBM - 1) / kBM;
    eval_correct_.alloc(eval_tiles_);
    eval_loss_.alloc(eval_tiles_);
    if (cublas_) {
      int maxw = 0;
      for (int x : w) maxw = std::max(maxw, x);
      X_.alloc(static_cast<size_t>(B_) * w[0]);
      Z_.alloc(static_cast<size_t>(B_) * maxw);
      lt_ = std::make_unique<LtHandle>();
      for (int l = 0; l < L_; ++l) {
        lt_layers_.push_back(std::make_unique<LtLayer>());
        lt_layers_.back()->template plan<T>(*lt_, B_, w[l], w[l + 1], l > 0);
      }
    }
    size_ws();
    if (launch_ == Launch::Persistent || launch_ == Launch::Pipelined || launch_ == Launch::Cluster32) plan_persistent_kernel();
    if (launch_ == Launch::Cluster) plan_cluster_kernel();
    plan_fused_backward();
    pdl_ = o_.pdl == "on" && !cublas_ && launch_ == Launch::Graph && dev_.cc_major >= 9;  // PDL is Hopper's
    reset();
  }
  ~Trainer() {
    for (auto& g : graphs_) cudaGraphExecDestroy(g.second);
    cudaStreamDestroy(st_);
  }

  cudaStream_t stream() const { return st_; }
  size_t nparams() const { return nparams_; }

  void reset() {
    std::vector<float> flat(nparams_);
    for (int l = 0; l < L_; ++l) {
      std::copy(init_.W[l].begin(), init_.W[l].end(), flat.begin() + woff_[l]);
      std::copy(init_.b[l].begin(), init_.b[l].end(), flat.begin() + boff_[l]);
    }
    // Everything on the trainer's (non-blocking) stream: plain cudaMemset/cudaMemcpy would run on
    // the legacy default stream, which does not order with it.
    const unsigned long long none = ~0ull;
    CUDA_CHECK(cudaMemcpyAsync(params_.get(), flat.data(), flat.size() * sizeof(float), cudaMemcpyHostToDevice, st_));
    CUDA_CHECK(cudaMemcpyAsync(bad_step_.get(), &none, sizeof none, cudaMemcpyHostToDevice, st_));
    if (o_.adam()) {
      CUDA_CHECK(cudaMemsetAsync(adam_m_.get(), 0, adam_m_.bytes(), st_));
      CUDA_CHECK(cudaMemsetAsync(adam_v_.get(), 0, adam_v_.bytes(), st_));
    }
    if (kHalf) {
      to_half_kernel<<<ew_blocks(nparams_), 256, 0, st_>>>(params_.get(), params16_.get(), nparams_);
      CHECK_LAUNCH();
    }
    CUDA_CHECK(cudaDeviceSynchronize());  // also covers the constructor's default-stream memsets
  }

  // Writes step base and the permutation of the epoch that `first_step` belongs to.
  void launch_epoch_permutation(int64_t first_step) {
    const int64_t e = first_step / sc_.steps_per_epoch;
    const int n = static_cast<int>(sc_.n_train);
    epoch_begin_kernel<<<(n + 255) / 256, 256, 0, st_>>>(perm_.get(), n,
                                                         make_perm(o_.common.seed, static_cast<uint64_t>(e), n),
                                                         base_.get(), first_step);
    CHECK_LAUNCH();
  }

  // Enqueues the kernels of step base + i on the stream (captured into the graphs, or run directly).
  void enqueue_step(int i, std::map<std::string, KernelCost>* costs) {
    const StepRef sr{base_.get(), i};
    if (cublas_) enqueue_step_cublas(sr, costs);
    else enqueue_step_own(sr, costs);
  }

  // Captures the graph of `count` consecutive steps (once per count).
  void capture(int count) {
    cudaGraphExec_t& g = graphs_[count];
    if (g) return;
    cudaGraph_t graph{};
    std::map<std::string, KernelCost> costs;
    CUDA_CHECK(cudaStreamBeginCapture(st_, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < count; ++i) enqueue_step(i, &costs);
    CUDA_CHECK(cudaStreamEndCapture(st_, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&g, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    if (costs_per_step_.empty())
      for (auto& [k, c] : costs) costs_per_step_[k] = KernelCost{c.flops / count, c.bytes / count, c.calls / count};
  }

  // Runs steps [first, first + count) (all inside first's epoch): permutation kernel + graph replay.
  void run_graph(int64_t first, int count) {
    capture(count);
    launch_epoch_permutation(first);
    CUDA_CHECK(cudaGraphLaunch(graphs_[count], st_));
  }

  // A one-launch kernel's parameters for steps [first, first + count) (PersistParams, ClusterParams).
  template <class Params>
  Params launch_params(Params p, int64_t first, int count) const {
    p.s0 = first, p.i0 = static_cast<int>(first % sc_.steps_per_epoch), p.count = count;
    p.G = grads_debug_.size() ? grads_debug_.get() : nullptr;
    p.breakdown = breakdown_.size() ? breakdown_.get() : nullptr;
    return p;
  }
  // --launch persistent: permutation kernel + one cooperative launch for steps [first, first + count).
  void run_persistent(int64_t first, int count) {
    launch_epoch_permutation(first);
    persistent_rung_launch(persist_plan_, launch_params(persist_params_, first, count), st_);
  }
  // --launch pipelined: the same, rung 5e's kernel.
  void run_pipelined(int64_t first, int count) {
    launch_epoch_permutation(first);
    pipelined_rung_launch(persist_plan_, launch_params(persist_params_, first, count), st_);
  }
  // --launch cluster32: the same parameters, rung 5f's cluster kernel.
  void run_cluster32(int64_t first, int count) {
    launch_epoch_permutation(first);
    cluster32_rung_launch(persist_plan_, launch_params(persist_params_, first, count), st_);
  }
  // --launch cluster: permutation kernel + one cluster launch for steps [first, first + count).
  void run_cluster(int64_t first, int count) {
    launch_epoch_permutation(first);
    cluster_rung_launch(cluster_plan_, launch_params(cluster_params_, first, count), st_);
  }

  // The timed unit: steps [first, first + count) of one epoch, in the configured launch mode.
  void run_epoch(int64_t first, int count) {
    switch (launch_) {
      case Launch::Persistent: return run_persistent(first, count);
      case Launch::Pipelined: return run_pipelined(first, count);
      case Launch::Cluster32: return run_cluster32(first, count);
      case Launch::Cluster: return run_cluster(first, count);
      case Launch::Graph: return run_graph(first, count);
    }
  }
  // Before timing: capture the graphs (graph mode) for a full epoch and a shorter last one.
  void prepare(int full, int rem) {
    if (launch_ != Launch::Graph) return;
    capture(full);
    if (rem > 0 && rem != full) capture(rem);
  }
  // One step k (< steps per epoch) of the first epoch, on its own (validation, first-call work).
  void single_step(int k) {
    if (launch_ != Launch::Graph) return run_epoch(k, 1);
    launch_epoch_permutation(0);
    enqueue_step(k, nullptr);
  }
  Launch launch() const { return launch_; }
  // The own graph step's GEMM plan: every product of a training step with its shape, the rung that
  // computes it and its K slices (empty on the other paths). Printed at the start, kept in the record.
  nlohmann::json gemm_plan() const {
    nlohmann::json out = nlohmann::json::array();
    if (cublas_ || launch_ != Launch::Graph || fused_bwd_) return out;
    const StepRef sr{nullptr, 0};
    auto add = [&](const std::string& name, const auto& p) {
      const char* rung = p.rung == GemmRung::TF32x3 ? "tf32x3" : kHalf ? "tile-wmma" : "tile-simt";
      out.push_back({{"product", name}, {"M", p.M}, {"N", p.N}, {"K", p.K}, {"rung", rung}, {"splits", p.splits}});
    };
    const auto& w = o_.layers;
    FwdFirst f;
    f.M = B_, f.N = w[1], f.K = w[0];
    plan_splitk_into_slot(f, 0);
    add("forward 0", f);
    for (int l = 1; l + 1 < L_; ++l) add("forward " + std::to_string(l), fwd_hidden(l, sr));
    if (L_ > 1) add("forward " + std::to_string(L_ - 1), fwd_last(sr));
    for (int l = L_ - 1; l >= 1; --l) add("backward-data " + std::to_string(l), bwd_data(l, 0));
    for (int l = L_ - 1; l >= 1; --l) add("weight-gradient " + std::to_string(l), update(l, sr, 0));
    add("weight-gradient 0", update0(sr, 1));
    return out;
  }

  bool one_launch() const { return launch_ != Launch::Graph; }  // one kernel launch an epoch
  const ClusterPlan& cluster_plan() const { return cluster_plan_; }
  bool fused_backward() const { return fused_bwd_; }
  bool pdl() const { return pdl_; }
  // --breakdown: per-part cycles of block 0 (summed over the steps run since the last call).
  static_assert(kPersistSegments == kClSegments && kPipeSegments <= kPersistSegments && kC32Segments <= kPersistSegments,
                "one breakdown buffer serves the one-launch kernels");
  void start_breakdown() {
    breakdown_.alloc(kPersistSegments);
    CUDA_CHECK(cudaMemsetAsync(breakdown_.get(), 0, breakdown_.bytes(), st_));
  }
  std::vector<unsigned long long> take_breakdown() {
    CUDA_CHECK(cudaStreamSynchronize(st_));
    std::vector<unsigned long long> h = breakdown_.download();
    breakdown_.release();
    return h;
  }
  const PersistPlan& persist_plan() const { return persist_plan_; }
  bool pipelined_fuses_first_layer() const { return nb::mlp::pipelined_fuses_first_layer(persist_params_, persist_plan_); }

  // Flops, compulsory bytes and launches per step, per kernel tag (counted while capturing).
  const std::map<std::string, KernelCost>& costs_per_step() const { return costs_per_step_; }

  std::vector<float> losses(int64_t first, int64_t count) const {
    std::vector<float> h(static_cast<size_t>(count));
    CUDA_CHECK(cudaStreamSynchronize(st_));
    CUDA_CHECK(cudaMemcpy(h.data(), step_loss_.get() + first, count * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
  int64_t bad_step() const {
    unsigned long long b = 0;
    CUDA_CHECK(cudaStreamSynchronize(st_));
    CUDA_CHECK(cudaMemcpy(&b, bad_step_.get(), sizeof b, cudaMemcpyDeviceToHost));
    return b == ~0ull ? -1 : static_cast<int64_t>(b);
  }

  void evaluate(double* loss, double* acc) {
    const int n = static_cast<int>(ds_.test_images.count);
    for (int c0 = 0; c0 < n; c0 += eval_rows_) {
      const int rows = std::min(eval_rows_, n - c0);
      for (int l = 0; l < L_; ++l) enqueue_eval_layer(l, c0, rows);
    }
    std::vector<int> ok(eval_tiles_);
    std::vector<float> ls(eval_tiles_);
    CUDA_CHECK(cudaMemcpyAsync(ok.data(), eval_correct_.get(), ok.size() * sizeof(int), cudaMemcpyDeviceToHost, st_));
    CUDA_CHECK(cudaMemcpyAsync(ls.data(), eval_loss_.get(), ls.size() * sizeof(float), cudaMemcpyDeviceToHost, st_));
    CUDA_CHECK(cudaStreamSynchronize(st_));
    double s = 0;
    int64_t c = 0;
    for (int i = 0; i < eval_tiles_; ++i) s += ls[i], c += ok[i];
    *loss = s / n;
    *acc = 100.0 * static_cast<double>(c) / n;
  }

  // Parameters / gradients in the reference's order (W0, b0, W1, b1, ...; no alignment gaps).
  std::vector<double> params() const { return in_reference_order(params_); }
  std::vector<double> grads() const { return in_reference_order(cublas_ ? grads_ : grads_debug_); }
  // Validation: the fused update also stores the gradients it applies (never in timed runs).
  void keep_gradients(bool on) {
    if (cublas_) return;  // the cuBLASLt path stores them anyway (grads_)
    if (on && !grads_debug_.size()) grads_debug_.alloc(nparams_);
    if (!on) grads_debug_.release();
  }
  const std::vector<size_t>& woff() const { return woff_; }
  const std::vector<size_t>& boff() const { return boff_; }

 private:
  static constexpr bool kHalf = std::is_same<T, __half>::value;
  using WView = MatView<T, false>;  // B(k, n) = W[n][k] (forward)
  using FwdFirst = GemmProblem<GatherView<T>, WView, FwdHiddenEpi<T>>;
  using FwdFirstLast = GemmProblem<GatherView<T>, WView, SoftmaxCEEpi<T>>;
  using FwdHidden = GemmProblem<MatView<T, true>, WView, FwdHiddenEpi<T>>;
  using FwdLast = GemmProblem<MatView<T, true>, WView, SoftmaxCEEpi<T>>;
  using BwdDataGemm = GemmProblem<MatView<T, true>, MatView<T, true>, BwdReluEpi<T>>;
  using UpdateGemm = GemmProblem<MatView<T, false>, MatView<T, true>, UpdateEpi<T>>;
  using UpdateFirstGemm = GemmProblem<MatView<T, false>, GatherView<T>, UpdateEpi<T>>;
  using EvalFirstLast = GemmProblem<GatherView<T>, WView, EvalEpi>;
  using EvalLast = GemmProblem<MatView<T, true>, WView, EvalEpi>;

  const T* weights(int l) const {
    if constexpr (kHalf) return params16_.get() + woff_[l];
    else return params_.get() + woff_[l];
  }
  RowMap train_rows(const StepRef& sr) const {
    RowMap r;
    r.perm = perm_.get(), r.i = sr.i, r.batch = B_;
    return r;
  }
  GatherView<T> train_view(const StepRef& sr) const {
    GatherView<T> g;
    g.data = train_x_.get(), g.ld = o_.layers[0], g.rows = train_rows(sr);
    return g;
  }
  FwdHiddenEpi<T> hidden_epi(int l, T* out, const StepRef& sr, bool dropout) const {
    FwdHiddenEpi<T> e;
    e.bias = params_.get() + boff_[l], e.out = out;
    e.dropout = dropout && o_.dropout > 0;
    e.key = dropout_key(o_.common.seed), e.layer = static_cast<uint32_t>(l);
    e.threshold = dropout_threshold(o_.dropout);
    e.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
    e.step = sr;
    return e;
  }
  SoftmaxCEEpi<T> loss_epi(const StepRef& sr) const {
    SoftmaxCEEpi<T> e;
    e.bias = params_.get() + boff_[L_ - 1], e.labels = train_y_.get(), e.rows = train_rows(sr);
    e.dz = dZ_[L_ - 1].get(), e.tile_loss = tile_loss_.get(), e.counter = loss_counter_.get();
    e.step_loss = step_loss_.get(), e.bad_step = bad_step_.get(), e.step = sr;
    return e;
  }
  UpdateEpi<T> update_epi(int l, const StepRef& sr) const {
    UpdateEpi<T> e;
    e.W = params_.get() + woff_[l], e.b = params_.get() + boff_[l];
    if (o_.adam()) {
      e.mW = adam_m_.get() + woff_[l], e.vW = adam_v_.get() + woff_[l], e.mb = adam_m_.get() + boff_[l], e.vb = adam_v_.get() + boff_[l];
    }
    if (kHalf) e.W16 = params16_.get() + woff_[l];
    e.dz = dZ_[l].get(), e.batch = B_, e.adam = o_.adam(), e.lr = static_cast<float>(o_.lr), e.step = sr;
    if (o_.adam()) e.hyper = hyper_.get(), e.hyper_n = static_cast<int64_t>(hyper_.size());
    if (grads_debug_.size()) e.grad_out = grads_debug_.get() + woff_[l], e.bgrad_out = grads_debug_.get() + boff_[l];
    return e;
  }
  // The fused backward pass of layer l (fp16 runs): its update and, for l > 0, dZ_[l-1].
  FusedBwdParams fused_params(int l, const StepRef& sr) const {
    FusedBwdParams p;
    if constexpr (kHalf) {
      const UpdateEpi<T> e = update_epi(l, sr);
      p.M = o_.layers[l + 1], p.N = o_.layers[l], p.B = B_;
      p.W = e.W, p.W16 = e.W16, p.mW = e.mW, p.vW = e.vW, p.b = e.b, p.mb = e.mb, p.vb = e.vb;
      p.grad_out = e.grad_out, p.bgrad_out = e.bgrad_out;
      p.adam = e.adam, p.lr = e.lr, p.step = sr, p.hyper = e.hyper, p.hyper_n = e.hyper_n;
      p.dz = dZ_[l].get();
      if (l == 0) {
        p.xdata = train_x_.get(), p.rows = train_rows(sr);
      } else {
        p.h = H_[l - 1].get(), p.dz_prev = dZ_[l - 1].get();
        p.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
      }
      plan_fused_bwd(p, dev_.sm_count);
      p.ws = fb_ws_.get(), p.counters = fb_counters_.get();
    }
    return p;
  }
  // Whether the fused backward pass runs (fp16 own kernels, batch <= 32, every width a multiple
  // of 8; --backward fused, or auto with SGD); sizes its workspace.
  void plan_fused_backward() {
    fused_bwd_ = false;
    if constexpr (kHalf) {
      // auto: SGD only. The fused kernel reads Adam's moments with plain loads in its optimizer
      // pass, a serial round trip per 32-row sub-tile, and W1 (Adam, small layers, grids of 1-52
      // blocks) ran slower with it: 62.2 against 54.5 us a step (H100, dev runs at 340c0c2).
      if (cublas_ || launch_ == Launch::Persistent || launch_ == Launch::Pipelined || launch_ == Launch::Cluster32 ||
          o_.backward == "paired")
        return;
      if (o_.backward == "auto" && o_.adam()) return;
      for (int l = 0; l < L_; ++l)
        if (!fused_bwd_supported(o_.layers[l], B_)) return;
      fused_bwd_setup<p5_fused_update_bwd>();
      fused_bwd_setup<p5_fused_update_first>();
      size_t ws = 1, tiles = 1;
      for (int l = 0; l < L_; ++l) {
        const FusedBwdParams p = fused_params(l, StepRef{nullptr, 0});
        ws = std::max(ws, fused_bwd_ws_floats(p));
        tiles = std::max(tiles, static_cast<size_t>(p.tiles_n()));
      }
      fb_ws_.alloc(ws);
      fb_counters_.alloc(tiles);
      CUDA_CHECK(cudaMemset(fb_counters_.get(), 0, fb_counters_.bytes()));
      fused_bwd_ = true;
    }
  }
  // Plans a product's split-K and points it at workspace slot `slot`. size_ws() sized the slots
  // for every product shape; a shape it missed would write past the workspace (as the last,
  // shorter evaluation chunk did at h = 2048 on the cuBLASLt path before size_ws counted it), so
  // refuse it here instead (exit 9).
  template <class P>
  void plan_splitk_into_slot(P& p, int slot) const {
    p.ws = ws_[slot].get(), p.counters = counters_[slot].get();
    plan_splits_p5(p, dev_.sm_count);
    if constexpr (!kHalf)
      if (use_tf32x3(fp32_gemm_, p.M, p.N, p.K)) plan_tf32x3(p, dev_.sm_count);
    if (ws_[slot].size() == 0) return;  // size_ws() has not run yet (it plans shapes through here)
    if (ws_floats(p) > ws_[slot].size() || (p.splits > 1 && static_cast<size_t>(p.tiles()) > counters_[slot].size()))
      throw Error(kExitInternal, "split-K workspace " + std::to_string(slot) + " too small for a " + std::to_string(p.M) +
                                     " x " + std::to_string(p.N) + " x " + std::to_string(p.K) + " product in " +
                                     std::to_string(p.splits) + " splits (internal error: size_ws missed its shape)");
  }
  template <class P>
  void add_cost(std::map<std::string, KernelCost>* costs, const std::string& tag, const P& p, double extra_bytes,
                bool count_call) const {
    if (!costs) return;
    KernelCost& c = (*costs)[tag];
    c.flops += 2.0 * p.M * p.N * p.K;
    c.bytes += (static_cast<double>(p.M) * p.K + static_cast<double>(p.K) * p.N) * sizeof(T) + extra_bytes;
    if (count_call) c.calls += 1;
  }

  // ----- own fused kernels
  FwdHidden fwd_hidden(int l, const StepRef& sr) const {
    FwdHidden p;
    p.M = B_, p.N = o_.layers[l + 1], p.K = o_.layers[l];
    p.a = make_view<T, true>(H_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K);
    p.epi = hidden_epi(l, H_[l].get(), sr, true);
    plan_splitk_into_slot(p, 0);
    return p;
  }
  FwdLast fwd_last(const StepRef& sr) const {
    const int l = L_ - 1;
    FwdLast p;
    p.M = B_, p.N = o_.layers[l + 1], p.K = o_.layers[l];
    p.a = make_view<T, true>(H_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K);
    p.epi = loss_epi(sr);
    plan_splitk_into_slot(p, 0);
    return p;
  }
  BwdDataGemm bwd_data(int l, int slot) const {  // dZ_[l-1] = relu'(dZ_[l] · W_l)
    BwdDataGemm p;
    p.M = B_, p.N = o_.layers[l], p.K = o_.layers[l + 1];
    p.a = make_view<T, true>(dZ_[l].get(), p.K), p.b = make_view<T, true>(weights(l), p.N);
    p.epi.h = H_[l - 1].get(), p.epi.dz = dZ_[l - 1].get();
    p.epi.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
    plan_splitk_into_slot(p, slot);
    return p;
  }
  UpdateGemm update(int l, const StepRef& sr, int slot) const {  // W_l -= f(dZ_[l]^T · H_[l-1])
    UpdateGemm p;
    p.M = o_.layers[l + 1], p.N = o_.layers[l], p.K = B_;
    p.a = make_view<T, false>(dZ_[l].get(), p.M), p.b = make_view<T, true>(H_[l - 1].get(), p.N);
    p.epi = update_epi(l, sr);
    plan_splitk_into_slot(p, slot);
    return p;
  }
  UpdateFirstGemm update0(const StepRef& sr, int slot) const {
    UpdateFirstGemm p;
    p.M = o_.layers[1], p.N = o_.layers[0], p.K = B_;
    p.a = make_view<T, false>(dZ_[0].get(), p.M), p.b = train_view(sr);
    p.epi = update_epi(0, sr);
    plan_splitk_into_slot(p, slot);
    return p;
  }
  double update_bytes(int l) const {  // master r/w (+ Adam m, v r/w) (+ fp16 copy write), bias alike
    const double n = static_cast<double>(o_.layers[l + 1]) * (o_.layers[l] + 1);
    return n * (8.0 + (o_.adam() ? 16.0 : 0.0) + (kHalf ? 2.0 : 0.0));
  }

  template <class P1, class P2>
  static bool split_pair(const P1& a, const P2& b) {  // launch_gemm_pair runs them as two launches
    return a.rung != GemmRung::Tile || b.rung != GemmRung::Tile;
  }
  void enqueue_step_own(const StepRef& sr, std::map<std::string, KernelCost>* costs) {
    const auto& w = o_.layers;
    const double ob = sizeof(T);
    // Forward.
    if (L_ == 1) {
      FwdFirstLast p;
      p.M = B_, p.N = w[1], p.K = w[0];
      p.a = train_view(sr), p.b = make_view<T, false>(weights(0), p.K), p.epi = loss_epi(sr);
      plan_splitk_into_slot(p, 0);
      launch_gemm<p5_fwd_softmax_ce, T>(p, st_, pdl_);
      add_cost(costs, "p5_fwd_softmax_ce", p, B_ * w[1] * ob, true);
    } else {
      FwdFirst p;
      p.M = B_, p.N = w[1], p.K = w[0];
      p.a = train_view(sr), p.b = make_view<T, false>(weights(0), p.K), p.epi = hidden_epi(0, H_[0].get(), sr, true);
      plan_splitk_into_slot(p, 0);
      launch_gemm<p5_fwd_gather, T>(p, st_, pdl_);
      add_cost(costs, "p5_fwd_gather", p, static_cast<double>(B_) * w[1] * ob, true);
      for (int l = 1; l + 1 < L_; ++l) {
        auto q = fwd_hidden(l, sr);
        launch_gemm<p5_fwd_hidden, T>(q, st_, pdl_);
        add_cost(costs, "p5_fwd_hidden", q, static_cast<double>(B_) * w[l + 1] * ob, true);
      }
      auto q = fwd_last(sr);
      launch_gemm<p5_fwd_softmax_ce, T>(q, st_, pdl_);
      add_cost(costs, "p5_fwd_softmax_ce", q, static_cast<double>(B_) * w[L_] * ob, true);
    }
    if (fused_bwd_) {  // fp16, batch <= 32: one pass over each layer's weights (5b_fused_backward.cuh)
      for (int l = L_ - 1; l >= 0; --l) {
        const FusedBwdParams p = fused_params(l, sr);
        if (l > 0) launch_fused_bwd<p5_fused_update_bwd>(p, st_, pdl_);
        else launch_fused_bwd<p5_fused_update_first>(p, st_, pdl_);
        if (costs) {
          KernelCost& c = (*costs)[l > 0 ? "p5_fused_update_bwd" : "p5_fused_update_first"];
          const double act = static_cast<double>(B_) * (w[l + 1] + (l > 0 ? 2.0 * w[l] : 0.0)) * ob;
          c.flops += 2.0 * w[l + 1] * w[l] * B_ * (l > 0 ? 2 : 1);
          c.bytes += update_bytes(l) + act;
          c.calls += 1;
        }
      }
      return;
    }
    // Backward: dZ_[L-2] first, then (update l, backward-data l-1) pairs, then (update 1, update 0).
    if (L_ == 1) {
      auto u = update0(sr, 0);
      launch_gemm<p5_update, T>(u, st_, pdl_);
      add_cost(costs, "p5_update", u, update_bytes(0), true);
      return;
    }
    {
      auto d = bwd_data(L_ - 1, 0);
      launch_gemm<p5_bwd_data, T>(d, st_, pdl_);
      add_cost(costs, "p5_bwd_data", d, static_cast<double>(B_) * w[L_ - 1] * 2 * ob, true);
    }
    for (int l = L_ - 1; l >= 2; --l) {
      auto u = update(l, sr, 0);
      auto d = bwd_data(l - 1, 1);
      launch_gemm_pair<p5_update_and_bwd_data, T>(u, d, st_, pdl_);  // two launches when a step-5 product is in it
      add_cost(costs, "p5_update_and_bwd_data", u, update_bytes(l), true);
      add_cost(costs, "p5_update_and_bwd_data", d, static_cast<double>(B_) * w[l - 1] * 2 * ob, split_pair(u, d));
    }
    auto u1 = update(1, sr, 0);
    auto u0 = update0(sr, 1);
    launch_gemm_pair<p5_update_pair, T>(u1, u0, st_, pdl_);
    add_cost(costs, "p5_update_pair", u1, update_bytes(1), true);
    add_cost(costs, "p5_update_pair", u0, update_bytes(0), split_pair(u1, u0));
  }

  // ----- cuBLASLt path: the same epilogue functors, run after each cuBLASLt product.
  void enqueue_step_cublas(const StepRef& sr, std::map<std::string, KernelCost>* costs) {
    const auto& w = o_.layers;
    const int D = w[0];
    gather_kernel<T><<<ew_blocks(static_cast<size_t>(B_) * D), 256, 0, st_>>>(X_.get(), train_x_.get(), train_rows(sr), B_, D);
    CHECK_LAUNCH();
    auto input = [&](int l) -> const T* { return l == 0 ? X_.get() : H_[l - 1].get(); };
    auto lt_cost = [&](double M, double N, double K) {
      if (!costs) return;
      KernelCost& c = (*costs)["!nb::mlp::"];  // every kernel not ours: cuBLASLt's
      c.flops += 2 * M * N * K;
      c.bytes += (M * K + K * N) * sizeof(T) + M * N * 4.0;
      c.calls += 1;
    };
    for (int l = 0; l < L_; ++l) {
      lt_layers_[l]->forward(input(l), weights(l), Z_.get(), st_);
      lt_cost(B_, w[l + 1], w[l]);
      if (l + 1 < L_) launch_epilogue<p5_epi_hidden>(Z_.get(), B_, w[l + 1], hidden_epi(l, H_[l].get(), sr, true), st_);
      else launch_epilogue<p5_epi_softmax_ce>(Z_.get(), B_, w[l + 1], loss_epi(sr), st_);
    }
    for (int l = L_ - 1; l >= 0; --l) {
      lt_layers_[l]->backward_weight(dZ_[l].get(), input(l), grads_.get() + woff_[l], st_);
      lt_cost(w[l + 1], w[l], B_);
      bias_grad_kernel<T><<<(w[l + 1] + 127) / 128, 128, 0, st_>>>(dZ_[l].get(), B_, w[l + 1], grads_.get() + boff_[l]);
      CHECK_LAUNCH();
      if (l > 0) {
        lt_layers_[l]->backward_data(dZ_[l].get(), weights(l), Z_.get(), st_);
        lt_cost(B_, w[l], w[l + 1]);
        BwdReluEpi<T> e;
        e.h = H_[l - 1].get(), e.dz = dZ_[l - 1].get(), e.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
        launch_epilogue<p5_epi_bwd_relu>(Z_.get(), B_, w[l], e, st_);
      }
    }
    flat_update_kernel<<<ew_blocks(nparams_), 256, 0, st_>>>(params_.get(), grads_.get(), o_.adam() ? adam_m_.get() : nullptr,
                                                             o_.adam() ? adam_v_.get() : nullptr, kHalf ? params16_.get() : nullptr,
                                                             nparams_, static_cast<float>(o_.lr), sr);
    CHECK_LAUNCH();
  }

  // ----- evaluation (own fused kernels in both modes; not timed)
  void enqueue_eval_layer(int l, int c0, int rows) {
    const auto& w = o_.layers;
    const StepRef sr{base_.get(), 0};
    GatherView<T> g;
    g.data = test_x_.get(), g.ld = w[0], g.rows.row_offset = c0;
    EvalEpi ee;
    ee.bias = params_.get() + boff_[L_ - 1], ee.labels = test_y_.get(), ee.row_offset = c0;
    ee.tile_correct = eval_correct_.get(), ee.tile_loss = eval_loss_.get();
    if (L_ == 1) {
      EvalFirstLast p;
      p.M = rows, p.N = w[1], p.K = w[0], p.a = g, p.b = make_view<T, false>(weights(0), p.K), p.epi = ee;
      plan_splitk_into_slot(p, 0);
      launch_gemm<p5_eval, T>(p, st_);
    } else if (l == 0) {
      FwdFirst p;
      p.M = rows, p.N = w[1], p.K = w[0], p.a = g, p.b = make_view<T, false>(weights(0), p.K);
      p.epi = hidden_epi(0, Heval_[0].get(), sr, false);
      plan_splitk_into_slot(p, 0);
      launch_gemm<p5_eval, T>(p, st_);
    } else if (l + 1 < L_) {
      FwdHidden p;
      p.M = rows, p.N = w[l + 1], p.K = w[l];
      p.a = make_view<T, true>(Heval_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K);
      p.epi = hidden_epi(l, Heval_[l].get(), sr, false);
      plan_splitk_into_slot(p, 0);
      launch_gemm<p5_eval, T>(p, st_);
    } else {
      EvalLast p;
      p.M = rows, p.N = w[l + 1], p.K = w[l];
      p.a = make_view<T, true>(Heval_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K), p.epi = ee;
      plan_splitk_into_slot(p, 0);
      launch_gemm<p5_eval, T>(p, st_);
    }
  }

  // Split-K workspaces: two slots (the two problems of a paired launch), each as large as the
  // largest problem placed in it.
  void size_ws() {
    size_t ws[2] = {1, 1}, tiles[2] = {1, 1};
    auto note = [&](const auto& p, int slot) {
      ws[slot] = std::max(ws[slot], ws_floats(p));
      tiles[slot] = std::max(tiles[slot], static_cast<size_t>(p.tiles()));
    };
    const StepRef sr{nullptr, 0};
    const auto& w = o_.layers;
    if (!cublas_) {
      for (int l = 1; l + 1 < L_; ++l) note(fwd_hidden(l, sr), 0);
      if (L_ > 1) note(fwd_last(sr), 0);
      {
        FwdFirst p;
        p.M = B_, p.N = w[1], p.K = w[0];
        plan_splitk_into_slot(p, 0);
        note(p, 0);
      }
      for (int l = 1; l < L_; ++l) note(bwd_data(l, 0), 0), note(bwd_data(l, 1), 1);
      for (int l = 1; l < L_; ++l) note(update(l, sr, 0), 0);
      note(update0(sr, 0), 0), note(update0(sr, 1), 1);
    }
    // Evaluation shapes (slot 0): full chunks of eval_rows_ and the last, shorter one (fewer row
    // tiles can mean more splits, so it may need more workspace than a full chunk).
    const int n_test = static_cast<int>(ds_.test_images.count);
    for (int rows : {eval_rows_, n_test % eval_rows_})
      for (int l = 0; l < L_ && rows > 0; ++l) {
        GemmProblem<MatView<T, true>, WView, StoreEpi> p;
        p.M = rows, p.N = w[l + 1], p.K = w[l];
        plan_splitk_into_slot(p, 0);
        note(p, 0);
      }
    for (int s = 0; s < 2; ++s) {
      ws_[s].alloc(ws[s]);
      counters_[s].alloc(tiles[s]);
      CUDA_CHECK(cudaMemset(counters_[s].get(), 0, counters_[s].bytes()));
    }
  }

  const MlpOptions& o_;
  const Schedule& sc_;
  const DeviceInfo& dev_;
  const Dataset& ds_;
  const HostParams& init_;
  const int L_, B_;
  const bool cublas_;
  const Launch launch_;
  const Fp32Gemm fp32_gemm_;
  PersistParams persist_params_;
  PersistPlan persist_plan_;
  ClusterParams cluster_params_;
  ClusterPlan cluster_plan_;
  void plan_cluster_kernel() {
    if constexpr (kHalf) {
      const auto& w = o_.layers;
      ClusterParams& p = cluster_params_;
      p.images = train_x_.get(), p.labels = train_y_.get(), p.perm = perm_.get();
      p.L = L_, p.B = B_;
      for (int l = 0; l <= L_; ++l) p.w[l] = w[l];
      for (int l = 0; l < L_; ++l) p.woff[l] = woff_[l], p.boff[l] = boff_[l];
      p.P = params_.get(), p.P16 = params16_.get();
      p.lr = static_cast<float>(o_.lr);
      p.step_loss = step_loss_.get(), p.bad_step = bad_step_.get();
      cluster_plan_ = cluster_rung_plan(p, o_.blocks, dev_.index);
      costs_per_step_["p5_cluster"] = cluster_rung_cost(p, cluster_plan_);
    }
  }
  void plan_persistent_kernel() {
    const auto& w = o_.layers;
    PersistParams& p = persist_params_;
    p.images = train_x_.get(), p.labels = train_y_.get(), p.perm = perm_.get();
    p.D = w[0], p.H1 = w[1], p.H2 = w[2], p.C = w[3], p.B = B_;
    p.P = params_.get();
    if (o_.adam()) p.M = adam_m_.get(), p.V = adam_v_.get(), p.hyper = hyper_.get(), p.hyper_n = static_cast<int64_t>(hyper_.size());
    p.w0 = woff_[0], p.b0 = boff_[0], p.w1 = woff_[1], p.b1 = boff_[1], p.w2 = woff_[2], p.b2 = boff_[2];
    if (launch_ != Launch::Cluster32) {  // 5f exchanges through distributed shared memory
      h1x_.alloc(2 * static_cast<size_t>(B_) * w[1]);
      h2x_.alloc(2 * static_cast<size_t>(B_) * w[2]);
      w2x_.alloc(2 * static_cast<size_t>(w[2]) * w[1]);
      p.h1x = h1x_.get(), p.h2x = h2x_.get(), p.w2x = w2x_.get();
    }
    if (launch_ == Launch::Pipelined) w3x_.alloc(2 * (static_cast<size_t>(w[3]) * w[2] + w[3])), p.w3x = w3x_.get();
    p.adam = o_.adam(), p.lr = static_cast<float>(o_.lr);
    p.dropout = o_.dropout > 0, p.key = dropout_key(o_.common.seed), p.threshold = dropout_threshold(o_.dropout);
    p.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
    p.step_loss = step_loss_.get(), p.bad_step = bad_step_.get();
    if (launch_ == Launch::Cluster32) {
      persist_plan_ = cluster32_rung_plan(p, o_.blocks, dev_.index, !o_.generic_kernel);
      costs_per_step_["p5_cluster32"] = cluster32_rung_cost(p, persist_plan_);
    } else if (launch_ == Launch::Pipelined) {
      persist_plan_ = pipelined_rung_plan(p, o_.blocks, dev_.index, !o_.generic_kernel);
      costs_per_step_["p5_pipelined"] = pipelined_rung_cost(p, persist_plan_);
    } else {
      persist_plan_ = persistent_rung_plan(p, o_.blocks, dev_.index, !o_.generic_kernel);
      costs_per_step_["p5_persistent"] = persistent_rung_cost(p, persist_plan_);
    }
  }
  DevBuf<xword> h1x_, h2x_, w2x_, w3x_;
  DevBuf<unsigned long long> breakdown_;
  cudaStream_t st_{};
  size_t nparams_ = 0;
  std::vector<size_t> woff_, boff_;
  std::vector<double> in_reference_order(const DevBuf<float>& buf) const {
    CUDA_CHECK(cudaStreamSynchronize(st_));
    const std::vector<float> flat = buf.download();
    std::vector<double> out;
    for (int l = 0; l < L_; ++l) {
      const size_t nw = static_cast<size_t>(o_.layers[l + 1]) * o_.layers[l], nb = o_.layers[l + 1];
      out.insert(out.end(), flat.begin() + woff_[l], flat.begin() + woff_[l] + nw);
      out.insert(out.end(), flat.begin() + boff_[l], flat.begin() + boff_[l] + nb);
    }
    return out;
  }

  DevBuf<float> params_, adam_m_, adam_v_, grads_, grads_debug_;
  DevBuf<AdamHyper> hyper_;
  DevBuf<__half> params16_;
  DevBuf<uint8_t> train_x_, train_y_, test_x_, test_y_;
  DevBuf<int> perm_;
  DevBuf<int64_t> base_;
  std::vector<DevBuf<T>> H_, dZ_, Heval_;
  DevBuf<float> step_loss_, tile_loss_, eval_loss_;
  DevBuf<unsigned> loss_counter_;
  DevBuf<unsigned long long> bad_step_;
  DevBuf<int> eval_correct_;
  int eval_rows_ = 0, eval_tiles_ = 0;
  DevBuf<float> ws_[2];
  DevBuf<unsigned> counters_[2];
  bool fused_bwd_ = false;
  bool pdl_ = false;  // own graph path: step kernels launched with PDL (--pdl)
  DevBuf<float> fb_ws_;
  DevBuf<unsigned> fb_counters_;
  DevBuf<T> X_;
  DevBuf<float> Z_;
  std::unique_ptr<LtHandle> lt_;
  std::vector<std::unique_ptr<LtLayer>> lt_layers_;
  std::map<int, cudaGraphExec_t> graphs_;
  std::map<std::string, KernelCost> costs_per_step_;
};

}  // namespace
}  // namespace nb
