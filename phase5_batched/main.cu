// phase5_batched — the same MLP as phase 4, with the whole data path batched onto the GPU.
//
// WHAT THIS CHAPTER ADDS OVER phase4_mlp (26 host-launched kernels a step, host gather, loss read
// back every step): the data on the GPU as bytes, each epoch's order generated on the device, the
// batch gathered in the first GEMM's loader; fused epilogues (bias+ReLU+dropout, softmax+CE+
// gradient, the optimizer in the weight-gradient GEMM); each epoch one CUDA graph. Rungs (--help):
//   default (5a) own GEMMs, fused epilogues, one graph; --gemm cublas: cuBLASLt, the yardstick;
//   --backward auto|fused|paired|branched (5b: fp16 + SGD, one pass over a layer's weights for its
//     backward; branched: the updates on a second branch of the graph, beside the backward-data chain);
//   --pdl on|off  programmatic dependent launch: a kernel starts while the one before ends;
//   --launch NAME picks a rung of rungs.h (one descriptor each; the names in --help):
//     5c / 5e  W1's shape: an epoch in ONE cooperative kernel (5e: fewer dependent phases a step);
//     5d  W2 at small widths: one 16-block cluster, activations in DSMEM;
//     5f  W1's fp32 model in one cluster, the first layer as 3xTF32 MMAs; 5g  5d's model over every SM;
//   --fp32-gemm auto|tile|tf32x3|fma|no-digits  big-batch fp32 products on tensor cores (GEMM step 5;
//     the first forward on step 10: bytes times W0's 8-bit digits) or FMAs (fma: step 7); plan recorded;
//   --fp16-gemm auto|tile|mma|wgmma  fp16 products on step 6 where it pays (wgmma: the first two on step
//     9); --fp16-stream, --handover, --last-pass, --fused-warps, --next-forward, --l2-evict: the fp16
//     graph step's step 8 and 5b choices (--help); --row-chain W1's middle in one kernel; --gemm-compare.
//
// THE DESIGN DECISION: no intermediate that an epilogue can consume is written, and nothing in a
//   step waits for the host: what is left between kernels is dependent latency, which the
//   one-kernel-an-epoch rungs remove; where the batch makes the step arithmetic, the GEMMs' rate.
//
// PREDICTION (before measuring, H100). Graph path, W1: ~14.5 MFLOP, 6 dependent kernels at ~2-4 us:
//   15-25 us a step. Persistent: 5-8 us a step; pipelined ~7 us. Cluster, h = 128: ~8-10 us a
//   step. W2 h = 8192: 2.0 GB of weight traffic a step, ~0.7 ms. Batch 8,192 (3.9 GFLOP a step):
//   3xTF32 at half of mma.sync's TF32 rate, ~20 us for each of the first layer's two products.
//
// MEASURED (H200, profiles/nvidia-h200/; every x against the fastest framework of the same run,
//   scripts/bench_frameworks.sh at ed919e5). W1: pipelined 18.81 ms an epoch (__w1-pipelined.json),
//   4.06x JAX jit-epoch (76.28 ms). W2 (width sweep, __w2-h<h>-*.json; 256-1,024 at f620a8f, 2,048-
//   8,192 at ae47833, 128 at 7d20915), best path against JAX: h = 128 rung 5d 27.67 us a step, 1.24x;
//   256 / 512 / 1,024 rung 5g 33.21-48.75 us, 1.12x / 1.06x / 1.09x; 2,048 / 4,096 / 8,192 own GEMMs
//   0.0954 / 0.197 / 0.560 ms, 1.13x / 1.31x / 1.45x. --launch auto picks among them (launch_plan.h). Batch sweep
//   (bench_frameworks.sh, __batch-sweep-b<B>.json, JAX at every batch; 32-64 at 221cbbf, 128-512
//   at 60a9493, 1,024-8,192 at e802857): ahead at all nine; 32: 34.0 us a step (the row chain),
//   1.15x JAX jit-run; 64: 1.11x; 512: 1.09x (the least); 2,048: 69.3 us, 1.59x; 8,192: 0.131 ms,
//   2.02x (PyTorch compiled-graph 0.303), fp16 0.088 ms. The lesson: up to batch 1,024 a step is its
//   dependent kernels' latency; from there it grows with the arithmetic: step 5 buys 2.35x at 8,192
//   (0.309 ms on the SIMT tile) where fp32_gemm.h's rule says it pays, the images' bytes multiplied as
//   the integers they are; the branched backward takes the upper layers' updates off the chain
//   (2,048: 86.0 against 107.2 us paired). Step 5's first layer: 1.50x / 1.45x cuBLASLt fp32 (__gemm-b8192).
//   H100 (4592eea, __batch-sweep-b8192.json): 0.121 ms at 8,192, 2.02x JAX jit-run (0.244).
// Notes (the H100 runs, breakdowns, what was tried and dropped): report/phase_notes/phase5_batched.md.
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
#include "gemm_compare.cuh"
#include "mlp/mlp_common.h"
#include "mlp/mlp_record.h"
#include "mlp/validate.h"
#include "nvtx.h"
#include "p5_options.h"
#include "record.h"
#include "reference.h"
#include "rungs.h"
#include "run_record.h"
#include "stats.h"
#include "timing.cuh"
#include "trainer.cuh"
#include "validation.cuh"

