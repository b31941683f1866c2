// phase5_batched/rungs.h — phase 5's launch modes (--launch) as ONE table of rung descriptors: each
// rung's name, what it needs of the model and options (its legality check, with the one-line errors
// of docs/ERRORS.md), its plan, its launch of an epoch, its --breakdown segments and its record
// fields. main.cu looks the rung up once after parsing; the Trainer holds it and calls through it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "launch_plan.h"
#include "5c_persistent.h"
#include "5d_cluster.h"
#include "5e_pipelined.h"
#include "5f_cluster32.h"
#include "5g_grid.h"
#include "mlp/mlp_common.h"
#include "p5_options.h"

namespace nb {
namespace {

using namespace nb::mlp;

// The parameter block a rung's kernel takes: none (5a/5b: the graph of a step's kernels, built by
// the trainer), PersistParams (5c, 5e, 5f) or ClusterParams (5d, 5g).
enum class KernelParams { None, Persist, Cluster };

// The one-launch rungs' parameter blocks and plans (the trainer fills the block its rung takes).
struct OneLaunchKernel {
  PersistParams persist;
  PersistPlan persist_plan;
  ClusterParams cluster;
  ClusterPlan cluster_plan;
  GridPlan grid_plan;
};

// What changes from one launch of a one-launch kernel to the next: its steps, and the validation /
// --breakdown buffers (null when not in use).
struct LaunchWindow {
  int64_t s0 = 0;  // global step of the launch's first step
  int i0 = 0;      // its batch index in the epoch
  int count = 0;   // steps in this launch
  float* grads = nullptr;
  unsigned long long* breakdown = nullptr;
};
template <class Params>
Params in_window(Params p, const LaunchWindow& w) {
  p.s0 = w.s0, p.i0 = w.i0, p.count = w.count;
  p.grads_out = w.grads;
  p.breakdown = w.breakdown;
  return p;
}

using KernelCosts = std::map<std::string, KernelCost>;

struct Rung {
  const char* name;  // the --launch string
  const char* id;    // its place in the chapter's ladder
  // What it needs (legal: null = any model the graph step runs; else the check, refused with
  // "--launch NAME: needs " + needs) and what it allocates.
  bool (*legal)(const P5Options&);
  const char* needs;
  KernelParams params;
  bool global_exchange;       // h1, h2 and W2's exchange words in global memory (5c, 5e)
  bool w3_exchange;           // and W3/b3's (5e)
  bool plans_fused_backward;  // 5b's fused backward is planned (and recorded) with this rung's model
  // Its plan (fills the plan and the per-step cost of the kernel) and its launch of an epoch's
  // steps (after the permutation kernel); null for the graph step, which the trainer captures.
  void (*plan)(OneLaunchKernel&, int blocks, int device, bool specialize, KernelCosts& costs);
  void (*launch)(const OneLaunchKernel&, const LaunchWindow&, cudaStream_t);
  // --breakdown: the parts of a step that block 0 stamps (0: not timed).
  int segments;
  const char* (*segment_name)(int);
  // The record: its note, what the timed unit holds, and its metrics object (null: none).
  const char* note;
  const char* timing;
  nlohmann::json (*record)(const OneLaunchKernel&, const P5Options&);

