// phase5_batched — the same MLP as phase 4, with the whole data path batched onto the GPU.
//
// WHAT THIS CHAPTER ADDS OVER phase4_mlp (26 host-launched kernels a step, host gather, loss read
// back every step): the data set on the GPU as bytes, each epoch's order generated on the device
// (mlp_common.h's Feistel permutation: phase 4's order for the same seed), the batch gathered in
// the first GEMM's operand loader; fused epilogues (bias+ReLU+dropout, softmax+CE+gradient,
// ReLU/dropout backward, the optimizer in the weight-gradient GEMM: weight gradients never touch
// memory); W1 6 launches a step, W2 8; each epoch one CUDA graph; losses read once an epoch.
// The paths (--help lists every flag and its default):
//   default (own GEMM graph step)  common/mlp/kernels.cuh products, fused epilogues, one graph;
//   --gemm cublas      the same trainer on cuBLASLt, the yardstick (--gemm-compare: the products);
//   --backward auto|fused|paired   fp16 + SGD: one pass over each layer's weights does its update
//                      and its backward-data product (fused_backward.cuh);
//   --pdl on|off       programmatic dependent launch: a kernel starts while the one before ends;
//   --launch persistent  W1-shaped (fp32, two hidden layers): the whole epoch ONE cooperative
//                      kernel, parameters in smem (persistent.cuh); --breakdown times a step;
//   --launch cluster   W2 at small widths (fp16, SGD, batch <= 32; h = 128 fits): the epoch one
//                      16-block cluster, activations exchanged through DSMEM (cluster.cuh).
//
// THE DESIGN DECISION: no intermediate that an epilogue can consume is written, and nothing in a
//   step waits for the host: what is left between kernels is dependent latency, which the two
//   one-kernel-an-epoch paths (persistent, cluster) then remove.
//
// PREDICTION (before measuring, H100). Graph path, W1: ~14.5 MFLOP, ~4 MB of L2 traffic a step
//   (~2 µs of work), 6 dependent kernels at ~2-4 µs: 15-25 µs a step, 30-45 ms an epoch; the 10 ms
//   goal needs one persistent kernel. Persistent: two barriers ~1 µs each + 2-4 µs of small work:
//   5-8 µs a step, 10-15 ms an epoch. Cluster, h = 128: ~8-10 µs a step, 150-200x eager. W2 at
//   h = 8192: weight traffic, 14 B x 141 M weights = 2.0 GB a step, ~0.7 ms (PyTorch's ~2.0 ms).
//
// MEASURED (NVIDIA H200, profiles/nvidia-h200/, one bench_lanes.sh run at ebcd7ce; tracer off):
//   W1 persistent: 19.95 ms an epoch, 10.64 µs a step (phase5_batched__w1-persistent.json): 12.98x
//   the fastest PyTorch (compiled-graph, 258.9 ms: pytorch_mlp__w1-compiled-graph.json), 176x
//   eager (3515 ms); graph path 70.2 ms (3.69x). Seeds 1-3: 97.60% mean (the compiled twin 97.61).
//   --breakdown (__w1-persistent-breakdown.json, µs of 10.68 a step): first layer 1.78, wait for
//   h1 2.26, second layer 1.06, wait for h2 1.78, last layer 0.66, softmax + dz2 1.24, dz1 0.32,
//   W1 update 1.59: the two waits are 38%.
//   W2 h = 128, --launch cluster: 27.7 µs a step (__w2-h128-cluster.json), 2.73x the fastest
//   PyTorch (compiled-graph, 75.6 µs: pytorch_mlp__w2-h128-compiled-graph.json), 86.9x eager.
//   W2 h = 8192, own GEMMs (fused backward): 0.584 ms a step (__w2-h8192-own.json), 1.88x the
//   fastest PyTorch (compiled-graph, 1.098 ms: pytorch_mlp__w2-h8192-compiled-graph.json), 4.32x
//   eager; cuBLASLt path 0.957, paired backward 0.910.
//
// History — the H100 runs (profiles/nvidia-h100-80gb-hbm3/), the latency trims, how the persistent
//   and cluster kernels got where they are, what was dropped: report/phase_notes/phase5_batched.md.
#define NB_WANT_CUBLAS 1  // check.cuh: CUBLAS_CHECK for the cuBLASLt path (lt.h)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.h"
#include "device_info.h"
#include "errors.h"
#include "idx.h"
#include "fused_backward.cuh"
#include "kernels.cuh"
#include "lt.h"
#include "persistent.h"
#include "cluster.h"
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

constexpr const char* kPhase = "phase5_batched";
constexpr int kEvalRows = 2048;  // a multiple of kBM: tile indices of the eval arrays stay global

