// phase2_shared_mem — linear regression, same structure as phase 1, reductions done properly.
//
// WHAT THIS CHAPTER ADDS OVER phase1_naive
//   The program is the same — forward, loss, gradients, a one-thread update, the host reading
//   the loss every epoch — but each reduction now happens where it is cheap:
//     * each thread sums many elements in registers (a grid-stride loop over a fixed grid of
//       8 blocks per SM),
//     * the block combines its 256 threads with warp shuffles (__shfl_down_sync, no shared
//       memory, no barrier) and then one shared-memory step across its 8 warps,
//     * ONE atomicAdd per block and sum reaches global memory (≈1k instead of 4M per sum);
//   and every load is 16 bytes wide (float4), with a scalar head up to the first 16-byte
//   boundary and a scalar tail: the test split starts at slot nt, which is in general not a
//   multiple of 4, so its loads are misaligned unless peeled (n not a multiple of 4 gives the
//   tail).
//
// PRECISION
//   Inside one float4 the four terms are added in float32; each thread then accumulates those
//   partial sums in float64, and the block and grid combine in float64. So no float sum runs
//   over more than 4 terms, whatever n is (80M train points included): the result matches the
//   float64 reference to ~1e-9 relative. (Per-thread float accumulation over the ~300 float4s a
//   thread sees at 100M points would cost ~1e-5 relative; float atomics into one float would be
//   useless, see phase 1.) The float→double conversions (3 per 4 points) are far under the
//   conversion unit's rate.
//   --deterministic: the per-block partial sums go to a buffer instead of atomics, and the update
//   kernel (one block) adds them in a fixed order: two runs are bit-identical. The per-thread and
//   per-block orders are fixed anyway (fixed grid, fixed assignment of elements to threads).
//
// PREDICTION (two numbers, headline n = 5M → nt = 4M, H100)
//   Bytes per epoch are unchanged: forward 8 B/pt, loss 8, gradients 12 → 112 MB → 37 µs at
//   ~3 TB/s (less if pred/x/y, 48 MB, partly stay in the 50 MB L2). The same-address atomics
//   (phase 1's ~7 ms/epoch) disappear, so the time becomes bytes + ~5 launches and one host
//   round trip per epoch: ~50-60 µs/epoch, ~11 ms for 200 epochs — two orders of magnitude
//   faster than phase 1, far beyond the ≥2× target. What is left is structural: 3.5× the
//   necessary bytes (pred written and re-read twice) and a host sync every epoch — phase 3.
//
// MEASURED (NVIDIA H200, profiles/nvidia-h200/, make run FULL=1 at 8fea4d0): 5M x 200 in 8.09 ms
//   (phase2_shared_mem__headline.json, median of 5; 40.5 µs an epoch), 523x faster than phase 1.
//   Per epoch (CUPTI, 5 untimed traced runs): gradients 8.9 µs, forward 6.4, loss 6.1, update 1.1
//   = 22.5 µs of kernels; the other ~18 µs are the host's loop. 2.94x SLOWER than the fastest
//   PyTorch of the same run, the compiled CUDA graph (2.750 ms:
//   pytorch_linreg__headline-compiled-graph.json); 6.81x faster than eager (55.08 ms). At 100M:
//   544 µs an epoch, 2.24 GB at 4.12 TB/s, 98% of the copy ceiling (ceilings__bench-linreg.json).
//
// Notes (H100 runs: profiles/nvidia-h100-80gb-hbm3/): report/phase_notes/phase2_shared_mem.md.
// Flags: --n --epochs --lr + the common flags (--help lists them).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

constexpr int kBlock = 256, kWarps = kBlock / 32, kBlocksPerSm = 8;
constexpr const char* kPhase = "phase2_shared_mem";

// ----------------------------------------------------------------------------- device helpers
// The elements [0, len) of arrays that start `lo` floats past a 16-byte-aligned base, split into
// a scalar head (up to the first 16-byte boundary), a float4 body and a scalar tail.
struct VecSplit {
  size_t head, nvec, tail_start, tail;
};
__host__ __device__ inline VecSplit vec_split(size_t lo, size_t len) {
  size_t head = (4 - lo % 4) % 4;
  if (head > len) head = len;
  const size_t nvec = (len - head) / 4;
  const size_t tail_start = head + 4 * nvec;
  return {head, nvec, tail_start, len - tail_start};
}

