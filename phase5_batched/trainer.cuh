// phase5_batched/trainer.cuh — phase 5's trainer: the device state of one run (parameters, optimizer
// state, the data set as bytes, the epoch's order) and its epochs, launched through the rung it holds
// (rungs.h): the graph step of fused kernels (5a/5b, trainer_graph_step.cuh) or a one-launch rung's
// kernel. Evaluation: trainer_eval.cuh. main.cu drives it: validation, the timed epochs, the record.
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
#include "l2_policy.h"
#include "5a_graph_step.cuh"
#include "5a_row_chain.cuh"
#include "fp32_gemm.h"
#include "lt.h"
#include "lt_bias_grad.cuh"
#include "rungs.h"
#include "mlp/mlp_common.h"
#include "mlp/mlp_record.h"
#include "mlp/validate.h"
#include "nvtx.h"
#include "p5_options.h"
#include "record.h"
#include "reference.h"
#include "stats.h"
#include "timing.cuh"

namespace nb {
namespace {

using namespace nb::mlp;

constexpr int kEvalRows = 2048;  // a multiple of kBM: tile indices of the eval arrays stay global
constexpr int kEwThreads = 256;  // threads a block of the elementwise kernels (ew_blocks' default)
constexpr int kParamAlign = 8;   // elements: each parameter tensor starts at a multiple of it
constexpr unsigned long long kNoBadStep = ~0ull;  // bad_step_ while every loss has been finite

template <class T>
class Trainer {
 public:
  Trainer(const P5Options& o, const Rung& rung, const Schedule& sc, const DeviceInfo& dev, const Dataset& ds,
          const HostParams& init, Fp32Gemm fp32_gemm = Fp32Gemm::Auto)
      : o_(o), sc_(sc), dev_(dev), ds_(ds), init_(init), nlayers_(o.nlayers()), batch_(o.batch),
        cublas_(o.gemm == "cublas"), rung_(rung), fp32_gemm_(fp32_gemm) {
    const auto& w = o.layers;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking));
    // Parameters: one flat fp32 buffer W0, b0, W1, b1, ... (the cuBLASLt path's optimizer is one launch).
    // Each tensor starts at a multiple of 8 elements: 16-byte (fp32) / 8-byte (fp16) vector access.
    size_t off = 0;
    auto round8 = [](size_t x) { return (x + kParamAlign - 1) / kParamAlign * kParamAlign; };
    for (int l = 0; l < nlayers_; ++l) {
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
    if (!kHalf && use_i8digits(fp32_gemm) && nlayers_ > 1)  // GEMM step 10's W0 digits (fwd_first)
      w0_digits_.alloc(static_cast<size_t>(w[1]) * i8_digit_ld(w[0]));
    if (cublas_) {  // zeroed: the alignment gaps between tensors are read (never written) by the flat update
      grads_.alloc(nparams_);
      CUDA_CHECK(cudaMemset(grads_.get(), 0, grads_.bytes()));
      size_t bg = 1;  // the bias gradients' slice sums (lt_bias_grad.cuh), the widest layer's
      for (int l = 0; l < nlayers_; ++l) bg = std::max(bg, lt_bias_grad_ws_floats(batch_, w[l + 1]));
      bg_ws_.alloc(bg);
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
    for (int l = 0; l + 1 < nlayers_; ++l) H_.emplace_back(static_cast<size_t>(batch_) * w[l + 1]);
    for (int l = 0; l < nlayers_; ++l) dZ_.emplace_back(static_cast<size_t>(batch_) * w[l + 1]);
    if (!cublas_)  // dZ_[l]'s column sums per 32-row tile, for the bias gradients (store_tile_colsums)
      for (int l = 0; l < nlayers_; ++l) dZsum_.emplace_back(static_cast<size_t>((batch_ + kBM - 1) / kBM) * w[l + 1]);
    step_loss_.alloc(sc.total_steps);
    tile_loss_.alloc(static_cast<size_t>(sc.total_steps) * ((batch_ + kBM - 1) / kBM));  // graph path: [step][row tile]
    bad_step_.alloc(1);
    // Evaluation buffers.
    const int n_test = static_cast<int>(ds.test_images.count);
    eval_rows_ = std::min(kEvalRows, n_test);
    for (int l = 0; l + 1 < nlayers_; ++l) Heval_.emplace_back(static_cast<size_t>(eval_rows_) * w[l + 1]);
    eval_tiles_ = (n_test + kBM - 1) / kBM;
    eval_correct_.alloc(eval_tiles_);
    eval_loss_.alloc(eval_tiles_);
    if (cublas_) {
      int maxw = 0;
      for (int x : w) maxw = std::max(maxw, x);
      X_.alloc(static_cast<size_t>(batch_) * w[0]);
      Z_.alloc(static_cast<size_t>(batch_) * maxw);
      lt_ = std::make_unique<LtHandle>();
      for (int l = 0; l < nlayers_; ++l) {
        lt_layers_.push_back(std::make_unique<LtLayer>());
        lt_layers_.back()->template plan<T>(*lt_, batch_, w[l], w[l + 1], l > 0);
      }
    }
    if (o_.fp16_gemm == "wgmma" && !wgmma_built(10 * dev_.cc_major + dev_.cc_minor))
      throw Error(kExitUsage, "--fp16-gemm wgmma: GEMM step 9 needs a Hopper GPU (compute capability 9.0; this one has " +
                                  std::to_string(dev_.cc_major) + "." + std::to_string(dev_.cc_minor) +
                                  ") and a build with sm_90a device code (make's default; ARCH=sm_90a)");
    size_ws();
    if (rung_.one_launch()) plan_one_launch_kernel();
    plan_fused_backward();
    plan_branches();
    plan_row_chain();
    pdl_ = o_.pdl == "on" && !cublas_ && !rung_.one_launch() && dev_.cc_major >= 9;  // PDL is Hopper's
    reset();
  }
  ~Trainer() {
    for (auto& g : graphs_) cudaGraphExecDestroy(g.second);
    if (fork_) cudaEventDestroy(fork_);
    if (join_) cudaEventDestroy(join_);
    if (side_) cudaStreamDestroy(side_);
    cudaStreamDestroy(st_);
  }

  cudaStream_t stream() const { return st_; }
  size_t nparams() const { return nparams_; }

  void reset() {
    fwd0_done_ = false;
    std::vector<float> flat(nparams_);
    for (int l = 0; l < nlayers_; ++l) {
      std::copy(init_.W[l].begin(), init_.W[l].end(), flat.begin() + woff_[l]);
      std::copy(init_.b[l].begin(), init_.b[l].end(), flat.begin() + boff_[l]);
    }
    // Everything on the trainer's (non-blocking) stream: plain cudaMemset/cudaMemcpy would run on
    // the legacy default stream, which does not order with it.
    const unsigned long long none = kNoBadStep;
    CUDA_CHECK(cudaMemcpyAsync(params_.get(), flat.data(), flat.size() * sizeof(float), cudaMemcpyHostToDevice, st_));
    CUDA_CHECK(cudaMemcpyAsync(bad_step_.get(), &none, sizeof none, cudaMemcpyHostToDevice, st_));
    if (o_.adam()) {
      CUDA_CHECK(cudaMemsetAsync(adam_m_.get(), 0, adam_m_.bytes(), st_));
      CUDA_CHECK(cudaMemsetAsync(adam_v_.get(), 0, adam_v_.bytes(), st_));
    }
    if (kHalf) {
      to_half_kernel<<<ew_blocks(nparams_), kEwThreads, 0, st_>>>(params_.get(), params16_.get(), nparams_);
      CHECK_LAUNCH();
    }
    CUDA_CHECK(cudaDeviceSynchronize());  // also covers the constructor's default-stream memsets
  }

  // Writes step base and the permutation of the epoch that `first_step` belongs to.
  void launch_epoch_permutation(int64_t first_step) {
    const int64_t e = first_step / sc_.steps_per_epoch;
    const int n = static_cast<int>(sc_.n_train);
    epoch_begin_kernel<<<(n + kEwThreads - 1) / kEwThreads, kEwThreads, 0, st_>>>(
        perm_.get(), n, make_perm(o_.common.seed, static_cast<uint64_t>(e), n), base_.get(), first_step);
    CHECK_LAUNCH();
    pdl_off_next_ = true;  // the step's first kernel reads base_ (written here) before its PDL wait
  }

  // Graph step (trainer_graph_step.cuh): enqueues the kernels of step base + i on the stream
  // (captured into the graphs, or run directly); captures the graph of `count` consecutive steps
  // (once per count); runs steps [first, first + count) (all inside first's epoch): permutation
  // kernel + graph replay.
  // next: step i + 1 follows in the same graph (the first layer's pass may run its first forward).
  void enqueue_step(int i, std::map<std::string, KernelCost>* costs, bool next = false);
  // The mean loss of steps first, ..., first + count - 1 from their row tiles' sums (step_loss_kernel).
  void enqueue_step_losses(const StepRef& first, int count) {
    const int tiles = (batch_ + kBM - 1) / kBM;
    step_loss_kernel<<<(count + kEwThreads - 1) / kEwThreads, kEwThreads, 0, st_>>>(
        tile_loss_.get(), tiles, batch_, first, count, step_loss_.get(), bad_step_.get());
    CHECK_LAUNCH();
  }
  void capture(int count);
  cudaGraphExec_t instantiate(int count, std::map<std::string, KernelCost>* costs);
  void replay_once(int count);  // --validate: the single steps again, as one graph replay
  void run_graph(int64_t first, int count);

  // A one-launch kernel's steps [first, first + count) and the buffers it writes besides.
  LaunchWindow launch_window(int64_t first, int count) const {
    LaunchWindow w;
    w.s0 = first, w.i0 = static_cast<int>(first % sc_.steps_per_epoch), w.count = count;
    w.grads = grads_debug_.size() ? grads_debug_.get() : nullptr;
    w.breakdown = breakdown_.size() ? breakdown_.get() : nullptr;
    return w;
  }
  // The timed unit: steps [first, first + count) of one epoch, through the rung: the graph step's
  // replay, or the permutation kernel and one launch of the rung's kernel.
  void run_epoch(int64_t first, int count) {
    if (!rung_.one_launch()) return run_graph(first, count);
    launch_epoch_permutation(first);
    rung_.launch(kernel_, launch_window(first, count), st_);
  }
  // Before timing: capture the graphs (graph step) for a full epoch and a shorter last one.
  void prepare(int full, int rem) {
    if (rung_.one_launch()) return;
    capture(full);
    if (rem > 0 && rem != full) capture(rem);
  }
  // One step k (< steps per epoch) of the first epoch, on its own (validation, first-call work).
  // next: step k + 1 is the next single step (the first layer's pass may run its first forward, as
  // in a graph of consecutive steps); the single steps of --validate chain so, like the replay.
  void single_step(int k, bool next = false) {
    if (rung_.one_launch()) return run_epoch(k, 1);
    launch_epoch_permutation(0);
    enqueue_step(k, nullptr, next);
    enqueue_step_losses(StepRef{base_.get(), k}, 1);
  }
  const Rung& rung() const { return rung_; }
  // The own graph step's GEMM plan: every product of a training step with its shape, the rung that
  // computes it and its K slices (empty on the other paths). Printed at the start, kept in the record.
  nlohmann::json gemm_plan() const;
  void add_fused_passes(nlohmann::json& out) const;  // (gemm_plan's fused backward passes)

  bool one_launch() const { return rung_.one_launch(); }  // one kernel launch an epoch
  bool own_graph() const { return !cublas_ && !rung_.one_launch(); }  // own GEMMs, a graph an epoch
  const OneLaunchKernel& kernel() const { return kernel_; }  // its parameters and plan
  bool fused_backward() const { return fused_bwd_; }
  bool row_chain() const { return row_chain_; }
  const char* backward_kind() const { return fused_bwd_ ? "fused" : branched_ ? "branched" : "paired"; }
  bool last_tail() const { return last_tail_; }
  bool next_forward() const { return next_fwd_; }
  bool l2_evict() const { return evict_masters_; }  // the fused passes' masters evict-first in L2
  bool pdl() const { return pdl_; }
  // --breakdown: per-part cycles of block 0 (summed over the steps run since the last call).
  void start_breakdown() {
    breakdown_.alloc(kBreakdownParts);
    CUDA_CHECK(cudaMemsetAsync(breakdown_.get(), 0, breakdown_.bytes(), st_));
  }
  std::vector<unsigned long long> take_breakdown() {
    CUDA_CHECK(cudaStreamSynchronize(st_));
    std::vector<unsigned long long> h = breakdown_.download();
    breakdown_.release();
    return h;
  }

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
    return b == kNoBadStep ? -1 : static_cast<int64_t>(b);
  }

