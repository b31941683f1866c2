// phase1_naive — linear regression y = w·x + b, the way a first CUDA program looks: correct, naive.
//
// WHAT THIS CHAPTER IS
//   The data set (common/linreg_data.h) lives on the GPU: n points, train split first (the
//   first nt = linreg_train_count(n) slots), test split after it. Full-batch gradient descent on
//   the mean squared error, lr 0.01, 200 epochs, w0 = 0.83, b0 = 0.7645. Epoch e computes the
//   train loss at the parameters it starts with (loss[e]), then updates w and b. Every epoch is
//   one kernel per operation, exactly as the maths is written down:
//     1. forward   pred[i] = w·x[i] + b                  (predictions go to global memory)
//     2. loss      Σ (pred[i] − y[i])²                   (one global atomicAdd per element)
//     3. gradients Σ (pred[i] − y[i])·x[i], Σ (pred[i] − y[i])  (two atomics per element)
//     4. update    one thread: loss = Σ/nt, w −= lr·2Σrx/nt, b −= lr·2Σr/nt
//     5. the host copies the loss back (a synchronous cudaMemcpy: the CPU waits every epoch).
//
// THE ONE DESIGN DECISION: WHAT DO THE ATOMICS ACCUMULATE INTO?
//   Per-element atomicAdd into a float is the "obvious" first program, and it is wrong at this
//   scale: after 16.8M additions of values near 0.25 a float sum near 4e6 has an ulp of 0.25-0.5,
//   so every further term is rounded by up to its own size. We accumulate into DOUBLE (native
//   since sm_60): the residual is float32 like the model, products and sums are float64, ~1e-9
//   from the float64 reference. The cost of the naive structure — n same-address atomics per sum,
//   serialized in the L2 — stays in full view, which is what phase 2 removes. --deterministic:
//   per-element terms to a buffer, added by a pairwise tree in global memory: bit-identical runs.
//
// PREDICTION (worked out before measuring: headline n = 5M → nt = 4M train points, H100)
//   Bytes per epoch: forward reads x, writes pred (8 B/pt); loss reads pred, y (8); gradients
//   read pred, x, y (12): 28 B/pt × 4M = 112 MB → 37 µs at ~3 TB/s. Atomics: 3 × 4M = 12M
//   same-address double atomics per epoch. Same-address atomics are processed one at a time by
//   the L2 slice that owns the address, roughly one per L2 clock (~1.7 GHz), so ~7 ms/epoch,
//   i.e. ~1.4 s for 200 epochs: the atomics, not the memory, set the time (~190× the byte
//   floor). The per-epoch host sync (~10 µs) is noise next to that.
//
// MEASURED (NVIDIA H200, profiles/nvidia-h200/, make run FULL=1 at 8fea4d0): 5M x 200 in 4229 ms
//   (phase1_naive__headline.json, median of 5; 21.1 ms an epoch). Per epoch (CUPTI, on while
//   timing in that record): gradients 14.06 ms, loss 7.03 ms, forward 11 µs, update 1.1 µs: the
//   atomics are the whole story, as predicted, but 3x slower (~1.75 ns a same-address double
//   atomic, not one L2 clock). 1538x slower than the fastest PyTorch of the same run (compiled-graph,
//   2.750 ms: pytorch_linreg__headline-compiled-graph.json), 76.8x slower than eager (55.08 ms:
//   __headline-eager.json); phase 2 is 523x faster. H100 records: profiles/nvidia-h100-80gb-hbm3/.
//
// Notes (the H100 measurements, sweep and validation): report/phase_notes/phase1_naive.md.
// Flags: --n --epochs --lr --save-data FILE.npy + the common flags (--help lists them).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.h"
#include "cuda_handles.h"
#include "device_info.h"
#include "errors.h"
#include "linreg_data.cuh"
#include "linreg_data.h"
#include "linreg_harness.h"
#include "nvtx.h"
#include "record.h"
#include "runner.h"
#include "stats.h"
#include "timing.cuh"
#include "tracer.h"

namespace {

constexpr int kBlock = 256;
constexpr const char* kPhase = "phase1_naive";

int blocks_for(size_t n) { return static_cast<int>((n + kBlock - 1) / kBlock); }

// ----------------------------------------------------------------------------- kernels
// params = {w, b} (float32, on the device so no kernel needs the host's copy).
__global__ void forward_kernel(const float* __restrict__ x, const float* __restrict__ params,
                               float* __restrict__ pred, size_t n) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) pred[i] = params[0] * x[i] + params[1];
}