__device__ inline float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// Sum of v over the warp (result in lane 0), then over the block (result in thread 0).
__device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
template <int K>
__device__ inline void block_sum(double (&v)[K]) {
  __shared__ double sm[K][kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(v[k]);
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < K; ++k) sm[k][warp] = v[k];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      double t = lane < kWarps ? sm[k][lane] : 0.0;
      for (int o = kWarps / 2; o > 0; o >>= 1) t += __shfl_down_sync(0xffffffffu, t, o);
      v[k] = t;
    }
  }
}

// Thread 0's block sums go to acc[k] (one atomic per block and sum), or with partials != nullptr
// to partials[k * gridDim.x + blockIdx.x] (deterministic).
template <int K>
__device__ inline void publish(const double (&v)[K], double* acc, double* partials) {
  if (threadIdx.x != 0) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (partials) partials[k * gridDim.x + blockIdx.x] = v[k];
    else atomicAdd(&acc[k], v[k]);
  }
}

// ----------------------------------------------------------------------------- kernels
// pred[i] = w·x[i] + b over [lo, lo + len), float4 body.
__global__ void forward_kernel(const float* __restrict__ x, const float* __restrict__ params,
                               float* __restrict__ pred, size_t lo, size_t len) {
  const float w = params[0], b = params[1];
  const VecSplit sp = vec_split(lo, len);
  const size_t tid = blockIdx.x * size_t(blockDim.x) + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
  x += lo;
  pred += lo;
  for (size_t v = tid; v < sp.nvec; v += stride) {
    const size_t i = sp.head + 4 * v;
    const float4 a = ld4(x + i);
    *reinterpret_cast<float4*>(pred + i) = make_float4(w * a.x + b, w * a.y + b, w * a.z + b, w * a.w + b);
  }
  if (tid < sp.head) pred[tid] = w * x[tid] + b;
  if (tid < sp.tail) pred[sp.tail_start + tid] = w * x[sp.tail_start + tid] + b;
}

// acc[0] += Σ (pred − y)² over [lo, lo + len).
__global__ void loss_kernel(const float* __restrict__ pred, const float* __restrict__ y, size_t lo, size_t len,
                            double* acc, double* partials) {
  const VecSplit sp = vec_split(lo, len);
  const size_t tid = blockIdx.x * size_t(blockDim.x) + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
  pred += lo;
  y += lo;
  double s[1] = {0.0};
  for (size_t v = tid; v < sp.nvec; v += stride) {
    const size_t i = sp.head + 4 * v;
    const float4 p = ld4(pred + i), t = ld4(y + i);
    const float r0 = p.x - t.x, r1 = p.y - t.y, r2 = p.z - t.z, r3 = p.w - t.w;
    s[0] += double(r0 * r0 + r1 * r1 + r2 * r2 + r3 * r3);
  }
  if (tid < sp.head) {
    const float r = pred[tid] - y[tid];
    s[0] += double(r * r);
  }
  if (tid < sp.tail) {
    const float r = pred[sp.tail_start + tid] - y[sp.tail_start + tid];
    s[0] += double(r * r);
  }
  block_sum(s);
  publish(s, acc, partials);
}

// acc[1] += Σ (pred − y)·x, acc[2] += Σ (pred − y) over the train split [0, len).
__global__ void grad_kernel(const float* __restrict__ pred, const float* __restrict__ x, const float* __restrict__ y,
                            size_t len, double* acc, double* partials) {
  const VecSplit sp = vec_split(0, len);
  const size_t tid = blockIdx.x * size_t(blockDim.x) + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
  double s[2] = {0.0, 0.0};
  for (size_t v = tid; v < sp.nvec; v += stride) {
    const size_t i = sp.head + 4 * v;
    const float4 p = ld4(pred + i), a = ld4(x + i), t = ld4(y + i);
    const float r0 = p.x - t.x, r1 = p.y - t.y, r2 = p.z - t.z, r3 = p.w - t.w;
    s[0] += double(r0 * a.x + r1 * a.y + r2 * a.z + r3 * a.w);
    s[1] += double(r0 + r1 + r2 + r3);
  }
  if (tid < sp.tail) {
    const size_t i = sp.tail_start + tid;
    const float r = pred[i] - y[i];
    s[0] += double(r * x[i]);
    s[1] += double(r);
  }
  block_sum(s);
  publish(s, acc + 1, partials ? partials + gridDim.x : nullptr);
}