  void evaluate(double* loss, double* acc);  // trainer_eval.cuh

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
  using FwdLastBwd = GemmProblem<MatView<T, true>, WView, SoftmaxCELastBwdEpi>;  // (fp16: the last layer's pass as its tail)
  using BwdDataGemm = GemmProblem<MatView<T, true>, MatView<T, true>, BwdReluEpi<T>>;
  using UpdateGemm = GemmProblem<MatView<T, false>, MatView<T, true>, UpdateEpi<T>>;
  using UpdateFirstGemm = GemmProblem<MatView<T, false>, GatherView<T>, UpdateEpi<T>>;
  using EvalFirstLast = GemmProblem<GatherView<T>, WView, EvalEpi>;
  using EvalLast = GemmProblem<MatView<T, true>, WView, EvalEpi>;

  // ----- the graph step's products and epilogues (trainer_graph_step.cuh)
  const T* weights(int l) const;
  RowMap train_rows(const StepRef& sr) const;
  GatherView<T> train_view(const StepRef& sr) const;
  FwdHiddenEpi<T> hidden_epi(int l, T* out, const StepRef& sr, bool dropout) const;
  SoftmaxCEEpi<T> loss_epi(const StepRef& sr) const;
  UpdateEpi<T> update_epi(int l, const StepRef& sr) const;
  FusedBwdParams fused_params(int l, const StepRef& sr) const;
  FusedBwdParams fused_first_next(const StepRef& sr) const;  // + the next step's first forward (next_fwd_)
  void plan_fused_backward();
  void plan_branches();
  void plan_row_chain();
  RowChainParams<T> row_chain_params(const StepRef& sr) const;
  // PDL for a step kernel on the step's stream; off for the first one after the branches join
  // (its dependencies are two kernels of two streams, not the one kernel before it) and for the
  // first one after epoch_begin_kernel (a step kernel may read the step number before its PDL
  // wait: FwdHiddenEpi's early dropout draw).
  bool take_pdl() {
    const bool p = pdl_ && !pdl_off_next_;
    pdl_off_next_ = false;
    return p;
  }
  void enqueue_backward_branched(const StepRef& sr, std::map<std::string, KernelCost>* costs);
  void enqueue_row_chain_and_updates(const StepRef& sr, std::map<std::string, KernelCost>* costs);
  void enqueue_update0_and_join(const StepRef& sr, std::map<std::string, KernelCost>* costs);
  template <class P>
  void plan_splitk_into_slot(P& p, int slot) const;
  template <class P>
  void add_cost(std::map<std::string, KernelCost>* costs, const std::string& tag, const P& p, double extra_bytes,
                bool count_call) const;
  FwdFirst fwd_first(const StepRef& sr) const;  // the gathered first layer (two or more layers)
  FwdHidden fwd_hidden(int l, const StepRef& sr) const;
  FwdLast fwd_last(const StepRef& sr) const;
  FwdLastBwd fwd_last_bwd(const StepRef& sr) const;  // softmax-CE with the last layer's pass (last_tail_)
  BwdDataGemm bwd_data(int l, int slot) const;
  UpdateGemm update(int l, const StepRef& sr, int slot) const;
  UpdateFirstGemm update0(const StepRef& sr, int slot) const;
  double update_bytes(int l) const;
  void enqueue_step_own(const StepRef& sr, std::map<std::string, KernelCost>* costs, bool next);
  void enqueue_step_cublas(const StepRef& sr, std::map<std::string, KernelCost>* costs);
  // Split-K workspaces: two slots (the two problems of a paired launch), each as large as the
  // largest problem placed in it.
  void size_ws();
  // ----- evaluation (trainer_eval.cuh)
  void enqueue_eval_layer(int l, int c0, int rows);