  bool one_launch() const { return params != KernelParams::None; }  // one kernel launch an epoch
};

// ----- the requirements
inline bool two_hidden_fp32_own(const P5Options& o) {
  return !(o.nlayers() != 3 || o.fp16() || o.gemm != "own");
}
inline bool fp16_sgd_no_dropout_own(const P5Options& o) {
  return !(!o.fp16() || o.adam() || o.dropout > 0 || o.gemm != "own");
}
constexpr const char* kNeedsTwoHiddenFp32 = "two hidden layers (--layers 784,H1,H2,10), --precision fp32 and --gemm own";
constexpr const char* kNeedsFp16Sgd = "--precision fp16, --optimizer sgd, --dropout 0 and --gemm own";

// The record fields of the rungs that split W1's units over blocks (5c, 5e, 5f): their plan, their
// block size, and how a step synchronises (5c/5e: none, the exchange's tags; 5f: cluster barriers).
inline nlohmann::json split_record(const PersistPlan& pl, int threads, const char* barriers_key) {
  return {{"blocks", pl.blocks},
          {"threads_per_block", threads},
          {"first_layer_units_per_block", pl.nc},
          {"second_layer_units_per_block", pl.nj},
          {"shared_memory_bytes_per_block", pl.smem},
          {"exchanges_per_step", 2},
          {barriers_key, 0},
          {"shape_compiled_in", pl.specialized}};
}

// ----- 5c: one cooperative persistent kernel an epoch (5c_persistent.h)
inline void plan_5c(OneLaunchKernel& k, int blocks, int device, bool specialize, KernelCosts& costs) {
  k.persist_plan = persistent_rung_plan(k.persist, blocks, device, specialize);
  costs["p5_persistent"] = persistent_rung_cost(k.persist, k.persist_plan);
}
inline void launch_5c(const OneLaunchKernel& k, const LaunchWindow& w, cudaStream_t st) {
  persistent_rung_launch(k.persist_plan, in_window(k.persist, w), st);
}
inline nlohmann::json record_5c(const OneLaunchKernel& k, const P5Options&) {
  return split_record(k.persist_plan, kPersistThreads, "grid_barriers_per_step");
}

// ----- 5e: 5c's kernel with fewer dependent phases a step (5e_pipelined.h)
inline void plan_5e(OneLaunchKernel& k, int blocks, int device, bool specialize, KernelCosts& costs) {
  k.persist_plan = pipelined_rung_plan(k.persist, blocks, device, specialize);
  costs["p5_pipelined"] = pipelined_rung_cost(k.persist, k.persist_plan);
}
inline void launch_5e(const OneLaunchKernel& k, const LaunchWindow& w, cudaStream_t st) {
  pipelined_rung_launch(k.persist_plan, in_window(k.persist, w), st);
}
inline nlohmann::json record_5e(const OneLaunchKernel& k, const P5Options& o) {
  nlohmann::json r = record_5c(k, o);
  r["fused_first_layer"] = pipelined_fuses_first_layer(k.persist, k.persist_plan);
  return r;
}

// ----- 5d: one thread-block cluster kernel an epoch, activations in DSMEM (5d_cluster.h)
inline void plan_5d(OneLaunchKernel& k, int blocks, int device, bool, KernelCosts& costs) {
  k.cluster_plan = cluster_rung_plan(k.cluster, blocks, device);
  costs["p5_cluster"] = cluster_rung_cost(k.cluster, k.cluster_plan);
}
inline void launch_5d(const OneLaunchKernel& k, const LaunchWindow& w, cudaStream_t st) {
  cluster_rung_launch(k.cluster_plan, in_window(k.cluster, w), st);
}
inline nlohmann::json record_5d(const OneLaunchKernel& k, const P5Options& o) {
  const ClusterPlan& pl = k.cluster_plan;
  return {{"blocks", pl.blocks},
          {"threads_per_block", kClThreads},
          {"shared_memory_bytes_per_block", pl.smem},
          {"cluster_barriers_per_step", 2 * o.nlayers() - 3}};
}

// ----- 5g: 5d's model over up to every SM, exchanges through L2 and grid barriers (5g_grid.h)
inline void plan_5g(OneLaunchKernel& k, int blocks, int device, bool, KernelCosts& costs) {
  k.grid_plan = grid_rung_plan(k.cluster, blocks, device);
  costs["p5_grid"] = grid_rung_cost(k.cluster, k.grid_plan);
}
inline void launch_5g(const OneLaunchKernel& k, const LaunchWindow& w, cudaStream_t st) {
  grid_rung_launch(k.grid_plan, in_window(k.cluster, w), st);
}
inline nlohmann::json record_5g(const OneLaunchKernel& k, const P5Options& o) {
  const GridPlan& pl = k.grid_plan;
  nlohmann::json units = nlohmann::json::array(), w16 = nlohmann::json::array(), m32 = nlohmann::json::array();
  for (int l = 0; l + 1 < o.nlayers(); ++l) {
    units.push_back(pl.g.ly[l].U);
    w16.push_back(pl.g.ly[l].w16_smem ? "shared" : "global");
    m32.push_back(pl.g.ly[l].m32_smem ? "shared" : "global");
  }
  return {{"blocks", pl.blocks},
          {"threads_per_block", kGrThreads},
          {"shared_memory_bytes_per_block", pl.smem},
          {"units_per_block", units},
          {"fp16_rows_in", w16},
          {"fp32_masters_in", m32},
          {"global_exchange_bytes", pl.g.arena_bytes},
          {"grid_barriers_per_step", 2 * o.nlayers() - 3}};
}

// ----- 5f: the fp32 model in one 16-block cluster, its wide layer on tensor cores (5f_cluster32.h)
inline void plan_5f(OneLaunchKernel& k, int blocks, int device, bool specialize, KernelCosts& costs) {
  k.persist_plan = cluster32_rung_plan(k.persist, blocks, device, specialize);
  costs["p5_cluster32"] = cluster32_rung_cost(k.persist, k.persist_plan);
}
inline void launch_5f(const OneLaunchKernel& k, const LaunchWindow& w, cudaStream_t st) {
  cluster32_rung_launch(k.persist_plan, in_window(k.persist, w), st);
}
inline nlohmann::json record_5f(const OneLaunchKernel& k, const P5Options&) {
  return split_record(k.persist_plan, kC32Threads, "cluster_barriers_per_step");
}

#define P5_DATA_NOTE "data resident on the GPU as bytes; per-epoch permutation generated on the device; "
#define P5_TIMING "per epoch: the permutation kernel and "

// The table, in --help's order. One kernel-launch breakdown buffer serves every one-launch rung.
const Rung kRungs[] = {
    {"graph", "5a", nullptr, "", KernelParams::None, false, false, true, nullptr, nullptr, 0, nullptr,
     P5_DATA_NOTE "every step of an epoch replayed as one CUDA graph; losses read once per epoch",
     P5_TIMING "one CUDA-graph replay of all the epoch's steps", nullptr},
    {"persistent", "5c", two_hidden_fp32_own, kNeedsTwoHiddenFp32, KernelParams::Persist, true, false, false, plan_5c,
     launch_5c, kPersistSegments, persist_segment_name,
     P5_DATA_NOTE "every epoch one cooperative persistent kernel (parameters in shared memory, two tagged exchanges "
                  "between blocks a step, no grid barrier); losses read once per epoch",
     P5_TIMING "one cooperative launch of the persistent kernel", record_5c},
    {"pipelined", "5e", two_hidden_fp32_own, kNeedsTwoHiddenFp32, KernelParams::Persist, true, true, false, plan_5e,
     launch_5e, kPipeSegments, pipe_segment_name,
     P5_DATA_NOTE "every epoch one cooperative persistent kernel with fewer dependent phases a step (the W1 update "
                  "fused with the next first layer, the small layers' updates and the dropout masks inside the waits, "
                  "W3/b3 updated in slices); losses read once per epoch",
     P5_TIMING "one cooperative launch of the persistent kernel", record_5e},
    {"cluster", "5d", fp16_sgd_no_dropout_own, kNeedsFp16Sgd, KernelParams::Cluster, false, false, true, plan_5d,
     launch_5d, kClSegments, cluster_segment_name,
     P5_DATA_NOTE "every epoch one thread-block cluster kernel (parameters in the blocks' shared memory, activations "
                  "exchanged through distributed shared memory, a cluster barrier per dependency between blocks); "
                  "losses read once per epoch",
     P5_TIMING "one launch of the cluster kernel", record_5d},
    {"grid", "5g", fp16_sgd_no_dropout_own, kNeedsFp16Sgd, KernelParams::Cluster, false, false, true, plan_5g,
     launch_5g, kGrSegments, grid_segment_name,
     P5_DATA_NOTE "every epoch one cooperative kernel over up to every SM (each block holds 16 or more units of "
                  "every hidden layer, fp16 rows and fp32 masters in shared memory where they fit; activations, "
                  "output gradients and partial logits exchanged through L2, a grid barrier per dependency); "
                  "losses read once per epoch",
     P5_TIMING "one cooperative launch of the grid kernel", record_5g},
    {"cluster32", "5f", two_hidden_fp32_own, kNeedsTwoHiddenFp32, KernelParams::Persist, false, false, false, plan_5f,
     launch_5f, kC32Segments, cluster32_segment_name,
     P5_DATA_NOTE "every epoch one 16-block thread-block cluster kernel, fp32 (parameters and Adam state in the "
                  "blocks' shared memory, h1 and h2 exchanged through distributed shared memory with two cluster "
                  "barriers a step, the first layer and its weight gradient as 3xTF32 tensor-core products, Adam "
                  "with approximate root and reciprocal); losses read once per epoch",
     P5_TIMING "one launch of the fp32 cluster kernel", record_5f},
};
#undef P5_DATA_NOTE
#undef P5_TIMING
static_assert(kPersistSegments == kClSegments && kPipeSegments <= kPersistSegments && kC32Segments <= kPersistSegments &&
                  kGrSegments <= kPersistSegments,
              "one breakdown buffer serves the one-launch kernels");
constexpr int kBreakdownParts = kPersistSegments;  // the breakdown buffer's length

// ----- --launch auto: the facts launch_plan.h's rule needs, from the one-launch kernels' plans
inline void resolve_auto_launch(P5Options& o, int device) {
  LaunchFacts f;
  f.one_launch_legal = fp16_sgd_no_dropout_own(o) && o.nlayers() <= kClMaxLayers;
  if (f.one_launch_legal) {
    ClusterParams p;
    p.L = o.nlayers(), p.B = o.batch;
    for (int l = 0; l <= p.L; ++l) p.w[l] = o.layers[l];
    f.cluster_fits = cluster_rung_fits(p, device);
    f.grid_units = grid_rung_units(p, o.blocks, device, &f.grid_blocks);
    CUDA_CHECK(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device));
  }
  if (two_hidden_fp32_own(o)) {  // W1's kind: ask 5c's and 5e's plans (they only read shapes and the GPU)
    PersistParams p;
    p.D = o.layers[0], p.H1 = o.layers[1], p.H2 = o.layers[2], p.C = o.layers[3], p.B = o.batch;
    p.adam = o.adam(), p.dropout = o.dropout > 0;
    const auto accepts = [&](auto asks) {  // a plan's refusal (exit 2) is a no; any other error stands
      try {
        PersistParams q = p;
        return asks(q);
      } catch (const Error& e) {
        if (e.code != kExitUsage) throw;
        return false;
      }
    };
    f.pipelined_fuses = accepts([&](PersistParams& q) {
      return pipelined_fuses_first_layer(q, pipelined_rung_plan(q, o.blocks, device, true));
    });
    f.persist_one_unit = accepts([&](PersistParams& q) { return persistent_rung_plan(q, o.blocks, device, true).nc == 1; });
  }
  const LaunchChoice c = choose_launch(f);
  o.launch = c.launch;
  o.launch_auto = c.why;
}

// ----- lookup and legality: the one place that asks which rung a name means
inline std::vector<std::string> rung_names() {
  std::vector<std::string> out = {"auto"};
  for (const Rung& r : kRungs) out.push_back(r.name);
  return out;
}
inline const Rung& find_rung(const std::string& name) {
  for (const Rung& r : kRungs)
    if (name == r.name) return r;
  throw Error(kExitUsage, "--launch " + name + ": no such launch mode");  // the parser's choices refuse it first
}
// Refuses (exit 2) a model or an option the rung cannot run, as one line.
inline void check_rung(const Rung& r, const P5Options& o) {
  if (r.legal && !r.legal(o)) throw Error(kExitUsage, std::string("--launch ") + r.name + ": needs " + r.needs);
  if (o.fp32_gemm != "auto" && (o.fp16() || o.gemm != "own" || r.one_launch()))
    throw Error(kExitUsage, "--fp32-gemm " + o.fp32_gemm + ": needs --precision fp32, --gemm own and --launch " +
                                kRungs[0].name);
  if (o.fp16_gemm != "auto" && (!o.fp16() || o.gemm != "own" || r.one_launch()))
    throw Error(kExitUsage, "--fp16-gemm " + o.fp16_gemm + ": needs --precision fp16, --gemm own and --launch " +
                                kRungs[0].name);
  if (o.fp16_stream != "auto" && (!o.fp16() || o.gemm != "own" || r.one_launch()))
    throw Error(kExitUsage, "--fp16-stream " + o.fp16_stream + ": needs --precision fp16, --gemm own and --launch " +
                                kRungs[0].name);
  if (o.handover != "cluster" && (!o.fp16() || o.gemm != "own" || r.one_launch()))
    throw Error(kExitUsage, "--handover " + o.handover + ": needs --precision fp16, --gemm own and --launch " +
                                kRungs[0].name);
  if (o.l2_evict != "auto" && (!o.fp16() || o.gemm != "own" || r.one_launch()))
    throw Error(kExitUsage, "--l2-evict " + o.l2_evict + ": needs --precision fp16, --gemm own and --launch " +
                                kRungs[0].name);
  if (o.fused_warps != "auto" && (!o.fp16() || o.gemm != "own" || r.one_launch()))
    throw Error(kExitUsage, "--fused-warps " + o.fused_warps + ": needs --precision fp16, --gemm own and --launch " +
                                kRungs[0].name);
  if (o.last_pass != "auto" && (!o.fp16() || o.gemm != "own" || r.one_launch()))
    throw Error(kExitUsage, "--last-pass " + o.last_pass + ": needs --precision fp16, --gemm own and --launch " +
                                kRungs[0].name);
  if (o.next_forward != "auto" && (!o.fp16() || o.gemm != "own" || r.one_launch()))
    throw Error(kExitUsage, "--next-forward " + o.next_forward + ": needs --precision fp16, --gemm own and --launch " +
                                kRungs[0].name);
  // (what needs the device, the fused backward's auto choice and the shared-memory fit, the trainer refuses)
  if (o.row_chain == "on" &&
      (o.nlayers() != 3 || o.gemm != "own" || r.one_launch() || o.backward == "paired" || o.backward == "fused"))
    throw Error(kExitUsage, "--row-chain on: needs two hidden layers (--layers 784,H1,H2,10), --gemm own, --launch " +
                                std::string(kRungs[0].name) + " and the branched backward (--backward auto or branched)");
}

}  // namespace
}  // namespace nb