// One block. Default: thread 0 reads the three atomically accumulated sums. --deterministic:
// the block first adds the per-block partials (3 × nparts) in a fixed order into acc.
// Then: loss = Σr²/nt, w −= lr·2Σrx/nt, b −= lr·2Σr/nt.
__global__ void update_kernel(float* params, double* acc, const double* partials, int nparts, double inv_n, double lr,
                              double* loss_out) {
  if (partials) {
    double v[3] = {0.0, 0.0, 0.0};
    for (int k = 0; k < 3; ++k)
      for (int j = threadIdx.x; j < nparts; j += blockDim.x) v[k] += partials[k * nparts + j];
    block_sum(v);
    if (threadIdx.x == 0)
      for (int k = 0; k < 3; ++k) acc[k] = v[k];
  }
  if (threadIdx.x != 0) return;
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

// ----------------------------------------------------------------------------- the program
struct Buffers {  // the device buffers as plain pointers (main's nb::DevBuf objects own them)
  float* x = nullptr;         // n, storage order (train first)
  float* y = nullptr;
  float* pred = nullptr;      // n
  float* params = nullptr;    // {w, b}
  double* acc = nullptr;      // 3 sums
  double* loss = nullptr;     // this epoch's loss
  double* partials = nullptr; // --deterministic: 3 × grid
};

// A fixed grid (so the summation order is fixed), never more blocks than float4s to read.
int grid_for(size_t len, int sm_count) {
  const size_t need = (len / 4 + kBlock - 1) / kBlock;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(need, size_t(sm_count) * kBlocksPerSm)));
}

struct Ctx {
  Buffers* B;
  size_t nt;
  int grid;  // for the train split
  bool det;
  cudaStream_t s;
};

double train_epoch(const Ctx& c, double lr) {
  const Buffers& B = *c.B;
  double* parts = c.det ? B.partials : nullptr;
  if (!c.det) CUDA_CHECK(cudaMemsetAsync(B.acc, 0, 3 * sizeof(double), c.s));
  {
    NB_NVTX_RANGE(nb::Cat::Forward, "forward");
    forward_kernel<<<c.grid, kBlock, 0, c.s>>>(B.x, B.params, B.pred, 0, c.nt);
    CHECK_LAUNCH();
  }
  {
    NB_NVTX_RANGE(nb::Cat::Loss, "loss");
    loss_kernel<<<c.grid, kBlock, 0, c.s>>>(B.pred, B.y, 0, c.nt, B.acc, parts);
    CHECK_LAUNCH();
  }
  {
    NB_NVTX_RANGE(nb::Cat::Backward, "gradients");
    grad_kernel<<<c.grid, kBlock, 0, c.s>>>(B.pred, B.x, B.y, c.nt, B.acc, parts);
    CHECK_LAUNCH();
  }
  {
    NB_NVTX_RANGE(nb::Cat::Update, "update");
    update_kernel<<<1, kBlock, 0, c.s>>>(B.params, B.acc, parts, c.grid, 1.0 / double(c.nt), lr, B.loss);
    CHECK_LAUNCH();
  }
  double loss = 0;
  {
    NB_NVTX_RANGE(nb::Cat::Sync, "read loss");
    // (on the work's own stream: a plain cudaMemcpy would not wait for a non-blocking stream)
    CUDA_CHECK(cudaMemcpyAsync(&loss, B.loss, sizeof(double), cudaMemcpyDeviceToHost, c.s));
    CUDA_CHECK(cudaStreamSynchronize(c.s));  // the host waits for the epoch
  }
  return loss;
}