// acc[0] += Σ (pred − y)²: one atomic per element.
__global__ void loss_kernel(const float* __restrict__ pred, const float* __restrict__ y, size_t n, double* acc) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) {
    const double r = pred[i] - y[i];
    atomicAdd(&acc[0], r * r);
  }
}

// acc[1] += Σ (pred − y)·x, acc[2] += Σ (pred − y): two atomics per element.
__global__ void grad_kernel(const float* __restrict__ pred, const float* __restrict__ x,
                            const float* __restrict__ y, size_t n, double* acc) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) {
    const double r = pred[i] - y[i];
    atomicAdd(&acc[1], r * x[i]);
    atomicAdd(&acc[2], r);
  }
}

// One thread: the epoch's loss and the gradient step.
__global__ void update_kernel(float* params, const double* acc, double inv_n, double lr, double* loss_out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  *loss_out = acc[0] * inv_n;
  const double gw = 2.0 * acc[1] * inv_n, gb = 2.0 * acc[2] * inv_n;
  params[0] = static_cast<float>(params[0] - lr * gw);
  params[1] = static_cast<float>(params[1] - lr * gb);
}

__global__ void init_params_kernel(float* params, float w0, float b0) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    params[0] = w0;
    params[1] = b0;
  }
}

// --deterministic: per-element terms into a buffer, then a pairwise tree in global memory.
// which = 0: (pred−y)², 1: (pred−y)·x, 2: pred−y.
__global__ void terms_kernel(const float* __restrict__ pred, const float* __restrict__ x,
                             const float* __restrict__ y, size_t n, int which, double* __restrict__ t) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) {
    const double r = pred[i] - y[i];
    t[i] = which == 0 ? r * r : which == 1 ? r * x[i] : r;
  }
}

// One level of the tree: t[i] += t[i + half] for i < len − half (half = ⌈len/2⌉).
__global__ void pairwise_step_kernel(double* t, size_t len, size_t half) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i + half < len) t[i] += t[i + half];
}

// ----------------------------------------------------------------------------- the program
struct Buffers {  // the device buffers as plain pointers (main's nb::DevBuf objects own them)
  float* x = nullptr;      // n, storage order (train first)
  float* y = nullptr;
  float* pred = nullptr;   // n (train predictions, later test predictions)
  float* params = nullptr; // {w, b}
  double* acc = nullptr;   // 3 sums
  double* loss = nullptr;  // this epoch's loss
  double* terms = nullptr; // --deterministic: nt terms
};

// Σ of t[0..len) in a fixed order into *dst (device), destroying t.
void pairwise_sum(double* t, size_t len, double* dst, cudaStream_t s) {
  while (len > 1) {
    const size_t half = (len + 1) / 2;
    pairwise_step_kernel<<<blocks_for(len - half), kBlock, 0, s>>>(t, len, half);
    CHECK_LAUNCH();
    len = half;
  }
  CUDA_CHECK(cudaMemcpyAsync(dst, t, sizeof(double), cudaMemcpyDeviceToDevice, s));
}

// Σ (pred − y)² over [lo, lo + len) of the data into acc[0] (acc zeroed by the caller).
void sum_squared_residuals(const Buffers& B, size_t lo, size_t len, bool det, cudaStream_t s) {
  if (!det) {
    loss_kernel<<<blocks_for(len), kBlock, 0, s>>>(B.pred + lo, B.y + lo, len, B.acc);
    CHECK_LAUNCH();
  } else {
    terms_kernel<<<blocks_for(len), kBlock, 0, s>>>(B.pred + lo, B.x + lo, B.y + lo, len, 0, B.terms);
    CHECK_LAUNCH();
    pairwise_sum(B.terms, len, B.acc, s);
  }
}