  const P5Options& o_;
  const Schedule& sc_;
  const DeviceInfo& dev_;
  const Dataset& ds_;
  const HostParams& init_;
  const int nlayers_, batch_;
  const bool cublas_;
  const Rung& rung_;
  const Fp32Gemm fp32_gemm_;
  OneLaunchKernel kernel_;  // a one-launch rung's parameters and plan
  // A one-launch rung: its parameter block filled from the trainer's buffers, then its plan.
  void plan_one_launch_kernel() {
    if (rung_.params == KernelParams::Cluster && !kHalf) return;  // 5d runs fp16 models only (check_rung)
    if (rung_.params == KernelParams::Cluster) fill_cluster_params();
    if (rung_.params == KernelParams::Persist) fill_persist_params();
    rung_.plan(kernel_, o_.blocks, dev_.index, !o_.generic_kernel, costs_per_step_);
  }
  void fill_cluster_params() {
    const auto& w = o_.layers;
    ClusterParams& p = kernel_.cluster;
    p.images = train_x_.get(), p.labels = train_y_.get(), p.perm = perm_.get();
    p.L = nlayers_, p.B = batch_;
    for (int l = 0; l <= nlayers_; ++l) p.w[l] = w[l];
    for (int l = 0; l < nlayers_; ++l) p.woff[l] = woff_[l], p.boff[l] = boff_[l];
    p.params = params_.get(), p.params16 = params16_.get();
    p.lr = static_cast<float>(o_.lr);
    p.step_loss = step_loss_.get(), p.bad_step = bad_step_.get();
  }
  void fill_persist_params() {
    const auto& w = o_.layers;
    PersistParams& p = kernel_.persist;
    p.images = train_x_.get(), p.labels = train_y_.get(), p.perm = perm_.get();
    p.D = w[0], p.H1 = w[1], p.H2 = w[2], p.C = w[3], p.B = batch_;
    p.params = params_.get();
    if (o_.adam()) p.adam_m = adam_m_.get(), p.adam_v = adam_v_.get(), p.hyper = hyper_.get(), p.hyper_n = static_cast<int64_t>(hyper_.size());
    p.w0 = woff_[0], p.b0 = boff_[0], p.w1 = woff_[1], p.b1 = boff_[1], p.w2 = woff_[2], p.b2 = boff_[2];
    if (rung_.global_exchange) {  // 5c, 5e (5f exchanges through distributed shared memory)
      h1x_.alloc(2 * static_cast<size_t>(batch_) * w[1]);
      h2x_.alloc(2 * static_cast<size_t>(batch_) * w[2]);
      w2x_.alloc(2 * static_cast<size_t>(w[2]) * w[1]);
      p.h1_words = h1x_.get(), p.h2_words = h2x_.get(), p.w2_words = w2x_.get();
    }
    if (rung_.w3_exchange) w3x_.alloc(2 * (static_cast<size_t>(w[3]) * w[2] + w[3])), p.w3_words = w3x_.get();
    p.adam = o_.adam(), p.lr = static_cast<float>(o_.lr);
    p.dropout = o_.dropout > 0, p.key = dropout_key(o_.common.seed), p.threshold = dropout_threshold(o_.dropout);
    p.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
    p.step_loss = step_loss_.get(), p.bad_step = bad_step_.get();
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
    for (int l = 0; l < nlayers_; ++l) {
      const size_t nw = static_cast<size_t>(o_.layers[l + 1]) * o_.layers[l], nb = o_.layers[l + 1];
      out.insert(out.end(), flat.begin() + woff_[l], flat.begin() + woff_[l] + nw);
      out.insert(out.end(), flat.begin() + boff_[l], flat.begin() + boff_[l] + nb);
    }
    return out;
  }