// Test loss at the current parameters over [nt, n): its first element is in general not
// 16-byte aligned, which is what the head peeling is for.
double test_loss(const Ctx& c, size_t n, int sm_count) {
  const size_t ntest = n - c.nt;
  if (ntest == 0) return NAN;
  const Buffers& B = *c.B;
  NB_NVTX_RANGE(nb::Cat::Eval, "test loss");
  const int g = grid_for(ntest, sm_count);
  CUDA_CHECK(cudaMemsetAsync(B.acc, 0, 3 * sizeof(double), c.s));
  forward_kernel<<<g, kBlock, 0, c.s>>>(B.x, B.params, B.pred, c.nt, ntest);
  CHECK_LAUNCH();
  // Deterministic here too when asked: partials of the one sum, added on the host in order.
  double sum = 0;
  if (c.det) {
    loss_kernel<<<g, kBlock, 0, c.s>>>(B.pred, B.y, c.nt, ntest, B.acc, B.partials);
    CHECK_LAUNCH();
    std::vector<double> h(static_cast<size_t>(g));
    CUDA_CHECK(cudaMemcpyAsync(h.data(), B.partials, h.size() * sizeof(double), cudaMemcpyDeviceToHost, c.s));
    CUDA_CHECK(cudaStreamSynchronize(c.s));
    for (double v : h) sum += v;
  } else {
    loss_kernel<<<g, kBlock, 0, c.s>>>(B.pred, B.y, c.nt, ntest, B.acc, nullptr);
    CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpyAsync(&sum, B.acc, sizeof(double), cudaMemcpyDeviceToHost, c.s));
    CUDA_CHECK(cudaStreamSynchronize(c.s));
  }
  return sum / double(ntest);
}