// One epoch over the train split [0, nt); returns loss[e] (read back by the host).
double train_epoch(const Buffers& B, size_t nt, double lr, bool det, cudaStream_t s) {
  CUDA_CHECK(cudaMemsetAsync(B.acc, 0, 3 * sizeof(double), s));
  {
    NB_NVTX_RANGE(nb::Cat::Forward, "forward");
    forward_kernel<<<blocks_for(nt), kBlock, 0, s>>>(B.x, B.params, B.pred, nt);
    CHECK_LAUNCH();
  }
  {
    NB_NVTX_RANGE(nb::Cat::Loss, "loss");
    sum_squared_residuals(B, 0, nt, det, s);
  }
  {
    NB_NVTX_RANGE(nb::Cat::Backward, "gradients");
    if (!det) {
      grad_kernel<<<blocks_for(nt), kBlock, 0, s>>>(B.pred, B.x, B.y, nt, B.acc);
      CHECK_LAUNCH();
    } else {
      for (int which = 1; which <= 2; ++which) {
        terms_kernel<<<blocks_for(nt), kBlock, 0, s>>>(B.pred, B.x, B.y, nt, which, B.terms);
        CHECK_LAUNCH();
        pairwise_sum(B.terms, nt, B.acc + which, s);
      }
    }
  }
  {
    NB_NVTX_RANGE(nb::Cat::Update, "update");
    update_kernel<<<1, 1, 0, s>>>(B.params, B.acc, 1.0 / double(nt), lr, B.loss);
    CHECK_LAUNCH();
  }
  double loss = 0;
  {
    NB_NVTX_RANGE(nb::Cat::Sync, "read loss");
    // (on the work's own stream: a plain cudaMemcpy would not wait for a non-blocking stream)
    CUDA_CHECK(cudaMemcpyAsync(&loss, B.loss, sizeof(double), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));  // the host waits for the epoch
  }
  return loss;
}