  DevBuf<float> params_, adam_m_, adam_v_, grads_, grads_debug_;
  DevBuf<AdamHyper> hyper_;
  DevBuf<__half> params16_;
  DevBuf<uint32_t> w0_digits_;  // --fp32-gemm auto: W0 as GEMM step 10's digit words (i8_split_digits)
  DevBuf<uint8_t> train_x_, train_y_, test_x_, test_y_;
  DevBuf<int> perm_;
  DevBuf<int64_t> base_;
  std::vector<DevBuf<T>> H_, dZ_, Heval_;
  std::vector<DevBuf<float>> dZsum_;
  // Where the epilogue that writes dZ_[l] stores its tile column sums (the own graph step; the
  // fused backward sums its columns itself).
  float* dz_colsum(int l) const { return dZsum_.empty() || fused_bwd_ ? nullptr : dZsum_[l].get(); }
  DevBuf<float> step_loss_, tile_loss_, eval_loss_;
  DevBuf<unsigned long long> bad_step_;
  DevBuf<int> eval_correct_;
  int eval_rows_ = 0, eval_tiles_ = 0;
  DevBuf<float> ws_[2];
  DevBuf<float> bg_ws_;  // --gemm cublas: the bias gradients' slice sums
  DevBuf<unsigned> counters_[2];
  bool fused_bwd_ = false;
  bool evict_masters_ = false;  // --l2-evict (5b_fused_backward.cuh, l2_policy.h)
  bool last_tail_ = false;  // the last layer's fused pass runs in softmax-CE's cluster (5b_fused_backward.cuh)
  // --next-forward pass: the first layer's fused pass runs the next step's first forward where that
  // step follows in the same graph; fwd0_done_: the step being enqueued has its forward done so.
  bool next_fwd_ = false, fwd0_done_ = false;
  bool next_cluster_ = false;  // its column tiles' partials added as one cluster (--handover cluster, where one fits)
  DevBuf<float> fn_ws_;
  DevBuf<unsigned> fn_counters_;
  // --row-chain on: the hidden forward, softmax-CE and both backward-data products in one kernel
  // (5a_row_chain.cuh); the three updates fork from it.
  bool row_chain_ = false;
  bool pdl_ = false;  // own graph path: step kernels launched with PDL (--pdl)
  // --backward branched: the updates on a second stream (a second branch of the captured graph),
  // forked from the step's stream after each backward-data product and joined at the step's end.
  bool branched_ = false;
  static constexpr int kSideMaxSlices = 64;  // the fp32 side branch's weight gradients (plan_splitk_into_slot)
  bool pdl_off_next_ = false;  // take_pdl(): the next step kernel waits for all the stream's work
  cudaStream_t side_{};
  cudaEvent_t fork_{}, join_{};
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

#include "trainer_graph_step.cuh"
#include "trainer_eval.cuh"