template <class T>
class Trainer {
 public:
  Trainer(const MlpOptions& o, const Schedule& sc, const DeviceInfo& dev, const Dataset& ds, const HostParams& init)
      : o_(o), sc_(sc), dev_(dev), ds_(ds), init_(init), L_(o.nlayers()), B_(o.batch), cublas_(o.gemm == "cublas"),
        persistent_(o.launch == "persistent"), cluster_(o.launch == "cluster") {
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
    P_.alloc(nparams_);
    if (o.adam()) {
      M_.alloc(nparams_), V_.alloc(nparams_);
      // Adam's constants for every step t = 1 .. total_steps, formed on the host like phase 4's.
      std::vector<AdamHyper> hy(static_cast<size_t>(sc.total_steps) + 1);
      for (size_t t = 1; t < hy.size(); ++t) hy[t] = adam_hyper(o.lr, static_cast<int64_t>(t));
      hyper_.alloc(hy.size());
      hyper_.upload(hy.data(), hy.size());
    }
    if (kHalf) P16_.alloc(nparams_);
    if (cublas_) {  // zeroed: the alignment gaps between tensors are read (never written) by the flat update
      G_.alloc(nparams_);
      CUDA_CHECK(cudaMemset(G_.get(), 0, G_.bytes()));
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
    if (persistent_) plan_persistent_kernel();
    if (cluster_) plan_cluster_kernel();
    plan_fused_backward();
    pdl_ = o_.pdl == "on" && !cublas_ && !persistent_ && !cluster_ && dev_.cc_major >= 9;  // PDL is Hopper's
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
    CUDA_CHECK(cudaMemcpyAsync(P_.get(), flat.data(), flat.size() * sizeof(float), cudaMemcpyHostToDevice, st_));
    CUDA_CHECK(cudaMemcpyAsync(bad_step_.get(), &none, sizeof none, cudaMemcpyHostToDevice, st_));
    if (o_.adam()) {
      CUDA_CHECK(cudaMemsetAsync(M_.get(), 0, M_.bytes(), st_));
      CUDA_CHECK(cudaMemsetAsync(V_.get(), 0, V_.bytes(), st_));
    }
    if (kHalf) {
      to_half_kernel<<<ew_blocks(nparams_), 256, 0, st_>>>(P_.get(), P16_.get(), nparams_);
      CHECK_LAUNCH();
    }
    CUDA_CHECK(cudaDeviceSynchronize());  // also covers the constructor's default-stream memsets
  }

  // Writes step base and the permutation of the epoch that `first_step` belongs to.
  void begin(int64_t first_step) {
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
    begin(first);
    CUDA_CHECK(cudaGraphLaunch(graphs_[count], st_));
  }

  // A one-launch kernel's parameters for steps [first, first + count) (PersistParams, ClusterParams).
  template <class Params>
  Params launch_params(Params p, int64_t first, int count) const {
    p.s0 = first, p.i0 = static_cast<int>(first % sc_.steps_per_epoch), p.count = count;
    p.G = Gdbg_.size() ? Gdbg_.get() : nullptr;
    p.breakdown = breakdown_.size() ? breakdown_.get() : nullptr;
    return p;
  }
  // --launch persistent: permutation kernel + one cooperative launch for steps [first, first + count).
  void run_persistent(int64_t first, int count) {
    begin(first);
    persistent_rung_launch(plan_, launch_params(persist_, first, count), st_);
  }
  // --launch cluster: permutation kernel + one cluster launch for steps [first, first + count).
  void run_cluster(int64_t first, int count) {
    begin(first);
    cluster_rung_launch(cl_plan_, launch_params(cl_, first, count), st_);
  }

  // The timed unit: steps [first, first + count) of one epoch, in the configured launch mode.
  void run_epoch(int64_t first, int count) {
    if (persistent_) run_persistent(first, count);
    else if (cluster_) run_cluster(first, count);
    else run_graph(first, count);
  }
  // Before timing: capture the graphs (graph mode) for a full epoch and a shorter last one.
  void prepare(int full, int rem) {
    if (persistent_ || cluster_) return;
    capture(full);
    if (rem > 0 && rem != full) capture(rem);
  }
  // One step k (< steps per epoch) of the first epoch, on its own (validation, first-call work).
  void single_step(int k) {
    if (persistent_) {
      run_persistent(k, 1);
    } else if (cluster_) {
      run_cluster(k, 1);
    } else {
      begin(0);
      enqueue_step(k, nullptr);
    }
  }
  bool persistent() const { return persistent_; }
  bool cluster() const { return cluster_; }
  const ClusterPlan& cluster_plan() const { return cl_plan_; }
  bool fused_backward() const { return fused_bwd_; }
  bool pdl() const { return pdl_; }
  // --breakdown: per-part cycles of block 0 (summed over the steps run since the last call).
  static_assert(kPersistSegments == kClSegments, "one breakdown buffer serves both one-launch kernels");
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
  const PersistPlan& persist_plan() const { return plan_; }

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
  std::vector<double> params() const { return packed(P_); }
  std::vector<double> grads() const { return packed(cublas_ ? G_ : Gdbg_); }
  // Validation: the fused update also stores the gradients it applies (never in timed runs).
  void keep_gradients(bool on) {
    if (cublas_) return;  // the cuBLASLt path stores them anyway (G_)
    if (on && !Gdbg_.size()) Gdbg_.alloc(nparams_);
    if (!on) Gdbg_.release();
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
  using Bd = GemmProblem<MatView<T, true>, MatView<T, true>, BwdReluEpi<T>>;
  using Upd = GemmProblem<MatView<T, false>, MatView<T, true>, UpdateEpi<T>>;
  using Upd0 = GemmProblem<MatView<T, false>, GatherView<T>, UpdateEpi<T>>;
  using EvalFirstLast = GemmProblem<GatherView<T>, WView, EvalEpi>;
  using EvalLast = GemmProblem<MatView<T, true>, WView, EvalEpi>;

  const T* weights(int l) const {
    if constexpr (kHalf) return P16_.get() + woff_[l];
    else return P_.get() + woff_[l];
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
    e.bias = P_.get() + boff_[l], e.out = out;
    e.dropout = dropout && o_.dropout > 0;
    e.key = dropout_key(o_.common.seed), e.layer = static_cast<uint32_t>(l);
    e.threshold = dropout_threshold(o_.dropout);
    e.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
    e.step = sr;
    return e;
  }
  SoftmaxCEEpi<T> loss_epi(const StepRef& sr) const {
    SoftmaxCEEpi<T> e;
    e.bias = P_.get() + boff_[L_ - 1], e.labels = train_y_.get(), e.rows = train_rows(sr);
    e.dz = dZ_[L_ - 1].get(), e.tile_loss = tile_loss_.get(), e.counter = loss_counter_.get();
    e.step_loss = step_loss_.get(), e.bad_step = bad_step_.get(), e.step = sr;
    return e;
  }
  UpdateEpi<T> update_epi(int l, const StepRef& sr) const {
    UpdateEpi<T> e;
    e.W = P_.get() + woff_[l], e.b = P_.get() + boff_[l];
    if (o_.adam()) {
      e.mW = M_.get() + woff_[l], e.vW = V_.get() + woff_[l], e.mb = M_.get() + boff_[l], e.vb = V_.get() + boff_[l];
    }
    if (kHalf) e.W16 = P16_.get() + woff_[l];
    e.dz = dZ_[l].get(), e.batch = B_, e.adam = o_.adam(), e.lr = static_cast<float>(o_.lr), e.step = sr;
    if (o_.adam()) e.hyper = hyper_.get(), e.hyper_n = static_cast<int64_t>(hyper_.size());
    if (Gdbg_.size()) e.grad_out = Gdbg_.get() + woff_[l], e.bgrad_out = Gdbg_.get() + boff_[l];
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
      if (cublas_ || persistent_ || o_.backward == "paired") return;
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
  void finish(P& p, int slot) const {
    p.ws = ws_[slot].get(), p.counters = counters_[slot].get();
    plan_splits_p5(p, dev_.sm_count);
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
    finish(p, 0);
    return p;
  }
  FwdLast fwd_last(const StepRef& sr) const {
    const int l = L_ - 1;
    FwdLast p;
    p.M = B_, p.N = o_.layers[l + 1], p.K = o_.layers[l];
    p.a = make_view<T, true>(H_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K);
    p.epi = loss_epi(sr);
    finish(p, 0);
    return p;
  }
  Bd bwd_data(int l, int slot) const {  // dZ_[l-1] = relu'(dZ_[l] · W_l)
    Bd p;
    p.M = B_, p.N = o_.layers[l], p.K = o_.layers[l + 1];
    p.a = make_view<T, true>(dZ_[l].get(), p.K), p.b = make_view<T, true>(weights(l), p.N);
    p.epi.h = H_[l - 1].get(), p.epi.dz = dZ_[l - 1].get();
    p.epi.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
    finish(p, slot);
    return p;
  }
  Upd update(int l, const StepRef& sr, int slot) const {  // W_l -= f(dZ_[l]^T · H_[l-1])
    Upd p;
    p.M = o_.layers[l + 1], p.N = o_.layers[l], p.K = B_;
    p.a = make_view<T, false>(dZ_[l].get(), p.M), p.b = make_view<T, true>(H_[l - 1].get(), p.N);
    p.epi = update_epi(l, sr);
    finish(p, slot);
    return p;
  }
  Upd0 update0(const StepRef& sr, int slot) const {
    Upd0 p;
    p.M = o_.layers[1], p.N = o_.layers[0], p.K = B_;
    p.a = make_view<T, false>(dZ_[0].get(), p.M), p.b = train_view(sr);
    p.epi = update_epi(0, sr);
    finish(p, slot);
    return p;
  }
  double update_bytes(int l) const {  // master r/w (+ Adam m, v r/w) (+ fp16 copy write), bias alike
    const double n = static_cast<double>(o_.layers[l + 1]) * (o_.layers[l] + 1);
    return n * (8.0 + (o_.adam() ? 16.0 : 0.0) + (kHalf ? 2.0 : 0.0));
  }

  void enqueue_step_own(const StepRef& sr, std::map<std::string, KernelCost>* costs) {
    const auto& w = o_.layers;
    const double ob = sizeof(T);
    // Forward.
    if (L_ == 1) {
      FwdFirstLast p;
      p.M = B_, p.N = w[1], p.K = w[0];
      p.a = train_view(sr), p.b = make_view<T, false>(weights(0), p.K), p.epi = loss_epi(sr);
      finish(p, 0);
      launch_gemm<p5_fwd_softmax_ce, T>(p, st_, pdl_);
      add_cost(costs, "p5_fwd_softmax_ce", p, B_ * w[1] * ob, true);
    } else {
      FwdFirst p;
      p.M = B_, p.N = w[1], p.K = w[0];
      p.a = train_view(sr), p.b = make_view<T, false>(weights(0), p.K), p.epi = hidden_epi(0, H_[0].get(), sr, true);
      finish(p, 0);
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
    if (fused_bwd_) {  // fp16, batch <= 32: one pass over each layer's weights (fused_backward.cuh)
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
      launch_gemm_pair<p5_update_and_bwd_data, T>(u, d, st_, pdl_);
      add_cost(costs, "p5_update_and_bwd_data", u, update_bytes(l), true);
      add_cost(costs, "p5_update_and_bwd_data", d, static_cast<double>(B_) * w[l - 1] * 2 * ob, false);
    }
    auto u1 = update(1, sr, 0);
    auto u0 = update0(sr, 1);
    launch_gemm_pair<p5_update_pair, T>(u1, u0, st_, pdl_);
    add_cost(costs, "p5_update_pair", u1, update_bytes(1), true);
    add_cost(costs, "p5_update_pair", u0, update_bytes(0), false);
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
      lt_layers_[l]->backward_weight(dZ_[l].get(), input(l), G_.get() + woff_[l], st_);
      lt_cost(w[l + 1], w[l], B_);
      bias_grad_kernel<T><<<(w[l + 1] + 127) / 128, 128, 0, st_>>>(dZ_[l].get(), B_, w[l + 1], G_.get() + boff_[l]);
      CHECK_LAUNCH();
      if (l > 0) {
        lt_layers_[l]->backward_data(dZ_[l].get(), weights(l), Z_.get(), st_);
        lt_cost(B_, w[l], w[l + 1]);
        BwdReluEpi<T> e;
        e.h = H_[l - 1].get(), e.dz = dZ_[l - 1].get(), e.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
        launch_epilogue<p5_epi_bwd_relu>(Z_.get(), B_, w[l], e, st_);
      }
    }
    flat_update_kernel<<<ew_blocks(nparams_), 256, 0, st_>>>(P_.get(), G_.get(), o_.adam() ? M_.get() : nullptr,
                                                             o_.adam() ? V_.get() : nullptr, kHalf ? P16_.get() : nullptr,
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
    ee.bias = P_.get() + boff_[L_ - 1], ee.labels = test_y_.get(), ee.row_offset = c0;
    ee.tile_correct = eval_correct_.get(), ee.tile_loss = eval_loss_.get();
    if (L_ == 1) {
      EvalFirstLast p;
      p.M = rows, p.N = w[1], p.K = w[0], p.a = g, p.b = make_view<T, false>(weights(0), p.K), p.epi = ee;
      finish(p, 0);
      launch_gemm<p5_eval, T>(p, st_);
    } else if (l == 0) {
      FwdFirst p;
      p.M = rows, p.N = w[1], p.K = w[0], p.a = g, p.b = make_view<T, false>(weights(0), p.K);
      p.epi = hidden_epi(0, Heval_[0].get(), sr, false);
      finish(p, 0);
      launch_gemm<p5_eval, T>(p, st_);
    } else if (l + 1 < L_) {
      FwdHidden p;
      p.M = rows, p.N = w[l + 1], p.K = w[l];
      p.a = make_view<T, true>(Heval_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K);
      p.epi = hidden_epi(l, Heval_[l].get(), sr, false);
      finish(p, 0);
      launch_gemm<p5_eval, T>(p, st_);
    } else {
      EvalLast p;
      p.M = rows, p.N = w[l + 1], p.K = w[l];
      p.a = make_view<T, true>(Heval_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K), p.epi = ee;
      finish(p, 0);
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
        finish(p, 0);
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
        plan_splits_p5(p, dev_.sm_count);
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
  const bool cublas_, persistent_, cluster_;
  PersistParams persist_;
  PersistPlan plan_;
  ClusterParams cl_;
  ClusterPlan cl_plan_;
  void plan_cluster_kernel() {
    if constexpr (kHalf) {
      const auto& w = o_.layers;
      ClusterParams& p = cl_;
      p.images = train_x_.get(), p.labels = train_y_.get(), p.perm = perm_.get();
      p.L = L_, p.B = B_;
      for (int l = 0; l <= L_; ++l) p.w[l] = w[l];
      for (int l = 0; l < L_; ++l) p.woff[l] = woff_[l], p.boff[l] = boff_[l];
      p.P = P_.get(), p.P16 = P16_.get();
      p.lr = static_cast<float>(o_.lr);
      p.step_loss = step_loss_.get(), p.bad_step = bad_step_.get();
      cl_plan_ = cluster_rung_plan(p, o_.blocks, dev_.index);
      costs_per_step_["p5_cluster"] = cluster_rung_cost(p, cl_plan_);
    }
  }
  void plan_persistent_kernel() {
    const auto& w = o_.layers;
    PersistParams& p = persist_;
    p.images = train_x_.get(), p.labels = train_y_.get(), p.perm = perm_.get();
    p.D = w[0], p.H1 = w[1], p.H2 = w[2], p.C = w[3], p.B = B_;
    p.P = P_.get();
    if (o_.adam()) p.M = M_.get(), p.V = V_.get(), p.hyper = hyper_.get(), p.hyper_n = static_cast<int64_t>(hyper_.size());
    p.w0 = woff_[0], p.b0 = boff_[0], p.w1 = woff_[1], p.b1 = boff_[1], p.w2 = woff_[2], p.b2 = boff_[2];
    h1x_.alloc(2 * static_cast<size_t>(B_) * w[1]);
    h2x_.alloc(2 * static_cast<size_t>(B_) * w[2]);
    w2x_.alloc(2 * static_cast<size_t>(w[2]) * w[1]);
    p.h1x = h1x_.get(), p.h2x = h2x_.get(), p.w2x = w2x_.get();
    p.adam = o_.adam(), p.lr = static_cast<float>(o_.lr);
    p.dropout = o_.dropout > 0, p.key = dropout_key(o_.common.seed), p.threshold = dropout_threshold(o_.dropout);
    p.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
    p.step_loss = step_loss_.get(), p.bad_step = bad_step_.get();
    plan_ = persistent_rung_plan(p, o_.blocks, dev_.index, !o_.generic_kernel);
    costs_per_step_["p5_persistent"] = persistent_rung_cost(p, plan_);
  }
  DevBuf<xword> h1x_, h2x_, w2x_;
  DevBuf<unsigned long long> breakdown_;
  cudaStream_t st_{};
  size_t nparams_ = 0;
  std::vector<size_t> woff_, boff_;
  std::vector<double> packed(const DevBuf<float>& buf) const {
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

  DevBuf<float> P_, M_, V_, G_, Gdbg_;
  DevBuf<AdamHyper> hyper_;
  DevBuf<__half> P16_;
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

// --validate: the first K steps against the float64 reference (common/mlp/validate.h: each step
// re-anchored at the device's parameters; tolerances from the shape and the precision) on the same
// batches, with the same dropout masks (recomputed on the host from the same Philox bits); the
// gradients are the ones the fused update stores for this purpose only.
template <class T>
ValidationResult validate(Trainer<T>& tr, const MlpOptions& o, const Schedule& sc, const Dataset& ds,
                          const HostParams& init) {
  const bool half = std::is_same<T, __half>::value;
  const int K = static_cast<int>(std::min<int64_t>(o.validate_steps, sc.steps_per_epoch));
  const int B = o.batch, L = o.nlayers(), D = o.layers[0];
  const double scale = 1.0 / (1.0 - o.dropout);
  const uint64_t key = dropout_key(o.common.seed);
  const uint32_t thr = dropout_threshold(o.dropout);
  Perm perm;
  int64_t perm_epoch = -1;
  tr.keep_gradients(true);
  tr.reset();
  ValidationResult v = validate_steps(validate_spec(o), flatten(to_reference(init)), K, [&](int k) {
    StepSeen s;
    tr.single_step(k);
    CUDA_CHECK(cudaStreamSynchronize(tr.stream()));
    s.loss = tr.losses(k, 1)[0];
    s.x.resize(static_cast<size_t>(B) * D);
    s.labels.resize(B);
    for (int r = 0; r < B; ++r) {
      const uint32_t idx = sample_index(sc, o.common.seed, k, r, &perm, &perm_epoch);
      for (int j = 0; j < D; ++j) {
        const float f = static_cast<float>(ds.train_images.pixels[static_cast<size_t>(idx) * D + j]) / 255.0f;
        s.x[static_cast<size_t>(r) * D + j] = half ? static_cast<double>(__half2float(__float2half_rn(f))) : f;
      }
      s.labels[r] = ds.train_labels.labels[idx];
    }
    for (int l = 0; l + 1 < L && o.dropout > 0; ++l) {
      const int N = o.layers[l + 1];
      std::vector<double> m(static_cast<size_t>(B) * N);
      for (size_t i = 0; i < m.size(); ++i)
        m[i] = dropout_bits_host(key, static_cast<uint32_t>(l), static_cast<uint64_t>(k), static_cast<uint32_t>(i)) >= thr
                   ? scale
                   : 0.0;
      s.masks.push_back(std::move(m));
    }
    s.grads = tr.grads();
    s.params = tr.params();
    return s;
  });
  tr.keep_gradients(false);
  tr.reset();
  return v;
}

template <class T>
int train(const MlpOptions& o, const Cli& cli, const DeviceInfo& dev, const Dataset& ds, const Schedule& sc,
          const HostParams& init) {
  const bool cublas = o.gemm == "cublas";
  nlohmann::json rec = new_record(kPhase, o.workload, cublas ? "cuda-cublaslt" : "cuda", cli);
  rec["device"] = to_json(dev);
  rec["software"] = software_json(dev);
  rec["notes"].push_back(std::string("precision ") + o.precision +
                         (cublas ? "; products by cuBLASLt (compute 32F, no TF32), epilogues/optimizer our kernels"
                                 : "; own fused GEMM kernels"));
  rec["notes"].push_back(o.launch == "persistent"
                             ? "data resident on the GPU as bytes; per-epoch permutation generated on the device; "
                               "every epoch one cooperative persistent kernel (parameters in shared memory, two "
                               "tagged exchanges between blocks a step, no grid barrier); losses read once per epoch"
                         : o.launch == "cluster"
                             ? "data resident on the GPU as bytes; per-epoch permutation generated on the device; "
                               "every epoch one thread-block cluster kernel (parameters in the blocks' shared memory, "
                               "activations exchanged through distributed shared memory, a cluster barrier per "
                               "dependency between blocks); losses read once per epoch"
                             : "data resident on the GPU as bytes; per-epoch permutation generated on the device; "
                               "every step of an epoch replayed as one CUDA graph; losses read once per epoch");
  if (o.common.deterministic) rec["notes"].push_back("--deterministic: no float atomics are used in any case");

  size_t free0 = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  Trainer<T> tr(o, sc, dev, ds, init);

  Peaks peaks;
  if (o.common.measure_peaks) {
    peaks = measure_peaks();
    rec["peaks"] = to_json(peaks);
  }

  int rc = kExitOk;
  if (o.common.validate) {
    ValidationResult v = validate(tr, o, sc, ds, init);
    rec["validation"] = v.to_json();
    if (!cublas) rec["notes"].push_back("peak_device_memory_bytes includes the validation-only gradient buffer");
    if (!v.passed) rec["status"] = "validation_failed", rc = kExitValidation;
  } else {
    rec["validation"] = {{"performed", false}, {"passed", nullptr}};
  }

  // Capture the graphs (a full epoch, and the shorter last one of a --steps run) before timing.
  const int full = static_cast<int>(std::min<int64_t>(sc.steps_per_epoch, sc.total_steps));
  const int rem = static_cast<int>(sc.total_steps % sc.steps_per_epoch);
  // One step first: modules load and cuBLASLt does its first-call work outside the capture.
  tr.single_step(0);
  CUDA_CHECK(cudaStreamSynchronize(tr.stream()));
  tr.reset();
  HostTimer cap_timer;
  tr.prepare(full, rem);
  const double capture_ms = cap_timer.elapsed_ms();
  // Warm-up: `warmup` runs of the first epoch from the initial state, then back to it.
  for (int w = 0; w < o.common.warmup; ++w) {
    tr.run_epoch(0, full);
    CUDA_CHECK(cudaStreamSynchronize(tr.stream()));
    tr.reset();
  }
  size_t free1 = 0;
  CUDA_CHECK(cudaMemGetInfo(&free1, &total));
  if (o.breakdown && (tr.persistent() || tr.cluster())) tr.start_breakdown();
  const bool one_launch = tr.persistent() || tr.cluster();  // one kernel launch per epoch

  // One training run from the initial state: every epoch timed with events, its losses read back
  // once, then evaluated.
  struct Run {
    double total_ms = 0;
    std::vector<double> per_epoch_ms, epoch_loss, test_loss, test_acc;
    std::vector<float> step_losses;
    std::string diverged;
    int64_t steps = 0, launches = 0;
  };
  EventTimer timer(tr.stream());
  auto one_run = [&](bool first) {
    Run run;
    if (!first) tr.reset();
    for (int e = 0; e < sc.epochs && run.diverged.empty(); ++e) {
      throw_if_interrupted("training");
      const int64_t s0 = e * sc.steps_per_epoch;
      const int n = static_cast<int>(std::min(sc.steps_per_epoch, sc.total_steps - s0));
      timer.start();
      tr.run_epoch(s0, n);
      timer.stop();
      const double ms = timer.elapsed_ms();
      run.per_epoch_ms.push_back(ms);
      run.total_ms += ms;
      run.steps += n;
      run.launches += 1;
      const std::vector<float> ls = tr.losses(s0, n);  // the once-per-epoch read-back
      const int64_t bad = tr.bad_step();
      double sum = 0;
      for (float l : ls) sum += l;
      if (bad >= 0) {
        const int64_t upto = std::max<int64_t>(0, bad - s0 + 1);
        run.step_losses.insert(run.step_losses.end(), ls.begin(), ls.begin() + std::min<int64_t>(upto, n));
        run.diverged = "training diverged: non-finite loss at epoch " + std::to_string(bad / sc.steps_per_epoch) +
                       ", step " + std::to_string(bad % sc.steps_per_epoch) + " (global step " + std::to_string(bad) + ")";
        run.epoch_loss.push_back(NAN);
        break;
      }
      run.step_losses.insert(run.step_losses.end(), ls.begin(), ls.end());
      run.epoch_loss.push_back(sum / n);
      NvtxRange r(Cat::Eval, "evaluate");
      double tl = 0, ta = 0;
      tr.evaluate(&tl, &ta);
      run.test_loss.push_back(tl), run.test_acc.push_back(ta);
      std::printf("epoch %d: %.2f ms (%d steps)  train loss %.4f  test loss %.4f  test acc %.2f%%\n", e, ms, n,
                  run.epoch_loss.back(), tl, ta);
    }
    return run;
  };

  // The timed runs, without our CUPTI tracer (it adds ~2 us to every launch it watches, graph
  // nodes included: tracer_overhead record).
  std::vector<double> totals;
  Run last;
  int64_t measured_steps = 0;
  for (int rep = 0; rep < o.common.repeats && last.diverged.empty(); ++rep) {
    last = one_run(rep == 0);
    totals.push_back(last.total_ms);
    measured_steps += last.steps;
  }
  const std::vector<double> final_params = tr.params();  // the timed runs' result
  // --breakdown: the cycles of the timed runs only (the buffer is released here, so the traced run
  // below does not stamp).
  const std::vector<unsigned long long> breakdown_cycles =
      o.breakdown && one_launch ? tr.take_breakdown() : std::vector<unsigned long long>{};
  // Then one more run, untimed, with the tracer on: the kernel/memcpy/range summaries and the
  // efficiency table.
  Run traced;
  const std::optional<double> traced_ms = traced_run(rec, !last.diverged.empty(), o.common.no_cupti, [&] {
    traced = one_run(false);
    return traced.total_ms;
  });
  const std::string& diverged = last.diverged;
  const std::vector<float>& step_losses = last.step_losses;

  const Stats st = summarize(totals);
  rec["timing"] = timing_json("cuda-events",
                              tr.persistent()
                                  ? "per epoch: the permutation kernel and one cooperative launch of the persistent kernel"
                              : tr.cluster()
                                  ? "per epoch: the permutation kernel and one launch of the cluster kernel"
                                  : "per epoch: the permutation kernel and one CUDA-graph replay of all the epoch's steps",
                              one_launch
                                  ? std::string("data upload, validation, warm-up, the per-epoch loss read-back, "
                                                "evaluation")
                                  : "data upload, graph capture (" + std::to_string(capture_ms) +
                                        " ms host time), validation, warm-up, the per-epoch loss read-back, evaluation",
                              o.common.warmup, st, last.per_epoch_ms);
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
                    {"steps", static_cast<int64_t>(step_losses.size())},
                    {"launches_per_step", 0}};
  int64_t launches = 0;
  for (const auto& [k, c] : tr.costs_per_step()) launches += c.calls;
  rec["metrics"]["launches_per_step"] = launches;  // GEMM launches (cuBLASLt path: products only)
  rec["metrics"]["backward"] = tr.fused_backward() ? "fused" : "paired";  // own graph path's backward kernels
  rec["metrics"]["pdl"] = tr.pdl();  // own graph path: kernels launched with programmatic dependent launch
  // --breakdown of a one-launch kernel: block 0's cycles per part, as shares of the median step
  auto breakdown_parts = [&](const char* (*name)(int), int n) {
    nlohmann::json parts = nlohmann::json::array();
    const std::vector<unsigned long long>& cyc = breakdown_cycles;
    double sum = 0;
    for (unsigned long long c : cyc) sum += static_cast<double>(c);
    const double per_step_ms = step_losses.empty() ? 0.0 : st.median / static_cast<double>(step_losses.size());
    std::printf("%s step breakdown (block 0, thread 0; share of its cycles):\n", o.launch.c_str());
    for (int i = 0; i < n; ++i) {
      const double share = sum > 0 ? cyc[i] / sum : 0.0;
      parts.push_back({{"part", name(i)},
                       {"cycles_per_step", measured_steps > 0 ? cyc[i] / static_cast<double>(measured_steps) : 0.0},
                       {"share", share},
                       {"us_per_step", share * per_step_ms * 1e3}});
      std::printf("  %5.1f%%  %6.2f us  %s\n", 100 * share, share * per_step_ms * 1e3, name(i));
    }
    return parts;
  };
  if (tr.persistent()) {
    const PersistPlan& pl = tr.persist_plan();
    rec["metrics"]["launches_per_step"] = nullptr;  // one launch per epoch, whatever the step count
    nlohmann::json parts;
    if (o.breakdown) parts = breakdown_parts(persist_segment_name, kPersistSegments);
    rec["metrics"]["persistent"] = {{"blocks", pl.blocks},
                                    {"threads_per_block", kPersistThreads},
                                    {"first_layer_units_per_block", pl.nc},
                                    {"second_layer_units_per_block", pl.nj},
                                    {"shared_memory_bytes_per_block", pl.smem},
                                    {"exchanges_per_step", 2},
                                    {"grid_barriers_per_step", 0},
                                    {"shape_compiled_in", pl.specialized}};
    if (o.breakdown) rec["metrics"]["persistent"]["step_breakdown"] = parts;
  }
  if (tr.cluster()) {
    const ClusterPlan& pl = tr.cluster_plan();
    rec["metrics"]["launches_per_step"] = nullptr;  // one launch per epoch, whatever the step count
    rec["metrics"]["cluster"] = {{"blocks", pl.blocks},
                                 {"threads_per_block", kClThreads},
                                 {"shared_memory_bytes_per_block", pl.smem},
                                 {"cluster_barriers_per_step", 2 * o.nlayers() - 3}};
    if (o.breakdown) rec["metrics"]["cluster"]["step_breakdown"] = breakdown_parts(cluster_segment_name, kClSegments);
  }
  // fingerprint of the final parameters: --deterministic runs must reproduce it bit for bit
  // (float32 values widened exactly; narrowing is exact)
  rec["metrics"]["param_checksum"] = float_checksum(std::vector<float>(final_params.begin(), final_params.end()));
  if (traced_ms) {
    std::map<std::string, KernelCost> costs;  // over the traced run, as the tracer's totals are
    for (const auto& [k, c] : tr.costs_per_step())
      costs[k] = KernelCost{c.flops * traced.steps, c.bytes * traced.steps,
                            one_launch ? traced.launches : c.calls * traced.steps};
    rec["efficiency"] = efficiency_json(rec["kernels"], costs, o.common.measure_peaks ? &peaks : nullptr);
  }
  if (!diverged.empty()) rec["status"] = "diverged", rec["notes"].push_back(diverged);
  const std::string path = write_record(rec, o.common.out, dev.slug, kPhase, o.common.tag);
  std::printf("record: %s\n", path.c_str());
  if (!diverged.empty()) throw Error(kExitDiverged, diverged);
  if (rc == kExitValidation) throw Error(kExitValidation, "validation failed (see the errors above and in " + path + ")");
  return rc;
}

// --gemm-compare: our plain GEMM (fp32 tile stored, no fused epilogue; phase 5's split planning and
// fix-up) against cuBLASLt on the three products of the configured model's largest layer, fresh
// random operands, outputs poisoned, 5 warm-ups and 30 timed launches each (median).
template <class Dummy = void>
__global__ void fill_random_kernel(float* x, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = static_cast<float>(static_cast<double>(splitmix64(seed ^ splitmix64(i)) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

// The plain fp32 store, with phase 5's split-K fix-up (float4 partials; see kernels.cuh), which is
// how the trainer's own GEMMs sum their slices.
struct CompareStoreEpi : StoreEpi {
  static constexpr bool kVecFixup = true;
};

template <class T>
int gemm_compare(const MlpOptions& o, const Cli& cli, const DeviceInfo& dev) {
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

  nlohmann::json rec = new_record(kPhase, o.workload, "cuda-vs-cublaslt", cli);
  rec["device"] = to_json(dev);
  rec["software"] = software_json(dev);
  rec["timing"] = timing_json("cuda-events", "one launch of each product (median of 30 after 5 warm-ups)",
                              "operand generation, planning", 5, summarize(own_total));
  rec["metrics"] = {{"gemm_compare", rows}, {"layer", l}, {"in", in}, {"out", out}, {"batch", B}};
  rec["notes"].push_back("own = the phase 4/5 GEMM mainloop, planned and with the split-K fix-up as phase 5's trainer runs it, "
                         "and a plain fp32 store epilogue (no fusion); timing.total_ms "
                         "samples are the own medians of forward, dgrad, wgrad");
  rec["validation"] = {{"performed", false}, {"passed", nullptr}};
  const std::string path = write_record(rec, o.common.out, dev.slug, kPhase, o.common.tag);
  std::printf("record: %s\n", path.c_str());
  return kExitOk;
}

int run(int argc, char** argv) {
  MlpOptions o;
  bool compare = false;
  Cli cli(kPhase, "MNIST MLP, batched: data on the GPU, fused kernels, one CUDA graph per epoch.");
  add_mlp_flags(cli, o, true);
  cli.add_string("--launch", &o.launch,
                 "how an epoch is launched: one CUDA graph of fused kernels, one persistent cooperative kernel "
                 "(fp32, two hidden layers, own GEMMs), or one thread-block cluster kernel (fp16, SGD, no dropout, "
                 "batch <= 32, a model that fits the cluster's shared memory: W2 at h = 128)",
                 {"graph", "persistent", "cluster"});
  cli.add_int("--blocks", &o.blocks,
              "blocks of the persistent kernel (0 = one per first-layer unit, at most one per SM) or of the cluster "
              "(0 = the largest that fits, at most 16)",
              0, 4096);
  cli.add_flag("--generic-kernel", &o.generic_kernel,
               "persistent kernel: its generic instance even for W1's shape (measures what compiling the shape in "
               "buys)");
  cli.add_string("--backward", &o.backward,
                 "fp16 graph path: each layer's update and backward-data product in one pass over its weights "
                 "(fused; batch <= 32, widths multiples of 8), or the paired GEMM kernels; auto = fused with SGD",
                 {"auto", "fused", "paired"});
  cli.add_string("--pdl", &o.pdl,
                 "own graph path: launch each step kernel with programmatic dependent launch, so that it starts (and "
                 "fetches its weights) while the kernel before it finishes (compute capability 9.0 and up; off below)",
                 {"on", "off"});
  cli.add_flag("--breakdown", &o.breakdown,
               "persistent and cluster kernels: time the parts of a step (clock stamps of block 0) into the record");
  cli.add_flag("--gemm-compare", &compare,
               "only time our GEMM against cuBLASLt on the largest layer's three products (no training)");
  if (!cli.parse(argc, argv)) return 0;
  check_mlp_options(o);
  if (o.layers.back() > kBN) throw Error(kExitUsage, "--layers: the last width must fit one tile");
  if (o.launch == "persistent" && (o.nlayers() != 3 || o.fp16() || o.gemm != "own"))
    throw Error(kExitUsage, "--launch persistent: needs two hidden layers (--layers 784,H1,H2,10), --precision fp32 "
                            "and --gemm own");
  if (o.launch == "cluster" && (!o.fp16() || o.adam() || o.dropout > 0 || o.gemm != "own"))
    throw Error(kExitUsage, "--launch cluster: needs --precision fp16, --optimizer sgd, --dropout 0 and --gemm own");
  check_output_dir(o.common.out);  // a bad --out fails now (exit 6), not after training
  if (compare) {
    const DeviceInfo dev = require_device();
    return o.fp16() ? gemm_compare<__half>(o, cli, dev) : gemm_compare<float>(o, cli, dev);
  }
  const MlpSetup s = prepare_mlp_run(o);
  const DeviceInfo dev = require_device();
  return o.fp16() ? train<__half>(o, cli, dev, s.ds, s.sc, s.init) : train<float>(o, cli, dev, s.ds, s.sc, s.init);
}

}  // namespace
}  // namespace nb

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, nb::run); }