// Test loss at the current parameters: forward + loss over the test split [nt, n).
double test_loss(const Buffers& B, size_t n, bool det, cudaStream_t s) {
  const size_t nt = nb::linreg_train_count(n), ntest = n - nt;
  if (ntest == 0) return NAN;
  NB_NVTX_RANGE(nb::Cat::Eval, "test loss");
  CUDA_CHECK(cudaMemsetAsync(B.acc, 0, 3 * sizeof(double), s));
  forward_kernel<<<blocks_for(ntest), kBlock, 0, s>>>(B.x + nt, B.params, B.pred + nt, ntest);
  CHECK_LAUNCH();
  sum_squared_residuals(B, nt, ntest, det, s);
  double sum = 0;
  CUDA_CHECK(cudaMemcpyAsync(&sum, B.acc, sizeof(double), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  return sum / double(ntest);
}

void init_params(const Buffers& B, cudaStream_t s) {
  NB_NVTX_RANGE(nb::Cat::Init, "init w,b");
  init_params_kernel<<<1, 1, 0, s>>>(B.params, nb::linreg_init_w(), nb::linreg_init_b());
  CHECK_LAUNCH();
}

int run(int argc, char** argv) {
  nb::Cli cli(kPhase, "Linear regression, naive CUDA: one kernel per operation, per-element atomics.");
  int64_t n = 5000000;
  int epochs = 200;
  double lr = 0.01;
  std::string save_data;
  cli.add_int("--n", &n, "number of points (train = first 80%-ish slots, see linreg_data.h)", 1, 4000000000LL);
  cli.add_int("--epochs", &epochs, "full-batch gradient-descent epochs", 1, 1000000);
  cli.add_double("--lr", &lr, "learning rate");
  cli.add_string("--save-data", &save_data, "write the points as float32 .npy (n,2) for the PyTorch twin");
  nb::CommonOptions opt;
  cli.add_common(&opt);
  if (!cli.parse(argc, argv)) return 0;
  nb::check_output_dir(opt.out);  // a bad --out fails now (exit 6), not after training

  const nb::DeviceInfo dev = nb::require_device();
  nb::Tracer& tracer = nb::Tracer::instance();  // started after the timed runs (nb::timed_then_traced)
  const size_t N = static_cast<size_t>(n), nt = nb::linreg_train_count(N);
  const bool det = opt.deterministic;

  // Refuse what does not fit before allocating: x, y, pred (+ terms), or generation's peak.
  const size_t resident = 3 * N * sizeof(float) + (det ? nt * sizeof(double) : 0) + 4096;
  nb::require_free_memory(std::max(resident, nb::linreg_generate_bytes(N) + N * sizeof(float)), "the data set");

  nb::Streams streams(1);  // RAII handles (common/cuda_handles.h): freed on every exit path
  cudaStream_t s = streams.s[0];
  nb::DevBuf<float> d_x(N), d_y(N), d_params(2), d_pred;
  nb::DevBuf<double> d_acc(3), d_loss(1), d_terms;
  Buffers B{d_x.get(), d_y.get(), nullptr, d_params.get(), d_acc.get(), d_loss.get(), nullptr};
  {
    NB_NVTX_RANGE(nb::Cat::Init, "generate data");
    nb::generate_linreg(B.x, B.y, N, opt.seed, s);
  }
  d_pred.alloc(N);  // after generation: its scratch and pred are never resident together
  B.pred = d_pred.get();
  if (det) d_terms.alloc(nt), B.terms = d_terms.get();

  // Host copies for --validate and --save-data (untimed).
  std::vector<float> hx, hy;
  if (opt.validate || !save_data.empty()) {
    NB_NVTX_RANGE(nb::Cat::H2D, "copy data to host");
    hx.resize(N);
    hy.resize(N);
    CUDA_CHECK(cudaMemcpy(hx.data(), B.x, N * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hy.data(), B.y, N * sizeof(float), cudaMemcpyDeviceToHost));
    if (!save_data.empty()) {
      nb::save_linreg_npy(save_data, hx.data(), hy.data(), N);
      std::printf("wrote %s (%zu points, float32 (n,2), storage order)\n", save_data.c_str(), N);
    }
  }

  // ---- training: one run from w0, b0 (its time in ms; the loss curve into out.loss)
  nb::LinregOutcome out;
  nb::EventTimer timer(s);
  auto one_run = [&]() -> double {
    init_params(B, s);
    std::vector<double> loss(static_cast<size_t>(epochs));
    timer.start();
    for (int e = 0; e < epochs; ++e) {
      loss[static_cast<size_t>(e)] = train_epoch(B, nt, lr, det, s);
      nb::throw_if_interrupted("training");
    }
    timer.stop();
    out.loss = std::move(loss);
    return timer.elapsed_ms();
  };
  // Warm-up, the timed runs without our CUPTI tracer, then ONE run with it on for the kernel
  // summaries (a phase-1 run is seconds at 5M; one traced run holds every kernel of an epoch).
  const nb::TimedRuns runs = nb::timed_then_traced({opt.warmup, opt.repeats, 1, !opt.no_cupti},
                                                   [&](nb::RunKind) { return one_run(); });
  const std::vector<double>& samples = runs.samples;
  const nlohmann::json traced = nb::linreg_trace_summary(
      opt.trace, runs.trace_runs,
      "kernels/memcpy/ranges: from one extra untimed run after the timed ones, with our CUPTI tracer on "
      "(the timed runs ran without it)");
  tracer.stop();
  float hp[2];
  CUDA_CHECK(cudaMemcpy(hp, B.params, sizeof hp, cudaMemcpyDeviceToHost));
  out.w = hp[0];
  out.b = hp[1];
  out.test_loss = test_loss(B, N, det, s);  // untimed, after the last measured run
  const nb::Stats st = nb::summarize(samples);

  // ---- the record
  nlohmann::json rec = nb::new_record(kPhase, "linreg", "cuda", cli);
  rec["device"] = nb::to_json(dev);
  rec["timing"] = nb::timing_json("cuda-events",
                                  "the training loop: per epoch memset + forward + loss + gradients + update "
                                  "kernels and the host's synchronous loss read-back; data resident on the device",
                                  "data generation, parameter initialisation, test evaluation, validation",
                                  opt.warmup, st);
  rec["timing"]["per_epoch_ms_median"] = st.median / epochs;
  nb::linreg_fill_results(rec, out);
  rec["data"] = {{"n", N}, {"train", nt}, {"test", N - nt}, {"seed", opt.seed},
                 {"saved_to", save_data.empty() ? nlohmann::json(nullptr) : nlohmann::json(save_data)}};
  rec["accumulation"] = det ? "per-element double terms, fixed-order pairwise tree in global memory"
                            : "per-element atomicAdd into double";
  rec["timing"]["traced"] = false;
  nb::linreg_merge_trace(rec, traced);
  if (opt.measure_peaks) rec["peaks"] = nb::to_json(nb::measure_peaks());

  std::printf("%s: n=%zu epochs=%d w=%.7f b=%.7f train_loss=%.7f test_loss=%.7f time median %.3f ms (%d runs)%s\n",
              kPhase, N, epochs, out.w, out.b, out.loss.back(), out.test_loss, st.median, st.count,
              det ? " [deterministic]" : "");

  return nb::linreg_finish(rec, hx, hy, lr, epochs, out, opt, dev.slug, kPhase);
}

}  // namespace

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, run); }
