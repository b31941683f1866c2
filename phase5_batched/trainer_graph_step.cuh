// phase5_batched/trainer_graph_step.cuh — the Trainer's graph step (rungs 5a/5b), defined out of the
// class: a step's products with their epilogues and split-K plans (own GEMMs or cuBLASLt), the
// fused backward's plan, the enqueue of a step's kernels, the capture of an epoch's steps into a
// CUDA graph and its replay, and the split-K workspaces. Included by trainer.cuh after the class.
#pragma once

namespace nb {
namespace {

// Enqueues the kernels of step base + i on the stream (captured into the graphs, or run directly).
template <class T>
void Trainer<T>::enqueue_step(int i, std::map<std::string, KernelCost>* costs, bool next) {
  const StepRef sr{base_.get(), i};
  if (cublas_) enqueue_step_cublas(sr, costs);
  else enqueue_step_own(sr, costs, next);
}

// The graph of `count` consecutive steps, and after them the kernel that forms their mean losses.
template <class T>
cudaGraphExec_t Trainer<T>::instantiate(int count, std::map<std::string, KernelCost>* costs) {
  cudaGraph_t graph{};
  cudaGraphExec_t g{};
  CUDA_CHECK(cudaStreamBeginCapture(st_, cudaStreamCaptureModeThreadLocal));
  fwd0_done_ = false;  // (a graph's first step runs its own first forward)
  for (int i = 0; i < count; ++i) enqueue_step(i, costs, i + 1 < count);
  enqueue_step_losses(StepRef{base_.get(), 0}, count);
  CUDA_CHECK(cudaStreamEndCapture(st_, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&g, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return g;
}

// Captures the graph of `count` consecutive steps (once per count).
template <class T>
void Trainer<T>::capture(int count) {
  cudaGraphExec_t& g = graphs_[count];
  if (g) return;
  std::map<std::string, KernelCost> costs;
  g = instantiate(count, &costs);
  if (costs_per_step_.empty())
    for (auto& [k, c] : costs) costs_per_step_[k] = KernelCost{c.flops / count, c.bytes / count, c.calls / count};
}

// Steps [0, count) of the first epoch as one replay of a graph captured for this call only (not
// kept: --validate's steps store their gradients besides, which the timed graphs must not).
template <class T>
void Trainer<T>::replay_once(int count) {
  cudaGraphExec_t g = instantiate(count, nullptr);
  launch_epoch_permutation(0);
  CUDA_CHECK(cudaGraphLaunch(g, st_));
  CUDA_CHECK(cudaStreamSynchronize(st_));
  CUDA_CHECK(cudaGraphExecDestroy(g));
}

// Runs steps [first, first + count) (all inside first's epoch): permutation kernel + graph replay.
template <class T>
void Trainer<T>::run_graph(int64_t first, int count) {
  capture(count);
  launch_epoch_permutation(first);
  CUDA_CHECK(cudaGraphLaunch(graphs_[count], st_));
}

// The own graph step's GEMM plan: every product of a training step with its shape, the rung that
// computes it and its K slices (under 5b's fused backward, the forward products only: the backward
// is the fused pass; empty on the other paths). Printed at the start, kept in the record.
template <class T>
nlohmann::json Trainer<T>::gemm_plan() const {
  nlohmann::json out = nlohmann::json::array();
  if (cublas_ || rung_.one_launch()) return out;
  const StepRef sr{nullptr, 0};
  auto add = [&](const std::string& name, const auto& p) {
    const char* rung = p.rung == GemmRung::TF32x3   ? "tf32x3"
                       : p.rung == GemmRung::Fma64  ? "fma64"
                       : p.rung == GemmRung::F16Mma ? "f16-mma"
                       : p.rung == GemmRung::F16Stream ? (sr_narrow(p) ? "f16-stream-narrow" : "f16-stream")
                       : p.rung == GemmRung::F16StreamStaged ? "f16-stream-staged"
                       : p.rung == GemmRung::F16Wgmma ? "f16-wgmma"
                       : p.rung == GemmRung::I8Digits ? "i8-digits"
                       : kHalf                      ? "tile-wmma"
                                                    : "tile-simt";
    out.push_back({{"product", name}, {"M", p.M}, {"N", p.N}, {"K", p.K}, {"rung", rung}, {"splits", p.splits}});
    if (p.cluster) out.back()["handover"] = "cluster";  // (step 8: the slices as one cluster, 8_stream_rows.cuh)
  };
  if (row_chain_) {  // the first layer's forward, the row chain, the three updates
    add("forward 0", stream_rows_launched<p5_fwd_gather>(fwd_first(sr)));
    out.push_back({{"product", "row chain 1-2"}, {"M", batch_}, {"N", o_.layers[2]}, {"K", o_.layers[1]},
                   {"rung", "row-chain"}, {"splits", 1}});
    for (int l = nlayers_ - 1; l >= 1; --l) add("weight-gradient " + std::to_string(l), update(l, sr, 0));
    add("weight-gradient 0", update0(sr, 1));
    return out;
  }
  // (step 8's forwards as launched: fewer slices where their clusters do not all fit the GPU)
  if (nlayers_ > 1) {
    add("forward 0", stream_rows_launched<p5_fwd_gather>(fwd_first(sr)));
    if (next_fwd_) out.back()["note"] = "a graph's first step; the others': in the first layer's pass of the step before";
  } else {  // one layer: gather + softmax-CE, planned by its shape (no rung takes it by its views)
    FwdFirst f;
    f.M = batch_, f.N = o_.layers[1], f.K = o_.layers[0];
    plan_splitk_into_slot(f, 0);
    add("forward 0", f);
  }
  for (int l = 1; l + 1 < nlayers_; ++l)
    add("forward " + std::to_string(l), stream_rows_launched<p5_fwd_hidden>(fwd_hidden(l, sr)));
  if constexpr (kHalf) {
    if (last_tail_) {  // (the last layer's fused pass runs in this product's cluster)
      add("forward " + std::to_string(nlayers_ - 1), stream_rows_launched<p5_fwd_softmax_ce_bwd>(fwd_last_bwd(sr)));
      out.back()["tail"] = "backward " + std::to_string(nlayers_ - 1);
      add_fused_passes(out);
      return out;
    }
  }
  if (nlayers_ > 1) add("forward " + std::to_string(nlayers_ - 1), stream_rows_launched<p5_fwd_softmax_ce>(fwd_last(sr)));
  if (fused_bwd_) add_fused_passes(out);
  if (fused_bwd_) return out;
  for (int l = nlayers_ - 1; l >= 1; --l) add("backward-data " + std::to_string(l), bwd_data(l, 0));
  for (int l = nlayers_ - 1; l >= 1; --l) add("weight-gradient " + std::to_string(l), update(l, sr, 0));
  add("weight-gradient 0", update0(sr, 1));
  return out;
}

// The fused backward passes as launched (5b_fused_backward.cuh), after the forwards in the plan: a
// layer's weights M x N, K = the batch, its row slices, their hand-over and warps a block.
template <class T>
void Trainer<T>::add_fused_passes(nlohmann::json& out) const {
  const StepRef sr{nullptr, 0};
  for (int l = last_tail_ ? nlayers_ - 2 : nlayers_ - 1; l >= 0; --l) {
    const FusedBwdParams p = fused_params(l, sr);
    const FusedBwdParams q = l > 0 ? fused_bwd_launched<p5_fused_update_bwd>(p) : p;
    out.push_back({{"product", "backward " + std::to_string(l)}, {"M", q.M}, {"N", q.N}, {"K", q.B},
                   {"rung", "fused-pass"}, {"splits", q.splits}, {"warps", l > 0 ? q.warps : kFbThreadsUpdate / 32}});
    if (q.cluster) out.back()["handover"] = "cluster";
    if (l == 0 && next_fwd_) {
      out.back()["then"] = "forward 0 of the next step";
      out.back()["next_handover"] = next_cluster_ ? "cluster" : "global";
    }
  }
}

// ----- a step's operands and epilogues
template <class T>
auto Trainer<T>::weights(int l) const -> const T* {
  if constexpr (kHalf) return params16_.get() + woff_[l];
  else return params_.get() + woff_[l];
}
template <class T>
RowMap Trainer<T>::train_rows(const StepRef& sr) const {
  RowMap r;
  r.perm = perm_.get(), r.i = sr.i, r.batch = batch_;
  return r;
}
template <class T>
auto Trainer<T>::train_view(const StepRef& sr) const -> GatherView<T> {
  GatherView<T> g;
  g.data = train_x_.get(), g.ld = o_.layers[0], g.rows = train_rows(sr);
  return g;
}
template <class T>
auto Trainer<T>::hidden_epi(int l, T* out, const StepRef& sr, bool dropout) const -> FwdHiddenEpi<T> {
  FwdHiddenEpi<T> e;
  e.bias = params_.get() + boff_[l], e.out = out;
  e.dropout = dropout && o_.dropout > 0;
  e.key = dropout_key(o_.common.seed), e.layer = static_cast<uint32_t>(l);
  e.threshold = dropout_threshold(o_.dropout);
  e.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
  e.step = sr;
  return e;
}
template <class T>
auto Trainer<T>::loss_epi(const StepRef& sr) const -> SoftmaxCEEpi<T> {
  SoftmaxCEEpi<T> e;
  e.bias = params_.get() + boff_[nlayers_ - 1], e.labels = train_y_.get(), e.rows = train_rows(sr);
  e.dz = dZ_[nlayers_ - 1].get(), e.dz_colsum = dz_colsum(nlayers_ - 1);
  e.tile_loss = tile_loss_.get(), e.step = sr;
  return e;
}
template <class T>
auto Trainer<T>::update_epi(int l, const StepRef& sr) const -> UpdateEpi<T> {
  UpdateEpi<T> e;
  e.W = params_.get() + woff_[l], e.b = params_.get() + boff_[l];
  if (o_.adam()) {
    e.mW = adam_m_.get() + woff_[l], e.vW = adam_v_.get() + woff_[l], e.mb = adam_m_.get() + boff_[l], e.vb = adam_v_.get() + boff_[l];
  }
  if (kHalf) e.W16 = params16_.get() + woff_[l];
  e.dz = dZ_[l].get(), e.dz_colsum = dz_colsum(l), e.batch = batch_, e.adam = o_.adam(), e.lr = static_cast<float>(o_.lr);
  e.step = sr;
  if (o_.adam()) e.hyper = hyper_.get(), e.hyper_n = static_cast<int64_t>(hyper_.size());
  if (grads_debug_.size()) e.grad_out = grads_debug_.get() + woff_[l], e.bgrad_out = grads_debug_.get() + boff_[l];
  return e;
}
// The fused backward pass of layer l (fp16 runs): its update and, for l > 0, dZ_[l-1].
template <class T>
FusedBwdParams Trainer<T>::fused_params(int l, const StepRef& sr) const {
  FusedBwdParams p;
  if constexpr (kHalf) {
    const UpdateEpi<T> e = update_epi(l, sr);
    p.M = o_.layers[l + 1], p.N = o_.layers[l], p.B = batch_;
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
    plan_fused_bwd(p, dev_.sm_count, o_.handover == "cluster" && dev_.cc_major >= 9);
    // 4-warp blocks unless --fused-warps 8 (5b_fused_backward.cuh's card, "8-warp blocks"; measured both ways
    // at every width, neither wins at all of them).
    p.warps = o_.fused_warps == "8" ? 8 : 4;
    p.evict_masters = evict_masters_;
    p.ws = fb_ws_.get(), p.counters = fb_counters_.get();
  }
  return p;
}
// The first layer's pass with the next step's first forward (next_fwd_, 5b_fused_backward.cuh):
// step sr.i + 1's rows of the byte images, its epilogue into H_0 (the bias this pass updates).
template <class T>
FusedBwdParams Trainer<T>::fused_first_next(const StepRef& sr) const {
  FusedBwdParams p = fused_params(0, sr);
  if constexpr (kHalf) {
    const StepRef nx{sr.base, sr.i + 1};
    p.next_fwd = true;
    p.next_rows = train_rows(nx);
    p.next = hidden_epi(0, H_[0].get(), nx, true);
    p.fws = fn_ws_.get(), p.fcnt = fn_counters_.get();
    p.next_cluster = next_cluster_;
  }
  return p;
}
// Whether the fused backward pass runs (fp16 own kernels, batch <= 32, every width a multiple
// of 8; --backward fused, or auto with SGD); sizes its workspace.
template <class T>
void Trainer<T>::plan_fused_backward() {
  fused_bwd_ = false, next_fwd_ = false, next_cluster_ = false, evict_masters_ = false;
  if constexpr (kHalf) {
    // auto: SGD only. The fused kernel reads Adam's moments with plain loads in its optimizer
    // pass, a serial round trip per 32-row sub-tile, and W1 (Adam, small layers, grids of 1-52
    // blocks) ran slower with it: 62.2 against 54.5 us a step (H100, dev runs at 340c0c2).
    if (cublas_ || !rung_.plans_fused_backward || o_.backward == "paired" || o_.backward == "branched") return;
    if (o_.backward == "auto" && o_.adam()) return;
    for (int l = 0; l < nlayers_; ++l)
      if (!fused_bwd_supported(o_.layers[l], batch_)) return;
    fused_bwd_setup<p5_fused_update_bwd>();
    fused_bwd_setup<p5_fused_update_first>();
    size_t ws = 1, tiles = 1;
    for (int l = 0; l < nlayers_; ++l) {
      const FusedBwdParams p = fused_params(l, StepRef{nullptr, 0});
      ws = std::max(ws, fused_bwd_ws_floats(p));
      tiles = std::max(tiles, static_cast<size_t>(p.tiles_n()));
    }
    fb_ws_.alloc(ws);
    fb_counters_.alloc(tiles);
    CUDA_CHECK(cudaMemset(fb_counters_.get(), 0, fb_counters_.bytes()));
    fused_bwd_ = true;
    // The masters evict-first in L2 (--l2-evict; auto: l2_policy.h's rule, where it measured faster).
    evict_masters_ = o_.l2_evict == "on" || (o_.l2_evict == "auto" && l2_evict_masters_pays(o_.layers, dev_.l2_bytes));
    // The next step's first forward in the first layer's pass (--next-forward): its partials'
    // workspace and a counter a row slice. auto: where every row slice's column tiles run as one
    // cluster at once and a slice holds at most two 32-row sub-tiles (h <= 1,024 for 784 inputs):
    // each sub-tile adds ~1.8 us to the pass, where the forward's kernel cost the step ~2-3 us with
    // PDL (H100, W2's step 49.14 -> 47.06 us at h = 1,024, two sub-tiles a slice; 84.66 -> 84.77 at
    // 2,048, three; 215.14 -> 221.18 and 680.16 -> 687.08 at 4,096 and 8,192, where 23 of 26 and 29
    // clusters fit at once; nvidia-h100-80gb-hbm3/logs/nextfwd_0a968ad/once_fa6d7e3/).
    if (nlayers_ >= 2 && o_.next_forward != "kernel") {
      FusedBwdParams f = fused_params(0, StepRef{nullptr, 0});
      f.next_fwd = true;
      const int held = o_.handover == "cluster" && dev_.cc_major >= 9 ? fused_next_clusters<p5_fused_update_first>(f) : 0;
      if (o_.next_forward == "pass" || (held >= f.splits && f.rows_per_split <= 2 * kFbRows)) {
        fn_ws_.alloc(fused_next_ws_floats(f));
        fn_counters_.alloc(static_cast<size_t>(f.splits));
        CUDA_CHECK(cudaMemset(fn_counters_.get(), 0, fn_counters_.bytes()));
        next_fwd_ = true;
        // A row slice's column tiles hand over as one cluster where one fits (not all at once: noted).
        next_cluster_ = held >= 1;
        if (next_cluster_ && held < f.splits)
          std::fprintf(stderr, "note: the first layer's pass (%d x %d): %d clusters of %d column tiles fit this GPU at once, of %d\n",
                       f.M, f.N, held, f.tiles_n(), f.splits);
      }
    }
    // The last layer's pass as softmax-CE's cluster tail (--last-pass): where softmax-CE runs on step
    // 8's narrow kernel with its slices as one cluster (sm_90) and the tail's buffers are aligned;
    // auto, only where each slice's columns are one round of the tail (K <= 16 x 128 = 2,048): with
    // two or four rounds (h = 4,096, 8,192) the later rounds' loads wait in the tail, and the pass of
    // its own, whose first loads PDL overlaps with softmax-CE, was faster (H100, W2's step 212.77 ->
    // 214.05 and 673.86 -> 677.63 us; 1,024 and 2,048: 49.46 -> 48.41 and 85.69 -> 83.46,
    // nvidia-h100-80gb-hbm3/logs/lastpass_2728530/).
    const StepRef sr{nullptr, 0};
    if (nlayers_ >= 2 && o_.last_pass != "kernel" && o_.handover == "cluster" && dev_.cc_major >= 9) {
      const FwdLast q = fwd_last(sr);
      last_tail_ = q.rung == GemmRung::F16Stream && sr_narrow(q) && last_bwd_tail_aligned(fwd_last_bwd(sr).epi) &&
                   (o_.last_pass == "tail" || q.kchunk <= kLtCols);
    }
  }
}
// --backward: branched (below) unless paired is asked for or the fused backward runs (auto). The
// updates leave the backward-data chain for a second branch of the graph; the chain and the first
// layer's update are the step's critical path. W1's step was faster branched at every batch of the
// sweep, 32 ... 8,192, also where each pair of the paired backward is one launch (batch 128:
// 42.08 against 38.88 us; profiles/nvidia-h200/logs/bytes_16be240/ab/).
template <class T>
void Trainer<T>::plan_branches() {
  branched_ = false;
  if (cublas_ || rung_.one_launch() || fused_bwd_ || nlayers_ < 2 || o_.backward == "paired") return;
  CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  branched_ = true;
}

// --row-chain on: W1's middle in one kernel (5a_row_chain.cuh). It runs where the step's backward
// is branched (the three updates fork from it) on the own graph path with two hidden layers whose
// layout fits a block's shared memory; anything else asked for is refused (exit 2). auto (the
// default): on where it can run and the batch is at most kRowChainAutoBatch (fp32: 64, fp16: 32),
// where it measured faster than the four kernels it replaces (H200, logs/next_c3c7d16/: fp32 35.06 ->
// 33.90 us a step at batch 32, 37.01 -> 35.93 at 64; fp16 40.29 -> 39.45 at 32, but 41.40 -> 41.93 at
// 64 and slower at 1,024 and 8,192 in both, where one block's 32 rows are no longer the whole batch).
template <class T>
void Trainer<T>::plan_row_chain() {
  row_chain_ = false;
  if (o_.row_chain == "off") return;
  const bool ask = o_.row_chain == "on";
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev_.index));
  const auto& w = o_.layers;
  const bool can = !cublas_ && !rung_.one_launch() && nlayers_ == 3 && branched_;
  if (!ask && !(can && batch_ <= kRowChainAutoBatch<T> && row_chain_fits(w[1], w[2], w[3], static_cast<size_t>(optin))))
    return;
  const auto refuse = [](const std::string& why) { throw Error(kExitUsage, "--row-chain on: " + why); };
  if (cublas_ || rung_.one_launch()) refuse("the own graph path only (--gemm own, --launch graph)");
  if (nlayers_ != 3) refuse("two hidden layers only (W1's shape); --layers has " + std::to_string(nlayers_ - 1));
  if (!branched_) refuse("with the branched backward only (--backward auto chose the fused one here: fp16, SGD, batch <= 32; "
                         "pass --backward branched)");
  if (!row_chain_fits(w[1], w[2], w[3], static_cast<size_t>(optin)))
    refuse("widths " + std::to_string(w[1]) + " / " + std::to_string(w[2]) + " / " + std::to_string(w[3]) + " need " +
           std::to_string(RowChainLayout(w[1], w[2], w[3]).bytes()) + " bytes of shared memory a block (the device has " +
           std::to_string(optin) + "; classes at most " + std::to_string(kBN) + ")");
  row_chain_setup<T>(RowChainLayout(w[1], w[2], w[3]).bytes());
  row_chain_ = true;
}
template <class T>
RowChainParams<T> Trainer<T>::row_chain_params(const StepRef& sr) const {
  const auto& w = o_.layers;
  const FwdHiddenEpi<T> h = hidden_epi(1, H_[1].get(), sr, true);
  RowChainParams<T> p;
  p.M = batch_, p.n0 = w[1], p.n1 = w[2], p.n2 = w[3];
  p.h0 = H_[0].get(), p.w1 = weights(1), p.b1 = params_.get() + boff_[1], p.w2 = weights(2), p.b2 = params_.get() + boff_[2];
  p.h1 = H_[1].get();
  p.dropout = h.dropout, p.key = h.key, p.threshold = h.threshold;
  p.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
  p.labels = train_y_.get(), p.rows = train_rows(sr), p.step = sr;
  p.dz2 = dZ_[2].get(), p.dz2_colsum = dz_colsum(2), p.tile_loss = tile_loss_.get();
  p.dz1 = dZ_[1].get(), p.dz1_colsum = dz_colsum(1);
  p.dz0 = dZ_[0].get(), p.dz0_colsum = dz_colsum(0);
  return p;
}

// Plans a product's split-K and points it at workspace slot `slot`. size_ws() sized the slots
// for every product shape; a shape it missed would write past the workspace (as the last,
// shorter evaluation chunk did at h = 2048 on the cuBLASLt path before size_ws counted it), so
// refuse it here instead (exit 9).
template <class T>
template <class P>
void Trainer<T>::plan_splitk_into_slot(P& p, int slot) const {
  p.ws = ws_[slot].get(), p.counters = counters_[slot].get();
  plan_splits_p5(p, dev_.sm_count);
  if constexpr (!kHalf) {
    if (use_tf32x3(fp32_gemm_, p.M, p.N, p.K)) {
      if (fp32_gemm_ == Fp32Gemm::Fma) plan_fma64(p, dev_.sm_count);
      else plan_tf32x3(p, dev_.sm_count);
      // auto: the first layer's forward on step 10 (fwd_first points B at W0's digits).
      if constexpr (std::is_same<P, FwdFirst>::value) {
        if (use_i8digits(fp32_gemm_) && i8digits_ok(p, 10 * dev_.cc_major + dev_.cc_minor)) plan_i8digits(p, dev_.sm_count);
      }
    }
  } else {
    if (use_f16mma(o_.fp16_gemm, p.M, p.N, p.K, ByteRows<typename P::BView>::value)) plan_f16mma(p, dev_.sm_count);
    // --fp16-gemm wgmma: the first layer's products (the gathered bytes, an operand) on step 9.
    if constexpr (std::is_same<P, FwdFirst>::value || std::is_same<P, FwdFirstLast>::value ||
                  std::is_same<P, UpdateFirstGemm>::value) {
      if (o_.fp16_gemm == "wgmma" && wgmma_ok(p, 10 * dev_.cc_major + dev_.cc_minor)) plan_f16wgmma(p, dev_.sm_count);
    }
    // The forwards of a small batch: their weights streamed (GEMM step 8) where the rule says.
    if constexpr (std::is_same<P, FwdFirst>::value || std::is_same<P, FwdHidden>::value ||
                  std::is_same<P, FwdLast>::value || std::is_same<P, FwdLastBwd>::value) {
      constexpr bool kLast = std::is_same<P, FwdLast>::value || std::is_same<P, FwdLastBwd>::value;
      if (use_stream_rows(o_.fp16_stream, p.M, p.N, p.K, kLast) && stream_rows_ok(p))
        plan_stream_rows(p, dev_.sm_count, use_staged_rows(o_.fp16_stream, p.N),
                         o_.handover == "cluster" && dev_.cc_major >= 9);
    }
  }
  // fp32, branched backward: the upper layers' weight gradients (the side branch, beside the first
  // layer's, which the plan sizes for one wave of two blocks an SM) in at most kSideMaxSlices slices of
  // the 32 x 64 tile, where plan_splits_p5 gives them four waves' worth (W1 at batch 8,192: 128 and
  // 256 slices). Their blocks get SMs only as the first layer's leave, and thinner slices add
  // partials to store and add. Measured (H100, W1, one probe build over the slice counts, 3 rounds;
  // nvidia-h100-80gb-hbm3/logs/sideslices_91f7b7b/): 64 slices took the fp32 step 124.5 -> 121.8 us
  // at batch 8,192 and 90.7 -> 87.0 at 4,096, 16 or 8 slices made it slower (136.0, 145.6), 256 or
  // 512 too (130); the fp16 step lost with every count tried (88.3 -> 91.4-93.4 at 8,192), so fp16
  // keeps the plan. Below batch 4,096 the cap does not bind (K = batch: at most 64 k-tiles).
  if constexpr (!kHalf && std::is_same<P, UpdateGemm>::value) {
    if (branched_ && p.splits > kSideMaxSlices) plan_splits(p, dev_.sm_count, 4, kSideMaxSlices, 1);
  }
  if (ws_[slot].size() == 0) return;  // size_ws() has not run yet (it plans shapes through here)
  if (ws_floats(p) > ws_[slot].size() || counter_slots(p) > counters_[slot].size())
    throw Error(kExitInternal, "split-K workspace " + std::to_string(slot) + " too small for a " + std::to_string(p.M) +
                                   " x " + std::to_string(p.N) + " x " + std::to_string(p.K) + " product in " +
                                   std::to_string(p.splits) + " splits (internal error: size_ws missed its shape)");
}
template <class T>
template <class P>
void Trainer<T>::add_cost(std::map<std::string, KernelCost>* costs, const std::string& tag, const P& p,
                          double extra_bytes, bool count_call) const {
  if (!costs) return;
  KernelCost& c = (*costs)[tag];
  c.flops += 2.0 * p.M * p.N * p.K;
  c.bytes += (static_cast<double>(p.M) * p.K + static_cast<double>(p.K) * p.N) * sizeof(T) + extra_bytes;
  if (count_call) c.calls += 1;
}

// ----- own fused kernels
template <class T>
auto Trainer<T>::fwd_first(const StepRef& sr) const -> FwdFirst {
  const auto& w = o_.layers;
  FwdFirst p;
  p.M = batch_, p.N = w[1], p.K = w[0];
  p.a = train_view(sr), p.b = make_view<T, false>(weights(0), p.K), p.epi = hidden_epi(0, H_[0].get(), sr, true);
  p.b_fresh = true;  // W0: the step before's last kernel updated it
  plan_splitk_into_slot(p, 0);
  if constexpr (!kHalf) {
    if (p.rung == GemmRung::I8Digits) p.b = i8_digit_view(w0_digits_.get(), p.K);  // step 10: W0's digits (i8_split_digits)
  }
  return p;
}
template <class T>
auto Trainer<T>::fwd_hidden(int l, const StepRef& sr) const -> FwdHidden {
  FwdHidden p;
  p.M = batch_, p.N = o_.layers[l + 1], p.K = o_.layers[l];
  p.a = make_view<T, true>(H_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K);
  p.epi = hidden_epi(l, H_[l].get(), sr, true);
  plan_splitk_into_slot(p, 0);
  return p;
}
template <class T>
auto Trainer<T>::fwd_last(const StepRef& sr) const -> FwdLast {
  const int l = nlayers_ - 1;
  FwdLast p;
  p.M = batch_, p.N = o_.layers[l + 1], p.K = o_.layers[l];
  p.a = make_view<T, true>(H_[l - 1].get(), p.K), p.b = make_view<T, false>(weights(l), p.K);
  p.epi = loss_epi(sr);
  plan_splitk_into_slot(p, 0);
  return p;
}
template <class T>
auto Trainer<T>::fwd_last_bwd(const StepRef& sr) const -> FwdLastBwd {
  const int l = nlayers_ - 1;
  FwdLastBwd p;
  if constexpr (kHalf) {
    const FwdLast f = fwd_last(sr);
    const FusedBwdParams b = fused_params(l, sr);
    p.M = f.M, p.N = f.N, p.K = f.K, p.a = f.a, p.b = f.b;
    static_cast<SoftmaxCEEpi<__half>&>(p.epi) = f.epi;
    SoftmaxCELastBwdEpi& e = p.epi;
    e.K = b.N, e.W = b.W, e.W16 = b.W16, e.mW = b.mW, e.vW = b.vW, e.b = b.b, e.mb = b.mb, e.vb = b.vb;
    e.grad_out = b.grad_out, e.bgrad_out = b.bgrad_out, e.h = b.h, e.dz_prev = b.dz_prev, e.scale = b.scale;
    e.adam = b.adam, e.lr = b.lr, e.hyper = b.hyper, e.hyper_n = b.hyper_n;
    plan_splitk_into_slot(p, 0);
  }
  return p;
}
template <class T>
auto Trainer<T>::bwd_data(int l, int slot) const -> BwdDataGemm {  // dZ_[l-1] = relu'(dZ_[l] · W_l)
  BwdDataGemm p;
  p.M = batch_, p.N = o_.layers[l], p.K = o_.layers[l + 1];
  p.a = make_view<T, true>(dZ_[l].get(), p.K), p.b = make_view<T, true>(weights(l), p.N);
  p.epi.h = H_[l - 1].get(), p.epi.dz = dZ_[l - 1].get(), p.epi.dz_colsum = dz_colsum(l - 1);
  p.epi.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
  plan_splitk_into_slot(p, slot);
  return p;
}
template <class T>
auto Trainer<T>::update(int l, const StepRef& sr, int slot) const -> UpdateGemm {  // W_l -= f(dZ_[l]^T · H_[l-1])
  UpdateGemm p;
  p.M = o_.layers[l + 1], p.N = o_.layers[l], p.K = batch_;
  p.a = make_view<T, false>(dZ_[l].get(), p.M), p.b = make_view<T, true>(H_[l - 1].get(), p.N);
  p.epi = update_epi(l, sr);
  plan_splitk_into_slot(p, slot);
  return p;
}
template <class T>
auto Trainer<T>::update0(const StepRef& sr, int slot) const -> UpdateFirstGemm {
  UpdateFirstGemm p;
  p.M = o_.layers[1], p.N = o_.layers[0], p.K = batch_;
  p.a = make_view<T, false>(dZ_[0].get(), p.M), p.b = train_view(sr);
  p.epi = update_epi(0, sr);
  plan_splitk_into_slot(p, slot);
  return p;
}
template <class T>
double Trainer<T>::update_bytes(int l) const {  // master r/w (+ Adam m, v r/w) (+ fp16 copy write), bias alike
  const double n = static_cast<double>(o_.layers[l + 1]) * (o_.layers[l] + 1);
  return n * (8.0 + (o_.adam() ? 16.0 : 0.0) + (kHalf ? 2.0 : 0.0));
}

template <class T>
void Trainer<T>::enqueue_step_own(const StepRef& sr, std::map<std::string, KernelCost>* costs, bool next) {
  const auto& w = o_.layers;
  const double ob = sizeof(T);
  // Forward.
  if (nlayers_ == 1) {
    FwdFirstLast p;
    p.M = batch_, p.N = w[1], p.K = w[0];
    p.a = train_view(sr), p.b = make_view<T, false>(weights(0), p.K), p.epi = loss_epi(sr);
    p.b_fresh = true;  // W0: the step before's last kernel updated it
    plan_splitk_into_slot(p, 0);
    launch_gemm<p5_fwd_softmax_ce, T>(p, st_, take_pdl());
    add_cost(costs, "p5_fwd_softmax_ce", p, batch_ * w[1] * ob, true);
  } else {
    if (!fwd0_done_) {  // (else the step before's first-layer pass ran it: --next-forward)
      const FwdFirst p = fwd_first(sr);
      if (p.rung == GemmRung::I8Digits) {  // W0's digits, from the weights the step before updated
        if constexpr (!kHalf) launch_i8_split_digits(weights(0), p.K, p.N, p.K, w0_digits_.get(), st_, take_pdl());
        if (costs) {
          KernelCost& c = (*costs)["i8_split_digits"];
          c.bytes += static_cast<double>(p.N) * (p.K + i8_digit_ld(p.K)) * 4.0;
          c.calls += 1;
        }
      }
      launch_gemm<p5_fwd_gather, T>(p, st_, take_pdl());
      add_cost(costs, "p5_fwd_gather", p, static_cast<double>(batch_) * w[1] * ob, true);
    }
    fwd0_done_ = false;
    if (row_chain_) return enqueue_row_chain_and_updates(sr, costs);
    for (int l = 1; l + 1 < nlayers_; ++l) {
      auto q = fwd_hidden(l, sr);
      launch_gemm<p5_fwd_hidden, T>(q, st_, take_pdl());
      add_cost(costs, "p5_fwd_hidden", q, static_cast<double>(batch_) * w[l + 1] * ob, true);
    }
    bool tail = false;
    if constexpr (kHalf) {
      if (last_tail_) {  // softmax-CE with the last layer's fused pass as its cluster tail
        auto q = fwd_last_bwd(sr);
        launch_gemm<p5_fwd_softmax_ce_bwd, T>(q, st_, take_pdl());
        const int l = nlayers_ - 1;
        add_cost(costs, "p5_fwd_softmax_ce_bwd", q,
                 static_cast<double>(batch_) * w[nlayers_] * ob + update_bytes(l) + batch_ * 2.0 * w[l] * ob, true);
        if (costs) (*costs)["p5_fwd_softmax_ce_bwd"].flops += 2.0 * w[l + 1] * w[l] * batch_ * 2;
        tail = true;
      }
    }
    if (!tail) {
      auto q = fwd_last(sr);
      launch_gemm<p5_fwd_softmax_ce, T>(q, st_, take_pdl());
      add_cost(costs, "p5_fwd_softmax_ce", q, static_cast<double>(batch_) * w[nlayers_] * ob, true);
    }
  }
  if (fused_bwd_) {  // fp16, batch <= 32: one pass over each layer's weights (5b_fused_backward.cuh)
    for (int l = last_tail_ ? nlayers_ - 2 : nlayers_ - 1; l >= 0; --l) {
      const bool fwd = l == 0 && next && next_fwd_;  // + the next step's first forward
      const FusedBwdParams p = fwd ? fused_first_next(sr) : fused_params(l, sr);
      if (l > 0) launch_fused_bwd<p5_fused_update_bwd>(p, st_, take_pdl());
      else launch_fused_bwd<p5_fused_update_first>(p, st_, take_pdl());
      fwd0_done_ = fwd;
      if (costs) {
        KernelCost& c = (*costs)[l > 0 ? "p5_fused_update_bwd" : "p5_fused_update_first"];
        const double act = static_cast<double>(batch_) * (w[l + 1] + (l > 0 ? 2.0 * w[l] : 0.0)) * ob;
        c.flops += 2.0 * w[l + 1] * w[l] * batch_ * (l > 0 ? 2 : 1);
        c.bytes += update_bytes(l) + act;
        if (fwd) {  // the next batch's bytes, the partials written and read back, H_0 written
          c.flops += 2.0 * w[1] * w[0] * batch_;
          c.bytes += static_cast<double>(batch_) * (w[0] + 2.0 * 4.0 * p.tiles_n() * w[1] + w[1] * ob);
        }
        c.calls += 1;
      }
    }
    return;
  }
  if (branched_) return enqueue_backward_branched(sr, costs);
  // Backward: dZ_[L-2] first, then (update l, backward-data l-1) pairs, then (update 1, update 0).
  if (nlayers_ == 1) {
    auto u = update0(sr, 0);
    launch_gemm<p5_update, T>(u, st_, take_pdl());
    add_cost(costs, "p5_update", u, update_bytes(0), true);
    return;
  }
  {
    auto d = bwd_data(nlayers_ - 1, 0);
    launch_gemm<p5_bwd_data, T>(d, st_, take_pdl());
    add_cost(costs, "p5_bwd_data", d, static_cast<double>(batch_) * w[nlayers_ - 1] * 2 * ob, true);
  }
  for (int l = nlayers_ - 1; l >= 2; --l) {
    auto u = update(l, sr, 0);
    auto d = bwd_data(l - 1, 1);
    launch_gemm_pair<p5_update_and_bwd_data, T>(u, d, st_, take_pdl());  // two launches when a step-5 product is in it
    add_cost(costs, "p5_update_and_bwd_data", u, update_bytes(l), true);
    add_cost(costs, "p5_update_and_bwd_data", d, static_cast<double>(batch_) * w[l - 1] * 2 * ob, pair_as_two_launches(u, d));
  }
  auto u1 = update(1, sr, 0);
  auto u0 = update0(sr, 1);
  launch_gemm_pair<p5_update_pair, T>(u1, u0, st_, take_pdl());
  add_cost(costs, "p5_update_pair", u1, update_bytes(1), true);
  add_cost(costs, "p5_update_pair", u0, update_bytes(0), pair_as_two_launches(u1, u0));
}

// The end of a branched step: the first layer's update on the step's stream (after the last
// product that reads its weights), then the side stream's updates joined back into it.
template <class T>
void Trainer<T>::enqueue_update0_and_join(const StepRef& sr, std::map<std::string, KernelCost>* costs) {
  auto u0 = update0(sr, 1);
  launch_gemm<p5_update, T>(u0, st_, take_pdl());
  add_cost(costs, "p5_update", u0, update_bytes(0), true);
  CUDA_CHECK(cudaEventRecord(join_, side_));
  CUDA_CHECK(cudaStreamWaitEvent(st_, join_, 0));
  pdl_off_next_ = true;
}

// The branched backward: on the step's stream the backward-data chain dZ_[L-2], ..., dZ_[0] and
// then the first layer's update; on the side stream the updates of layers L-1, ..., 1, layer l's
// forked after backward-data product l, which produced its dZ_[l] (from dZ_[l+1]: the product
// before it) and is the last reader of the weights it overwrites. The side stream joins the
// step's stream at the end of the step. Workspace slot 1 serves the step's stream, slot 0 the side
// stream (each stream runs its products one after another).
template <class T>
void Trainer<T>::enqueue_backward_branched(const StepRef& sr, std::map<std::string, KernelCost>* costs) {
  const auto& w = o_.layers;
  const double ob = sizeof(T);
  for (int l = nlayers_ - 1; l >= 1; --l) {
    auto d = bwd_data(l, 1);
    launch_gemm<p5_bwd_data, T>(d, st_, take_pdl());
    add_cost(costs, "p5_bwd_data", d, static_cast<double>(batch_) * w[l - 1] * 2 * ob, true);
    CUDA_CHECK(cudaEventRecord(fork_, st_));
    CUDA_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
    auto u = update(l, sr, 0);
    launch_gemm<p5_update, T>(u, side_, false);
    add_cost(costs, "p5_update", u, update_bytes(l), true);
  }
  enqueue_update0_and_join(sr, costs);
}

// --row-chain on: after the first layer's forward, the row chain on the step's stream (H1, the
// loss, dZ2, dZ1, dZ0 and their column sums), then the updates of layers 2 and 1 on the side stream
// and the first layer's on the step's stream, all three forked from the row chain.
template <class T>
void Trainer<T>::enqueue_row_chain_and_updates(const StepRef& sr, std::map<std::string, KernelCost>* costs) {
  const auto& w = o_.layers;
  const RowChainParams<T> rc = row_chain_params(sr);
  launch_row_chain(rc, st_, take_pdl());
  if (costs) {
    KernelCost& c = (*costs)["p5_row_chain"];
    c.flops += 2.0 * batch_ * (2.0 * w[1] * w[2] + 2.0 * w[2] * w[3]);
    // H0 read; H1, dZ2, dZ1, dZ0 written; the two weight matrices once
    c.bytes += (static_cast<double>(batch_) * (2.0 * w[1] + 2.0 * w[2] + w[3]) + static_cast<double>(w[2]) * w[1] +
                static_cast<double>(w[3]) * w[2]) * sizeof(T);
    c.calls += 1;
  }
  CUDA_CHECK(cudaEventRecord(fork_, st_));
  CUDA_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
  for (int l = nlayers_ - 1; l >= 1; --l) {
    auto u = update(l, sr, 0);
    launch_gemm<p5_update, T>(u, side_, false);
    add_cost(costs, "p5_update", u, update_bytes(l), true);
  }
  enqueue_update0_and_join(sr, costs);
}

// ----- cuBLASLt path: the same epilogue functors, run after each cuBLASLt product.
template <class T>
void Trainer<T>::enqueue_step_cublas(const StepRef& sr, std::map<std::string, KernelCost>* costs) {
  const auto& w = o_.layers;
  const int D = w[0];
  gather_kernel<T><<<ew_blocks(static_cast<size_t>(batch_) * D), kEwThreads, 0, st_>>>(X_.get(), train_x_.get(),
                                                                                       train_rows(sr), batch_, D);
  CHECK_LAUNCH();
  auto input = [&](int l) -> const T* { return l == 0 ? X_.get() : H_[l - 1].get(); };
  auto lt_cost = [&](double M, double N, double K) {
    if (!costs) return;
    KernelCost& c = (*costs)["!nb::mlp::"];  // every kernel not ours: cuBLASLt's
    c.flops += 2 * M * N * K;
    c.bytes += (M * K + K * N) * sizeof(T) + M * N * 4.0;
    c.calls += 1;
  };
  for (int l = 0; l < nlayers_; ++l) {
    lt_layers_[l]->forward(input(l), weights(l), Z_.get(), st_);
    lt_cost(batch_, w[l + 1], w[l]);
    if (l + 1 < nlayers_) launch_epilogue<p5_epi_hidden>(Z_.get(), batch_, w[l + 1], hidden_epi(l, H_[l].get(), sr, true), st_);
    else launch_epilogue<p5_epi_softmax_ce>(Z_.get(), batch_, w[l + 1], loss_epi(sr), st_);
  }
  for (int l = nlayers_ - 1; l >= 0; --l) {
    lt_layers_[l]->backward_weight(dZ_[l].get(), input(l), grads_.get() + woff_[l], st_);
    lt_cost(w[l + 1], w[l], batch_);
    launch_lt_bias_grad<T>(dZ_[l].get(), batch_, w[l + 1], grads_.get() + boff_[l], bg_ws_.get(), st_);
    if (l > 0) {
      lt_layers_[l]->backward_data(dZ_[l].get(), weights(l), Z_.get(), st_);
      lt_cost(batch_, w[l], w[l + 1]);
      BwdReluEpi<T> e;
      e.h = H_[l - 1].get(), e.dz = dZ_[l - 1].get(), e.scale = static_cast<float>(1.0 / (1.0 - o_.dropout));
      launch_epilogue<p5_epi_bwd_relu>(Z_.get(), batch_, w[l], e, st_);
    }
  }
  flat_update_kernel<<<ew_blocks(nparams_), kEwThreads, 0, st_>>>(
      params_.get(), grads_.get(), o_.adam() ? adam_m_.get() : nullptr, o_.adam() ? adam_v_.get() : nullptr,
      kHalf ? params16_.get() : nullptr, nparams_, static_cast<float>(o_.lr), sr);
  CHECK_LAUNCH();
}

// Split-K workspaces: two slots (the two problems of a paired launch), each as large as the
// largest problem placed in it.
template <class T>
void Trainer<T>::size_ws() {
  size_t ws[2] = {1, 1}, ctrs[2] = {1, 1};
  auto note = [&](const auto& p, int slot) {
    ws[slot] = std::max(ws[slot], ws_floats(p));
    ctrs[slot] = std::max(ctrs[slot], counter_slots(p));
  };
  const StepRef sr{nullptr, 0};
  const auto& w = o_.layers;
  if (!cublas_) {
    for (int l = 1; l + 1 < nlayers_; ++l) note(fwd_hidden(l, sr), 0);
    if (nlayers_ > 1) note(fwd_last(sr), 0);
    if (nlayers_ > 1) {
      note(fwd_first(sr), 0);
    } else {  // one layer: its forward (gather + softmax-CE) has the first layer's shape
      FwdFirst p;
      p.M = batch_, p.N = w[1], p.K = w[0];
      plan_splitk_into_slot(p, 0);
      note(p, 0);
    }
    for (int l = 1; l < nlayers_; ++l) note(bwd_data(l, 0), 0), note(bwd_data(l, 1), 1);
    for (int l = 1; l < nlayers_; ++l) note(update(l, sr, 0), 0);
    note(update0(sr, 0), 0), note(update0(sr, 1), 1);
  }
  // Evaluation shapes (slot 0): full chunks of eval_rows_ and the last, shorter one (fewer row
  // tiles can mean more splits, so it may need more workspace than a full chunk).
  const int n_test = static_cast<int>(ds_.test_images.count);
  for (int rows : {eval_rows_, n_test % eval_rows_})
    for (int l = 0; l < nlayers_ && rows > 0; ++l) {
      GemmProblem<MatView<T, true>, WView, StoreEpi> p;
      p.M = rows, p.N = w[l + 1], p.K = w[l];
      plan_splitk_into_slot(p, 0);
      note(p, 0);
    }
  for (int s = 0; s < 2; ++s) {
    ws_[s].alloc(ws[s]);
    counters_[s].alloc(ctrs[s]);
    CUDA_CHECK(cudaMemset(counters_[s].get(), 0, counters_[s].bytes()));
  }
}

}  // namespace
}  // namespace nb