int run(int argc, char** argv) {
  nb::Cli cli(kPhase, "Linear regression: phase 1's structure with shared-memory/warp-shuffle reductions and float4 loads.");
  int64_t n = 5000000;
  int epochs = 200;
  double lr = 0.01;
  cli.add_int("--n", &n, "number of points (train = first 80%-ish slots, see linreg_data.h)", 1, 4000000000LL);
  cli.add_int("--epochs", &epochs, "full-batch gradient-descent epochs", 1, 1000000);
  cli.add_double("--lr", &lr, "learning rate");
  nb::CommonOptions opt;
  cli.add_common(&opt);
  if (!cli.parse(argc, argv)) return 0;
  nb::check_output_dir(opt.out);  // a bad --out fails now (exit 6), not after training

  const nb::DeviceInfo dev = nb::require_device();
  nb::Tracer& tracer = nb::Tracer::instance();  // started after the timed runs (see below)
  const size_t N = static_cast<size_t>(n), nt = nb::linreg_train_count(N);

  const size_t resident = 3 * N * sizeof(float) + 4096 + 3 * sizeof(double) * size_t(dev.sm_count) * kBlocksPerSm;
  nb::require_free_memory(std::max(resident, nb::linreg_generate_bytes(N) + N * sizeof(float)), "the data set");

  nb::Streams streams(1);  // RAII handles (common/cuda_handles.h): freed on every exit path
  cudaStream_t s = streams.s[0];
  // (cudaMalloc underneath: 256-byte aligned, as vec_split assumes)
  nb::DevBuf<float> d_x(N), d_y(N), d_params(2), d_pred;
  nb::DevBuf<double> d_acc(3), d_loss(1), d_partials(3 * size_t(dev.sm_count) * kBlocksPerSm);
  Buffers B{d_x.get(), d_y.get(), nullptr, d_params.get(), d_acc.get(), d_loss.get(), d_partials.get()};
  {
    NB_NVTX_RANGE(nb::Cat::Init, "generate data");
    nb::generate_linreg(B.x, B.y, N, opt.seed, s);
  }
  d_pred.alloc(N);  // after generation: its scratch and pred are never resident together
  B.pred = d_pred.get();
  const Ctx ctx{&B, nt, grid_for(nt, dev.sm_count), opt.deterministic, s};

  std::vector<float> hx, hy;
  if (opt.validate) {
    NB_NVTX_RANGE(nb::Cat::H2D, "copy data to host");
    hx.resize(N);
    hy.resize(N);
    CUDA_CHECK(cudaMemcpy(hx.data(), B.x, N * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hy.data(), B.y, N * sizeof(float), cudaMemcpyDeviceToHost));
  }

  // One training run from w0, b0: its time (ms); the loss curve into out.loss.
  nb::LinregOutcome out;
  nb::EventTimer timer(s);
  auto one_run = [&]() -> double {
    {
      NB_NVTX_RANGE(nb::Cat::Init, "init w,b");
      init_params_kernel<<<1, 1, 0, s>>>(B.params, nb::linreg_init_w(), nb::linreg_init_b());
      CHECK_LAUNCH();
    }
    std::vector<double> loss(static_cast<size_t>(epochs));
    timer.start();
    for (int e = 0; e < epochs; ++e) {
      loss[static_cast<size_t>(e)] = train_epoch(ctx, lr);
      nb::throw_if_interrupted("training");
    }
    timer.stop();
    const double ms = timer.elapsed_ms();
    out.loss = std::move(loss);
    return ms;
  };
  // Warm-up, the timed runs without our CUPTI tracer (it adds ~1.5 us to each of the ~6 launches
  // and copies of an epoch, ~15% of a phase-2 epoch at 5M), then as many runs again with it on.
  const nb::TimedRuns runs = nb::timed_then_traced({opt.warmup, opt.repeats, opt.repeats, !opt.no_cupti},
                                                   [&](nb::RunKind) { return one_run(); });
  const std::vector<double>& samples = runs.samples;
  const nlohmann::json traced = nb::linreg_trace_summary(
      opt.trace, runs.trace_runs,
      "kernels/memcpy/ranges: from trace_runs extra untimed runs after the timed ones, with our CUPTI tracer on "
      "(the timed runs ran without it)");
  tracer.stop();
  float hp[2];
  CUDA_CHECK(cudaMemcpy(hp, B.params, sizeof hp, cudaMemcpyDeviceToHost));
  out.w = hp[0];
  out.b = hp[1];
  out.test_loss = test_loss(ctx, N, dev.sm_count);
  const nb::Stats st = nb::summarize(samples);

  nlohmann::json rec = nb::new_record(kPhase, "linreg", "cuda", cli);
  rec["device"] = nb::to_json(dev);
  rec["timing"] = nb::timing_json("cuda-events",
                                  "the training loop: per epoch forward + loss + gradients + update kernels "
                                  "and the host's synchronous loss read-back; data resident on the device",
                                  "data generation, parameter initialisation, test evaluation, validation",
                                  opt.warmup, st);
  rec["timing"]["per_epoch_ms_median"] = st.median / epochs;
  nb::linreg_fill_results(rec, out);
  rec["data"] = {{"n", N}, {"train", nt}, {"test", N - nt}, {"seed", opt.seed}};
  rec["launch"] = {{"block", kBlock}, {"grid", ctx.grid}, {"blocks_per_sm", kBlocksPerSm}};
  rec["accumulation"] = opt.deterministic
                            ? "float within a float4, double per thread, block tree; block partials added in a fixed order"
                            : "float within a float4, double per thread, block tree; one double atomicAdd per block";
  rec["timing"]["traced"] = false;
  nb::linreg_merge_trace(rec, traced);
  if (opt.measure_peaks) rec["peaks"] = nb::to_json(nb::measure_peaks());

  std::printf("%s: n=%zu epochs=%d w=%.7f b=%.7f train_loss=%.7f test_loss=%.7f time median %.3f ms (%d runs)%s\n",
              kPhase, N, epochs, out.w, out.b, out.loss.back(), out.test_loss, st.median, st.count,
              opt.deterministic ? " [deterministic]" : "");

  return nb::linreg_finish(rec, hx, hy, lr, epochs, out, opt, dev.slug, kPhase);
}

}  // namespace

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, run); }