namespace nb {
namespace {

using namespace nb::mlp;

constexpr const char* kPhase = "phase5_batched";

template <class T>
int train(const P5Options& o, const Rung& rung, const Cli& cli, const DeviceInfo& dev, const Dataset& ds,
          const Schedule& sc, const HostParams& init, Fp32Gemm fp32_gemm) {
  const bool cublas = o.gemm == "cublas";
  nlohmann::json rec = new_record(kPhase, o.workload, cublas ? "cuda-cublaslt" : "cuda", cli);
  rec["device"] = to_json(dev);
  rec["software"] = software_json(dev);
  rec["notes"].push_back(std::string("precision ") + o.precision +
                         (cublas ? "; products by cuBLASLt (compute 32F, no TF32), epilogues/optimizer our kernels"
                                 : "; own fused GEMM kernels"));
  rec["notes"].push_back(rung.note);
  if (o.common.deterministic) rec["notes"].push_back("--deterministic: no float atomics are used in any case");

  size_t free0 = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  Trainer<T> tr(o, rung, sc, dev, ds, init, fp32_gemm);
  const nlohmann::json plan = tr.gemm_plan();
  if (!plan.empty()) {
    std::printf("GEMM plan (a step's products: M x N x K, rung, K slices (a fused pass: row slices); backward %s):\n",
                tr.backward_kind());
    for (const auto& q : plan)
      std::printf("  %-18s %6d x %5d x %5d  %-9s %d%s%s\n", q["product"].get<std::string>().c_str(), q["M"].get<int>(),
                  q["N"].get<int>(), q["K"].get<int>(), q["rung"].get<std::string>().c_str(), q["splits"].get<int>(),
                  q.contains("tail") ? ", then " : q.contains("then") ? ", then " : "",
                  q.contains("tail") ? q["tail"].get<std::string>().c_str() : q.contains("then") ? q["then"].get<std::string>().c_str() : "");
    // (a fused pass: its warps a block and its hand-over)
    for (const auto& q : plan)
      if (q.contains("warps"))
        std::printf("  %s: %d warps a block, hand-over %s\n", q["product"].get<std::string>().c_str(), q["warps"].get<int>(),
                    q.contains("handover") ? "cluster" : q["splits"].get<int>() > 1 ? "global" : "none");
  }

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
  if (o.breakdown && tr.one_launch()) tr.start_breakdown();
  const bool one_launch = tr.one_launch();

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
  // nodes included: tracer_overhead record), then one more run, untimed, with it on: the
  // kernel/memcpy/range summaries and the efficiency table (common/runner.h).
  Run last, traced;
  int64_t measured_steps = 0;
  std::vector<double> final_params;                // the timed runs' result
  std::vector<unsigned long long> breakdown_cycles;  // --breakdown: the cycles of the timed runs only
  int timed_runs = 0;
  const TimedRuns runs = timed_then_traced(
      {0, o.common.repeats, 1, !o.common.no_cupti},
      [&](RunKind kind) {
        if (kind != RunKind::Timed) {
          std::printf("traced run (our CUPTI tracer on; not timed):\n");
          traced = one_run(false);
          return traced.total_ms;
        }
        last = one_run(timed_runs++ == 0);
        measured_steps += last.steps;
        return last.total_ms;
      },
      [&] { return !last.diverged.empty(); },
      [&] {
        final_params = tr.params();
        // (the buffer is released here, so the traced run does not stamp)
        if (o.breakdown && one_launch) breakdown_cycles = tr.take_breakdown();
      });
  const std::vector<double>& totals = runs.samples;
  const std::optional<double> traced_ms = traced_run_ms(rec, runs, !last.diverged.empty(), traced.total_ms);
  const std::string& diverged = last.diverged;
  const std::vector<float>& step_losses = last.step_losses;

  const Stats st = summarize(totals);
  const double per_step_ms = step_losses.empty() ? 0.0 : st.median / static_cast<double>(step_losses.size());
  rec["timing"] = timing_json("cuda-events", rung.timing,
                              one_launch
                                  ? std::string("data upload, validation, warm-up, the per-epoch loss read-back, "
                                                "evaluation")
                                  : "data upload, graph capture (" + std::to_string(capture_ms) +
                                        " ms host time), validation, warm-up, the per-epoch loss read-back, evaluation",
                              o.common.warmup, st, last.per_epoch_ms);
  rec["timing"]["per_step_ms"] = {{"median", per_step_ms}};
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
  rec["metrics"]["backward"] = tr.backward_kind();  // own graph path's backward kernels: fused, paired or branched
  rec["metrics"]["pdl"] = tr.pdl();  // own graph path: kernels launched with programmatic dependent launch
  rec["metrics"]["gemm_plan"] = plan;  // own graph path: each product's rung and K slices ([] on the other paths)
  rec["metrics"]["fp32_gemm"] = fp32_gemm_name(fp32_gemm);
  rec["metrics"]["fp16_gemm"] = o.fp16_gemm;
  rec["metrics"]["fp16_stream"] = o.fp16_stream;
  rec["metrics"]["handover"] = o.handover;
  rec["metrics"]["l2_evict"] = tr.l2_evict() ? "on" : "off";  // (what ran: the fused passes' masters evict-first in L2)
  rec["metrics"]["fused_warps"] = o.fused_warps;  // (a hidden layer's fused pass: 4, 8, or auto's rule)
  rec["metrics"]["last_pass"] = tr.last_tail() ? "tail" : "kernel";  // (what ran: tail only where it can)
  rec["metrics"]["next_forward"] = tr.next_forward() ? "pass" : "kernel";  // (what ran)
  rec["metrics"]["row_chain"] = tr.row_chain();  // own graph path: the middle of the step in one kernel
  if (!o.launch_auto.empty()) rec["metrics"]["launch_auto"] = o.launch_auto;  // config.launch: the rung it chose
  rung_record_fields(rec["metrics"], rung, tr.kernel(), o, breakdown_cycles, measured_steps, per_step_ms);
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


int run(int argc, char** argv) {
  P5Options o;
  bool compare = false;
  Cli cli(kPhase, "MNIST MLP, batched: data on the GPU, fused kernels, one CUDA graph per epoch.");
  add_mlp_flags(cli, o);
  cli.add_string("--gemm", &o.gemm, "matrix products: own kernels or cuBLASLt", {"own", "cublas"});
  cli.add_common(&o.common);
  cli.add_string("--launch", &o.launch,
                 "how an epoch is launched: one CUDA graph of fused kernels, one persistent cooperative kernel "
                 "(fp32, two hidden layers, own GEMMs), the same with fewer dependent phases a step (pipelined), "
                 "one thread-block cluster kernel (fp16, SGD, no dropout, batch <= 32, a model that fits the "
                 "cluster's shared memory: W2 at h = 128), one fp32 cluster kernel with the first layer on tensor "
                 "cores (two hidden layers, batch <= 64, at most 8 first-layer units a block: W1), or the cluster "
                 "kernel's model over up to every SM (grid: fp16, SGD, no dropout, batch <= 32, at most 16 classes); auto: "
                 "pipelined, persistent, cluster, grid or graph by what the one-launch kernels' plans say of the "
                 "model (launch_plan.h)",
                 rung_names());
  cli.add_int("--blocks", &o.blocks,
              "blocks of the persistent kernel (0 = one per first-layer unit, at most one per SM) or of a cluster "
              "(0 = the largest that fits, at most 16), or of the grid kernel (0 = one per 16 units of the widest "
              "hidden layer, at most one per SM)",
              0, 4096);
  cli.add_flag("--generic-kernel", &o.generic_kernel,
               "persistent, pipelined and cluster32 kernels: the generic instance even for W1's shape (measures what "
               "compiling the shape in buys)");
  cli.add_string("--backward", &o.backward,
                 "own graph path's backward: each layer's update and backward-data product in one pass over its "
                 "weights (fused; fp16, batch <= 32, widths multiples of 8); a layer's update and the next layer's "
                 "backward-data product (or the last two updates) in one launch (paired); or the backward-data chain "
                 "and the first layer's update on the step's stream, every other update on a second branch of the "
                 "graph (branched). auto = fused with fp16 and SGD where it can run, else branched",
                 {"auto", "fused", "paired", "branched"});
  cli.add_string("--pdl", &o.pdl,
                 "own graph path: launch each step kernel with programmatic dependent launch, so that it starts (and "
                 "fetches its weights) while the kernel before it finishes (compute capability 9.0 and up; off below)",
                 {"on", "off"});
  cli.add_flag("--breakdown", &o.breakdown,
               "persistent, pipelined, cluster and grid kernels: time the parts of a step (clock stamps of block 0) into the "
               "record");
  cli.add_string("--fp32-gemm", &o.fp32_gemm,
                 "own graph path, fp32: which GEMM rung computes each product: 3xTF32 tensor-core tiles (step 5 of the "
                 "ladder, fp32-accurate) for products of at least 64 rows, 2^25 multiply-adds and 16 tiles of 64 x 64 "
                 "(below 32 tiles 2^27), the 32 x 64 SIMT tile for the others, and of those the first layer's forward "
                 "on step 10 (the images' bytes times W0's three 8-bit digits on the integer tensor cores, compute "
                 "capability 8.0 and up) (auto); or one rung for every product; fma: the CUDA cores only, step 7 (FMA "
                 "warp tiles in the 64 x 64 tile) where auto takes step 5 or 10; no-digits: auto's plan with the first "
                 "layer's forward on step 5",
                 {"auto", "tile", "tf32x3", "fma", "no-digits"});
  cli.add_string("--fp16-gemm", &o.fp16_gemm,
                 "own graph path, fp16: which GEMM rung computes each product: step 6 of the ladder (fp16 mma.sync in "
                 "step 5's 64 x 64 tile) for products of at least 64 tiles of 64 x 64 and K >= 128 and for products of "
                 "at most 64 rows with 512 <= N <= 2048 and K >= 512 and for the first layer's weight gradient from "
                 "batch 2048, the 32 x 64 WMMA tile for the others (auto); or one rung for every product; wgmma: "
                 "auto's plan with the first layer's forward and weight gradient on step 9 (wgmma, sm_90a)",
                 {"auto", "tile", "mma", "wgmma"});
  cli.add_string("--fp16-stream", &o.fp16_stream,
                 "own graph path, fp16: the forward products of at most 32 rows on GEMM step 8 (the weights streamed "
                 "straight into the MMAs' fragments) where the weights have at least 1024 rows (the last layer: columns), "
                 "the weights of those with at least 2048 rows staged in shared memory by cp.async instead (auto); "
                 "auto's products all streamed through registers (regs) or all staged (staged); every product step 8 "
                 "can take, through registers (on); or never (off)",
                 {"auto", "regs", "staged", "on", "off"});
  cli.add_string("--handover", &o.handover,
                 "own graph path, fp16: the slices of a GEMM step 8 forward (2-8 along K a 128-column tile, 2-16 of "
                 "softmax-CE's narrow product) and of a fused backward pass (2-16 row slices a 64-column tile) run as one thread-block cluster and add their "
                 "partial tiles through its shared memory (cluster; sm_90; fewer, longer slices where the GPU cannot "
                 "hold every cluster at once), or hand them over through global memory, a fence and a counter (global)",
                 {"cluster", "global"});
  cli.add_string("--l2-evict", &o.l2_evict,
                 "own graph path, fp16, fused backward: the passes' copies and stores of the fp32 master weights "
                 "marked evict-first in L2, so that the fp16 copies the next forwards read outlast them (on), or "
                 "not (off); auto: on where masters and copies overflow L2 and the widest layer's copy fits in it "
                 "(W2 h = 2,048 and 4,096 on an H100), where it measured faster",
                 {"auto", "on", "off"});
  cli.add_string("--fused-warps", &o.fused_warps,
                 "own graph path, fp16, fused backward: warps a block of a hidden layer's pass (its update and the "
                 "backward-data product), 4 or 8 (8: twice the warps to issue the same work, two blocks an SM; the same "
                 "bits where the slices are the same); auto: 4",
                 {"auto", "4", "8"});
  cli.add_string("--last-pass", &o.last_pass,
                 "own graph path, fp16, fused backward: the last layer's pass (its update and dZ of the layer below) "
                 "runs in softmax-CE's kernel, each of its K slices on its own columns once the slices' cluster has "
                 "the loss gradient (tail; where softmax-CE runs on GEMM step 8's narrow kernel with --handover "
                 "cluster), or as a kernel of its own (kernel); auto: the tail where its slices take at most 128 "
                 "columns each (K <= 2048), where it measured faster",
                 {"auto", "tail", "kernel"});
  cli.add_string("--next-forward", &o.next_forward,
                 "own graph path, fp16, fused backward: the next step's first forward (the gathered bytes times the "
                 "first layer's new weights) runs in the first layer's pass, each block on its rows and columns, the "
                 "column tiles' partials added once a row slice, as one cluster or by the last to finish (pass; every "
                 "step of a graph but its first), or as a GEMM step 8 kernel of its own (kernel); auto: pass where "
                 "every slice's column tiles fit the GPU as one cluster at once and a slice holds at most 64 rows "
                 "(h <= 1024), where it measured faster",
                 {"auto", "pass", "kernel"});
  cli.add_string("--row-chain", &o.row_chain,
                 "own graph path, two hidden layers, branched backward: the hidden forward, softmax-CE and both "
                 "backward-data products in one kernel of 32-row blocks with the upper layers' weights in shared "
                 "memory (5a_row_chain.cuh; on), or as four GEMM kernels (off); auto: on where it can run at batch <= 64 "
                 "in fp32 and <= 32 in fp16, where it measured faster",
                 {"auto", "on", "off"});
  cli.add_flag("--gemm-compare", &compare,
               "only the GEMM benchmark: every product of a step at this batch, each own rung and cuBLASLt (fp32, TF32; fp16), checked against float64 and timed, into a record (no training)");
  if (!cli.parse(argc, argv)) return 0;
  check_mlp_options(o);
  if (o.layers.back() > kBN) throw Error(kExitUsage, "--layers: the last width must fit one tile");
  if (o.launch == "auto") {  // the plan by model: launch_plan.h's rule, from the rungs' plans
    resolve_auto_launch(o, require_device().index);
    std::printf("launch plan: auto -> %s (%s)\n", o.launch.c_str(), o.launch_auto.c_str());
  }
  const Rung& rung = find_rung(o.launch);  // the one lookup: every later rung decision goes through it
  check_rung(rung, o);
  check_output_dir(o.common.out);  // a bad --out fails now (exit 6), not after training
  if (compare) {
    const DeviceInfo dev = require_device();
    return o.fp16() ? gemm_compare<__half>(o, cli, dev, kPhase) : gemm_compare<float>(o, cli, dev, kPhase);
  }
  const MlpSetup s = prepare_mlp_run(o);
  const DeviceInfo dev = require_device();
  const Fp32Gemm fg = parse_fp32_gemm(o.fp32_gemm);
  return o.fp16() ? train<__half>(o, rung, cli, dev, s.ds, s.sc, s.init, fg)
                  : train<float>(o, rung, cli, dev, s.ds, s.sc, s.init, fg);
}

}  // namespace
}  // namespace nb

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, nb::run); }
