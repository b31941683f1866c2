// phase3_fused_streams — linear regression: every epoch in ONE persistent kernel, the data on chip.
//
// WHAT THIS CHAPTER ADDS OVER phase2_shared_mem (five kernels an epoch, x and y read every epoch)
//   1. Default path (persistent.cuh). Where the data set fits in the registers and shared memory of
//      one co-resident block per SM (computed from the device: --print-fit), one cooperative kernel
//      runs all epochs: x, y are read from HBM once; an epoch is fp32 arithmetic on registers and
//      shared memory, float64 block sums and one exchange between blocks, after which every block
//      takes the step itself. The kernel writes each epoch's loss and, every --eval-every epochs, the
//      test loss (test points on chip too): no launch and no host round trip per epoch.
//   2. The previous rung, kept: one fused kernel per epoch in a CUDA graph, the test evaluation on a
//      second stream, --source host uploads chunked over streams with epoch 0 run per chunk. It runs
//      with --path graph and, automatically, where the data does not fit (output and record's
//      launch.path / path_note say which path ran and why).
//   --source host, persistent: the chunks land over the streams, then the kernel starts (it needs
//   every point for epoch 0); first_epoch_ms = upload + a 1-epoch run.
//
// THE DESIGN DECISION: how blocks meet each epoch. Each block adds its float64 sums, as fixed-point
//   integers (two words a value, the top byte counting the blocks), into words of the epoch's own
//   (red.add in L2; every word on a line of its own, in 2 copies, so the adds do not queue behind
//   each other); one warp a block polls the gradient words (losses one epoch late): integer addition
//   is exact and commutative, so every block and run gets the same bits whatever order blocks
//   arrive in (--deterministic costs nothing).
//   --exchange poll (tagged float64 words, the previous default) | grid-sync | counter: kept.
//
// PREDICTION (made before measuring; headline n = 5M: 4M train + 1M test points; H100, 132 SMs)
//   HBM: 40 MB read once, ~13 µs at ~3 TB/s: nothing next to 200 epochs.
//   Arithmetic: 5 fp32 ops a point (residual: FMA + subtract; loss, Σr·x: FMAs; Σr: add): 30.3K train
//   points an SM × 5 / 128 lanes = ~1,200 cycles = ~0.6 µs an epoch at ~1.9 GHz.
//   Exchange: an L2 round trip to publish, one to see the last block's word, block trees: ~0.8 µs.
//   So ~1.4 µs an epoch, ~0.3 ms for 200 epochs: under the 0.5 ms target. The floors the report
//   draws: HBM (32 MB an epoch at the copy ceiling), L2 (same bytes at the measured L2 read rate),
//   on chip (200 bare grid barriers, tools/grid_barrier); the algebraic limit (Σx, Σy, Σx², Σxy in
//   one pass) is no training loop.
//
// MEASURED (H100, profiles/nvidia-h100-80gb-hbm3/, bench_linreg.sh at 1c7cf79): 5M x 200 in 0.460 ms
//   (__headline, 2.3 µs an epoch), 3.19x the graph rung (1.466 ms), 7.96x the fastest PyTorch of the
//   run (compiled-graph, 3.657 ms). --epoch-split (record field epoch_split): sums 0.78 µs, publish
//   0.30, wait 0.72 (a bare counter barrier: 1.01, grid_barrier__bench-linreg), step 0.45 (warp 0
//   starting late: sums + step is the block's 1.2 µs of arithmetic; ncu at 3034a13, logs/: 7,730
//   instructions a block-epoch, ~1.0 µs of issue, 0.6 of it the fp32 ops). Largest n on chip
//   6,528,390: 0.538 ms; one point more takes the graph path: 2.295 ms. At n = 500 compiled-graph
//   wins (0.32 vs 0.38 ms). H200 (profiles/nvidia-h200/, bench_frameworks.sh at f48aed3, fixed-point
//   exchange): 0.458 ms (__headline), 5.78x the fastest framework (PyTorch compiled-graph, 2.649 ms).

// Notes (tuning, options tried and dropped): report/phase_notes/phase3_fused_streams.md; --help: flags.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <chrono>
#include <thread>
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
#include "pdl.cuh"
#include "persistent.cuh"
#include "record.h"
#include "runner.h"
#include "stats.h"
#include "timing.cuh"
#include "tracer.h"

namespace {

constexpr int kBlock = 256, kWarps = kBlock / 32;
constexpr int kUnroll = 4;  // training: float4s of x and of y per register tile (two tiles in flight)
constexpr const char* kPhase = "phase3_fused_streams";

// ----------------------------------------------------------------------------- device helpers
struct VecSplit {
  size_t head, nvec, tail_start, tail;
};
// [0, len) of arrays that start `lo` floats past a 16-byte-aligned base: scalar head up to the
// first 16-byte boundary, float4 body, scalar tail.
__host__ __device__ inline VecSplit vec_split(size_t lo, size_t len) {
  size_t head = (4 - lo % 4) % 4;
  if (head > len) head = len;
  const size_t nvec = (len - head) / 4;
  const size_t tail_start = head + 4 * nvec;
  return {head, nvec, tail_start, len - tail_start};
}

// Hopper programmatic dependent launch: nb::pdl_wait, nb::pdl_launch_dependents (common/pdl.cuh).
using nb::pdl_launch_dependents;
using nb::pdl_wait;

__device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
// Block sum of K values (result in thread 0). Callers separate two uses by a __syncthreads.
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

// Per-thread sums over [lo, lo+len) of x, y at the parameters (w, b) = params():
//   s[0] += Σ r², s[1] += Σ r·x, s[2] += Σ r with r = w·x + b − y   (K = 3, training)
//   s[0] += Σ r²                                                    (K = 1, evaluation)
// The first tile is loaded before params() is called (it may wait for the previous epoch or
// read what it left): the data never change, only the parameters do.
template <int K, int U, class Params>
__device__ inline void accumulate(const float* __restrict__ x, const float* __restrict__ y, size_t lo, size_t len,
                                  Params params, double (&s)[K]) {
  const VecSplit sp = vec_split(lo, len);
  const size_t tid = blockIdx.x * size_t(blockDim.x) + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
  x += lo;
  y += lo;
  const float4* x4 = reinterpret_cast<const float4*>(x + sp.head);
  const float4* y4 = reinterpret_cast<const float4*>(y + sp.head);
  // Two register tiles of U float4s of x and of y: the loads of tile i+1 are issued
  // before tile i is used, so a thread waits for memory about once, not once per tile.
  float4 xa[U], ya[U], xb[U], yb[U];
  auto load = [&](size_t base, float4 (&xt)[U], float4 (&yt)[U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t j = base + u * stride;
      xt[u] = yt[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (j < sp.nvec) {
        xt[u] = __ldg(x4 + j);
        yt[u] = __ldg(y4 + j);
      }
    }
  };
  size_t v = tid;
  load(v, xa, ya);
  const float2 wb = params();
  const float w = wb.x, b = wb.y;
  auto term = [&](float xi, float yi, float& l, float& gx, float& g) {
    const float r = fmaf(w, xi, b) - yi;
    l = fmaf(r, r, l);
    if (K == 3) {
      gx = fmaf(r, xi, gx);
      g += r;
    }
  };
  auto use = [&](size_t base, const float4 (&xt)[U], const float4 (&yt)[U]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (base + u * stride < sp.nvec) {
        float l = 0.f, gx = 0.f, g = 0.f;  // float over the 4 lanes of one float4 only
        term(xt[u].x, yt[u].x, l, gx, g);
        term(xt[u].y, yt[u].y, l, gx, g);
        term(xt[u].z, yt[u].z, l, gx, g);
        term(xt[u].w, yt[u].w, l, gx, g);
        s[0] += double(l);
        if (K == 3) {
          s[1 % K] += double(gx);
          s[2 % K] += double(g);
        }
      }
    }
  };
  const size_t step = U * stride;
  for (;;) {  // tiles at v (in a), v + step (into b), then swap roles by unrolling twice
    if (v + step < sp.nvec) load(v + step, xb, yb);
    use(v, xa, ya);
    v += step;
    if (v >= sp.nvec) break;
    if (v + step < sp.nvec) load(v + step, xa, ya);
    use(v, xb, yb);
    v += step;
    if (v >= sp.nvec) break;
  }
  auto scalar = [&](size_t i) {
    float l = 0.f, gx = 0.f, g = 0.f;
    term(x[i], y[i], l, gx, g);
    s[0] += double(l);
    if (K == 3) {
      s[1 % K] += double(gx);
      s[2 % K] += double(g);
    }
  };
  if (tid < sp.head) scalar(tid);
  if (tid < sp.tail) scalar(sp.tail_start + tid);
}

// w, b as the previous kernel left them (bypassing L1).
__device__ inline float2 load_params(const float* p) { return make_float2(__ldcg(p), __ldcg(p + 1)); }

// Publishes the block's K sums (thread 0), and returns true in every thread of the block that
// finished last (all other blocks' sums are then visible to it).
//   partials == nullptr: atomicAdd into acc[k] (order of addition varies between runs);
//   else partials[k * nparts + part] = sum (the last block adds them in a fixed order).
template <int K>
__device__ inline bool publish_and_check_last(const double (&v)[K], double* acc, double* partials, int nparts,
                                              int part, unsigned* counter, unsigned expected) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (partials) partials[size_t(k) * nparts + part] = v[k];
      else atomicAdd(&acc[k], v[k]);
    }
    __threadfence();  // our sums are visible device-wide before we count ourselves done
    last = atomicAdd(counter, 1u) == expected - 1;
  }
  __syncthreads();
  if (last) __threadfence();  // and we see everybody's
  return last;
}

// In the last block: the totals into thread 0's tot[] (fixed order for partials), and the
// accumulators reset for the next use.
template <int K>
__device__ inline void gather_totals(double* acc, const double* partials, int nparts, double (&tot)[K]) {
  if (partials) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      tot[k] = 0.0;
      for (int j = threadIdx.x; j < nparts; j += blockDim.x) tot[k] += __ldcg(partials + size_t(k) * nparts + j);
    }
    block_sum(tot);
  } else if (threadIdx.x == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      tot[k] = __ldcg(acc + k);
      acc[k] = 0.0;
    }
  }
}

struct TrainArgs {
  const float* x;
  const float* y;
  size_t nt;
  float* params;      // {w, b}: the live parameters
  float* hist;        // 2 × (epochs + 1): parameters each epoch starts with (for the eval stream)
  double* acc;        // last-block: 3 sums; next-epoch: 3 × 3 (epoch e adds into acc[3·(e%3)])
  double* partials;   // 3 × gridDim.x (--deterministic), else nullptr
  unsigned* counter;  // blocks done in this epoch
  double* loss;       // loss[e]
  double inv_nt, lr;
};

// ---- --update next-epoch (the default): epoch e's kernel first finishes epoch e−1's step.
// Every block reads the sums epoch e−1 left in acc[3·((e−1)%3)] and w_{e−1}, b_{e−1} from the
// history, and computes w_e, b_e itself (the same float64 arithmetic in every block, so the same
// floats); block 0 writes them to the history, loss[e−1], and zeroes the sums epoch e+1 will use
// (acc[3·((e+1)%3)]: its last reader was epoch e−1, finished). Then the block adds its sums of
// epoch e with three double atomics and is done: no counter, no fence, no waiting for the last
// block. `first`: no epoch before this one in the graph (w, b come from the history as they are).
// A one-thread final_update_kernel takes the last epoch's step. pdl_early as below.
__global__ void __launch_bounds__(kBlock, 2) fused_epoch_kernel(TrainArgs a, int e, int first, int pdl_early) {
  if (pdl_early) pdl_launch_dependents();
  double s[3] = {0.0, 0.0, 0.0};
  accumulate<3, kUnroll>(a.x, a.y, 0, a.nt, [&] {
    pdl_wait();
    if (first) return load_params(a.hist + 2 * e);
    const double* prev = a.acc + 3 * ((e - 1) % 3);
    const double s1 = __ldcg(prev + 1), s2 = __ldcg(prev + 2);
    const float2 p = load_params(a.hist + 2 * (e - 1));
    const float w = static_cast<float>(p.x - a.lr * (2.0 * s1 * a.inv_nt));
    const float b = static_cast<float>(p.y - a.lr * (2.0 * s2 * a.inv_nt));
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      a.loss[e - 1] = __ldcg(prev) * a.inv_nt;
      a.hist[2 * e] = w;
      a.hist[2 * e + 1] = b;
      double* next = a.acc + 3 * ((e + 1) % 3);
      next[0] = next[1] = next[2] = 0.0;
    }
    return make_float2(w, b);
  }, s);
  block_sum(s);
  if (!pdl_early) pdl_launch_dependents();
  if (threadIdx.x == 0) {
    double* mine = a.acc + 3 * (e % 3);
    for (int k = 0; k < 3; ++k) atomicAdd(&mine[k], s[k]);
  }
}

// The step of the graph's last epoch (next-epoch scheme): loss[E−1], w_E, b_E.
__global__ void final_update_kernel(TrainArgs a, int last) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const double* sums = a.acc + 3 * (last % 3);
  const float w = static_cast<float>(a.hist[2 * last] - a.lr * (2.0 * sums[1] * a.inv_nt));
  const float b = static_cast<float>(a.hist[2 * last + 1] - a.lr * (2.0 * sums[2] * a.inv_nt));
  a.loss[last] = sums[0] * a.inv_nt;
  a.hist[2 * (last + 1)] = a.params[0] = w;
  a.hist[2 * (last + 1) + 1] = a.params[1] = b;
}

// ---- --update last-block (and --deterministic): loss at the start parameters, then w, b ←
// w, b − lr·∇ by the block that finishes last.
// pdl_early: let the next epoch launch at our start (1) or once our block's sums are done (0);
// either way it waits (griddepcontrol.wait) before it reads w, b or touches the counters.
__global__ void __launch_bounds__(kBlock, 2) fused_epoch_lastblock_kernel(TrainArgs a, int e, int pdl_early) {
  if (pdl_early) pdl_launch_dependents();
  double s[3] = {0.0, 0.0, 0.0};
  accumulate<3, kUnroll>(a.x, a.y, 0, a.nt, [&] {
    pdl_wait();
    return load_params(a.params);
  }, s);
  block_sum(s);
  if (!pdl_early) pdl_launch_dependents();
  if (!publish_and_check_last(s, a.acc, a.partials, gridDim.x, blockIdx.x, a.counter, gridDim.x)) return;
  __syncthreads();  // block_sum's shared memory is reused below
  double tot[3];
  gather_totals(a.acc, a.partials, gridDim.x, tot);
  if (threadIdx.x == 0) {
    a.loss[e] = tot[0] * a.inv_nt;
    const double gw = 2.0 * tot[1] * a.inv_nt, gb = 2.0 * tot[2] * a.inv_nt;
    const float w = static_cast<float>(a.params[0] - a.lr * gw), b = static_cast<float>(a.params[1] - a.lr * gb);
    a.params[0] = w;
    a.params[1] = b;
    a.hist[2 * (e + 1)] = w;
    a.hist[2 * (e + 1) + 1] = b;
    *a.counter = 0;
  }
}

// --source host, epoch 0 on one chunk [lo, lo+len) of the train split, on the chunk's stream:
// per-block sums into partials[k * nparts + part0 + blockIdx.x].
__global__ void __launch_bounds__(kBlock) fused_chunk_epoch0_kernel(const float* x, const float* y, size_t lo, size_t len,
                                                       const float* params, double* partials, int nparts, int part0) {
  double s[3] = {0.0, 0.0, 0.0};
  accumulate<3, kUnroll>(x, y, lo, len, [&] { return load_params(params); }, s);
  block_sum(s);
  if (threadIdx.x == 0)
    for (int k = 0; k < 3; ++k) partials[size_t(k) * nparts + part0 + blockIdx.x] = s[k];
}

// --source host: one block adds the chunk partials in a fixed order; with last-block updates it
// also takes step 0, with next-epoch updates it leaves the sums where epoch 1's kernel reads them.
__global__ void chunk_finalize_update_kernel(TrainArgs a, const double* partials, int nparts, int next_epoch) {
  double tot[3];
  gather_totals(nullptr, partials, nparts, tot);
  if (threadIdx.x == 0 && next_epoch) {
    for (int k = 0; k < 3; ++k) a.acc[k] = tot[k];  // acc[3·(0%3)]
  } else if (threadIdx.x == 0) {
    a.loss[0] = tot[0] * a.inv_nt;
    const double gw = 2.0 * tot[1] * a.inv_nt, gb = 2.0 * tot[2] * a.inv_nt;
    const float w = static_cast<float>(a.params[0] - a.lr * gw), b = static_cast<float>(a.params[1] - a.lr * gb);
    a.params[0] = w;
    a.params[1] = b;
    a.hist[2] = w;
    a.hist[3] = b;
  }
}

struct EvalArgs {
  const float* x;     // the whole arrays; the test split is [lo, lo + len)
  const float* y;
  size_t lo, len;
  const float* hist;  // parameters each epoch starts with
  double* acc;        // 1 sum
  double* partials;   // gridDim.x (--deterministic)
  unsigned* counter;
  double* out;        // test loss per evaluation slot
  double inv_len;
};

// Test loss at the parameters epoch e starts with, into out[slot]; runs on the eval stream.
__global__ void __launch_bounds__(kBlock) test_eval_kernel(EvalArgs a, int e, int slot) {
  double s[1] = {0.0};
  accumulate<1, 1>(a.x, a.y, a.lo, a.len, [&] { return load_params(a.hist + 2 * e); }, s);
  block_sum(s);
  if (!publish_and_check_last(s, a.acc, a.partials, gridDim.x, blockIdx.x, a.counter, gridDim.x)) return;
  __syncthreads();
  double tot[1];
  gather_totals(a.acc, a.partials, gridDim.x, tot);
  if (threadIdx.x == 0) {
    a.out[slot] = tot[0] * a.inv_len;
    *a.counter = 0;
  }
}

// Untimed, before every run: w, b ← w0, b0; history[0]; accumulators and counters zeroed.
__global__ void reset_params_kernel(float* params, float* hist, double* acc, unsigned* counters, float w0, float b0) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  params[0] = hist[0] = w0;
  params[1] = hist[1] = b0;
  for (int k = 0; k < 10; ++k) acc[k] = 0.0;  // 3 × 3 train sums + 1 eval sum
  counters[0] = counters[1] = 0;
}

// ----------------------------------------------------------------------------- host side
struct Options {
  int64_t n = 5000000;
  int epochs = 200;
  double lr = 0.01;
  std::string source = "device";
  int streams = 4;
  int64_t chunk = int64_t(1) << 20;
  int eval_every = 10;
  std::string pdl = "off";
  std::string update = "next-epoch";
  int blocks_per_sm = 2;
  bool l2_persist = false;
  std::string path = "auto";
  int persist_blocks = 0;
  bool print_fit = false;
  std::string exchange = "fixed";
  bool epoch_split = false;
  int poll_ns = 0;  // --exchange fixed: 0 and 100 tie, 400 is slower (H100 probe); bench_linreg.sh re-picks it
  nb::CommonOptions common;
};

// RAII handles (common/cuda_handles.h)
using nb::DevBuf;
using nb::Event;
using nb::Graph;
using nb::HostPinned;
using nb::Streams;

// Launch of one epoch, with the PDL and L2 access-policy attributes when asked.
struct EpochLauncher {
  int grid;
  bool next_epoch;  // --update next-epoch (else last-block)
  bool pdl;
  bool pdl_early;
  bool persist;
  cudaAccessPolicyWindow window{};
  void launch(const TrainArgs& a, int e, bool first, cudaStream_t s) const {
    const nb::LaunchOpts opts{pdl, persist ? &window : nullptr};  // (common/pdl.cuh)
    if (next_epoch) nb::launch_kernel(fused_epoch_kernel, grid, kBlock, 0, s, opts, a, e, first ? 1 : 0, pdl_early ? 1 : 0);
    else nb::launch_kernel(fused_epoch_lastblock_kernel, grid, kBlock, 0, s, opts, a, e, pdl_early ? 1 : 0);
  }
};

// Captures epochs [e0, epochs) on `train` plus the test evaluations scheduled in that range on
// `eval` into one graph. An evaluation of epoch e forks from `train` right after the kernel that
// writes hist[e] (next-epoch: epoch e's own kernel; last-block: epoch e−1's), or at the start
// when hist[e] exists before the graph; the eval stream joins back at the end. `first_in_graph`:
// epoch e0 has no predecessor on the device (--source device).
void capture_epochs(Graph& G, const EpochLauncher& L, const TrainArgs& ta, const EvalArgs& ea, int eval_grid,
                    const std::vector<int>& eval_epochs, int e0, int epochs, bool first_in_graph,
                    cudaStream_t train, cudaStream_t eval, cudaEvent_t fork, cudaEvent_t join) {
  auto ready_after = [&](int e) { return L.next_epoch ? (e == 0 ? -1 : e) : e - 1; };  // kernel writing hist[e]
  CUDA_CHECK(cudaStreamBeginCapture(train, cudaStreamCaptureModeThreadLocal));
  bool forked = false;
  size_t next_eval = 0;
  auto evals_ready_by = [&](int k) {  // launch the evaluations whose parameters exist once kernel k ran
    while (next_eval < eval_epochs.size() && ready_after(eval_epochs[next_eval]) <= k) {
      CUDA_CHECK(cudaEventRecord(fork, train));
      CUDA_CHECK(cudaStreamWaitEvent(eval, fork, 0));
      forked = true;
      test_eval_kernel<<<eval_grid, kBlock, 0, eval>>>(ea, eval_epochs[next_eval], static_cast<int>(next_eval));
      CHECK_LAUNCH();
      ++next_eval;
    }
  };
  evals_ready_by(e0 - 1);
  for (int e = e0; e < epochs; ++e) {
    // A long --epochs makes a graph of as many nodes (a million take minutes to capture): SIGINT is
    // honoured here too. The capture is closed (joined or not, its error ignored) before the throw.
    if ((e & 1023) == 0 && nb::interrupted()) {
      if (forked) cudaEventRecord(join, eval), cudaStreamWaitEvent(train, join, 0);
      cudaGraph_t partial{};
      cudaStreamEndCapture(train, &partial);
      if (partial) cudaGraphDestroy(partial);
      cudaGetLastError();
      nb::throw_if_interrupted("graph capture");
    }
    L.launch(ta, e, first_in_graph && e == e0, train);
    evals_ready_by(e);
  }
  if (L.next_epoch) {  // the last epoch's step
    final_update_kernel<<<1, 32, 0, train>>>(ta, epochs - 1);
    CHECK_LAUNCH();
  }
  if (forked) {
    CUDA_CHECK(cudaEventRecord(join, eval));
    CUDA_CHECK(cudaStreamWaitEvent(train, join, 0));
  }
  CUDA_CHECK(cudaStreamEndCapture(train, &G.g));
  nb::throw_if_interrupted("graph capture");
  CUDA_CHECK(cudaGraphInstantiate(&G.exec, G.g, 0));
  CUDA_CHECK(cudaGraphUpload(G.exec, train));  // the first launch need not upload it
}

int grid_for(size_t len, int sm_count, int per_sm) {
  const size_t need = (len / 4 + kBlock - 1) / kBlock;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(need, size_t(sm_count) * per_sm)));
}

int run(int argc, char** argv) {
  Options o;
  nb::Cli cli(kPhase, "Linear regression: one fused kernel per epoch, a CUDA graph, streams for uploads and evaluation.");
  cli.add_int("--n", &o.n, "number of points (train = first 80%-ish slots, see linreg_data.h)", 1, 4000000000LL);
  cli.add_int("--epochs", &o.epochs, "full-batch gradient-descent epochs", 1, 1000000);
  cli.add_double("--lr", &o.lr, "learning rate");
  cli.add_string("--source", &o.source, "where the data set starts: device (generated there) or host (pinned memory, uploaded in the timed region)", {"device", "host"});
  cli.add_int("--streams", &o.streams, "--source host: streams the chunks are uploaded over", 1, 32);
  cli.add_int("--chunk", &o.chunk, "--source host: points per upload chunk", 1, 4000000000LL);
  cli.add_int("--eval-every", &o.eval_every, "test loss on the eval stream every this many epochs (0: only after training)", 0, 1000000);
  cli.add_string("--update", &o.update, "who takes the gradient step: next-epoch (every block of the next epoch's kernel) or last-block (the block that finishes last); --deterministic implies last-block", {"next-epoch", "last-block"});
  cli.add_string("--pdl", &o.pdl, "programmatic dependent launch of the next epoch: off, early (trigger at kernel start) or late (after the block's sums)", {"off", "early", "late"});
  cli.add_int("--blocks-per-sm", &o.blocks_per_sm, "resident blocks of 256 threads per SM for the epoch kernel", 1, 8);
  cli.add_flag("--l2-persist", &o.l2_persist, "mark the data set as persisting in L2 (access policy window)");
  cli.add_string("--path", &o.path, "auto: one persistent kernel for all epochs with the data on chip when it fits, else the per-epoch CUDA graph; persistent or graph force one (persistent refuses data that does not fit, exit 2)", {"auto", "persistent", "graph"});
  cli.add_int("--persist-blocks", &o.persist_blocks, "persistent path: blocks of the cooperative kernel (0: chosen from n and the device)", 0, 100000);
  cli.add_string("--exchange", &o.exchange, "persistent path, how blocks meet each epoch: poll (every block polls the tagged partial sums in L2), grid-sync (cooperative_groups grid.sync, then one read) counter (one atomic arrive per block, one thread spins, then one read) or fixed (every block adds its sums as fixed-point integers into words of the epoch, one warp a block polls those)", {"poll", "grid-sync", "counter", "fixed"});
  cli.add_int("--poll-ns", &o.poll_ns, "persistent path, --exchange poll or fixed: nanoseconds to sleep between polls of partial sums not yet there (0: none)", 0, 100000);
  cli.add_flag("--epoch-split", &o.epoch_split, "persistent path: after the timed runs, one run of the kernel with per-epoch timestamps; prints and records where an epoch's time goes (sums, publish, wait, step)");
  cli.add_flag("--print-fit", &o.print_fit, "print the largest --n whose data fits on chip (persistent path) and exit");
  cli.add_common(&o.common);
  if (!cli.parse(argc, argv)) return 0;
  const nb::CommonOptions& opt = o.common;
  nb::check_output_dir(opt.out);  // a bad --out fails now (exit 6), not after training

  const nb::DeviceInfo dev = nb::require_device();
  nb::Tracer& tracer = nb::Tracer::instance();  // started after the timed runs (see below)
  const size_t N = static_cast<size_t>(o.n), nt = nb::linreg_train_count(N), ntest = N - nt;
  const bool host_src = o.source == "host", det = opt.deterministic;
  const int E = o.epochs;
  const bool pdl = o.pdl != "off" && dev.cc_major >= 9;

  // ---- which path: the persistent kernel when the data fits on chip (computed from the device)
  const p3::Fit fit = p3::query_fit(dev.index, dev.sm_count);
  const size_t fit_n = p3::largest_fit_n(fit, nb::linreg_train_count);
  if (o.print_fit) {
    std::printf("%zu\n", fit_n);
    std::fprintf(stderr, "on chip: %d blocks (%d per SM x %d SMs, at most %d) x (%zu points in registers + %zu B shared "
                 "memory, 16 B per 2 points); %d registers per thread; largest n that fits: %zu\n",
                 fit.grid, fit.blocks_per_sm, dev.sm_count, p3::kMaxGrid, fit.reg_points, fit.smem_optin,
                 fit.regs_per_thread, fit_n);
    return 0;
  }
  int pgrid = o.persist_blocks > 0 ? o.persist_blocks : p3::auto_grid(fit, nt, ntest);
  const char* why_not = fit.why_not;
  const bool fits_chip = p3::fits(fit, nt, ntest, pgrid, &why_not);
  const bool persistent = o.path == "persistent" || (o.path == "auto" && fits_chip);
  if (persistent && !fits_chip)
    throw nb::Error(nb::kExitUsage, std::string("--path persistent: ") + (why_not ? why_not : "does not fit") +
                                        " (n = " + std::to_string(N) + ", " + std::to_string(pgrid) +
                                        " blocks; largest n that fits: " + std::to_string(fit_n) + ")");
  std::string path_note = persistent ? "persistent: one cooperative kernel runs every epoch, the data on chip"
                                     : o.path == "graph" ? "graph: per-epoch kernels in a CUDA graph (--path graph)"
                                                         : std::string("graph: the data does not fit on chip (") +
                                                               (why_not ? why_not : "?") + "; largest n that fits: " +
                                                               std::to_string(fit_n) + ")";
  std::printf("%s: path %s\n", kPhase, path_note.c_str());

  // ---- launch geometry and buffers
  const int per_sm = o.blocks_per_sm;
  const int grid = grid_for(nt, dev.sm_count, per_sm);
  const int eval_grid = ntest ? grid_for(ntest, dev.sm_count, 1) : 1;
  std::vector<int> eval_epochs;
  if (ntest && o.eval_every > 0)
    for (int e = 0; e < E; e += o.eval_every) eval_epochs.push_back(e);
  const size_t chunk = std::min<size_t>(static_cast<size_t>(o.chunk), N);
  const size_t nchunks = (N + chunk - 1) / chunk, train_chunks = (nt + chunk - 1) / chunk;
  const int chunk_grid = grid_for(chunk, dev.sm_count, per_sm);
  const size_t chunk_parts = train_chunks * size_t(chunk_grid);
  if (host_src && chunk_parts > size_t(INT32_MAX) / 4)
    throw nb::Error(nb::kExitUsage, "--chunk: too small for this --n (too many chunks)");

  // x and y in one allocation (one L2 access-policy window covers both); Npad keeps y 16-byte aligned.
  const size_t Npad = (N + 63) / 64 * 64;
  const size_t small = 4096 + sizeof(double) * (3 * size_t(grid) + size_t(eval_grid) + 3 * chunk_parts + 2 * E + 8);
  nb::require_free_memory(std::max(2 * Npad * sizeof(float) + small, nb::linreg_generate_bytes(N) + small),
                          "the data set");
  DevBuf<float> xy(2 * Npad);
  float* d_x = xy.get();
  float* d_y = xy.get() + Npad;
  DevBuf<float> params(2), hist(2 * size_t(E + 1));
  DevBuf<double> acc(10), loss(static_cast<size_t>(E)), test_out(eval_epochs.size() + 1);
  DevBuf<double> partials(3 * size_t(grid)), eval_partials(static_cast<size_t>(eval_grid));
  DevBuf<double> chunk_partials(host_src ? 3 * chunk_parts : 1);
  DevBuf<unsigned> counters(2);
  DevBuf<unsigned long long> slots(persistent ? p3::slot_words(pgrid) : 1);
  const bool fixed_x = persistent && o.exchange == "fixed";
  DevBuf<unsigned long long> fixed(fixed_x ? p3::fixed_words(E) : 1);
  Streams st(std::max(o.streams, 1));
  Streams ev(1);
  cudaStream_t s0 = st.s[0], s_eval = ev.s[0];
  {
    NB_NVTX_RANGE(nb::Cat::Init, "generate data");
    nb::generate_linreg(d_x, d_y, N, opt.seed, s0);
  }

  std::vector<float> hx, hy;
  std::unique_ptr<HostPinned<float>> pin_x, pin_y;
  if (opt.validate) {
    hx.resize(N);
    hy.resize(N);
    CUDA_CHECK(cudaMemcpy(hx.data(), d_x, N * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hy.data(), d_y, N * sizeof(float), cudaMemcpyDeviceToHost));
  }
  if (host_src) {  // the user's data set: pinned host memory
    pin_x = std::make_unique<HostPinned<float>>(N);
    pin_y = std::make_unique<HostPinned<float>>(N);
    CUDA_CHECK(cudaMemcpy(pin_x->get(), d_x, N * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(pin_y->get(), d_y, N * sizeof(float), cudaMemcpyDeviceToHost));
  }

  // ---- optional L2 persistence for the data
  const bool next_epoch = o.update == "next-epoch" && !det;
  EpochLauncher L{grid, next_epoch, pdl, o.pdl == "early", false, {}};
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev.index));
  if (o.l2_persist && prop.persistingL2CacheMaxSize > 0 && prop.accessPolicyMaxWindowSize > 0) {
    // [x, y + nt): both train splits (and x's test split between them; one window per launch)
    const size_t want = (Npad + nt) * sizeof(float);
    const size_t win = std::min<size_t>(want, static_cast<size_t>(prop.accessPolicyMaxWindowSize));
    const size_t carve = std::min<size_t>(win, static_cast<size_t>(prop.persistingL2CacheMaxSize));
    CUDA_CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, carve));
    L.persist = true;
    L.window.base_ptr = xy.get();
    L.window.num_bytes = win;
    L.window.hitRatio = static_cast<float>(std::min(1.0, double(carve) / double(win)));
    L.window.hitProp = cudaAccessPropertyPersisting;
    L.window.missProp = cudaAccessPropertyStreaming;
  }

  TrainArgs ta{d_x, d_y, nt, params.get(), hist.get(), acc.get(), det ? partials.get() : nullptr, counters.get(), loss.get(),
               1.0 / double(nt), o.lr};
  EvalArgs ea{d_x, d_y, nt, ntest, hist.get(), acc.get() + 9, det ? eval_partials.get() : nullptr, counters.get() + 1,
              test_out.get(), ntest ? 1.0 / double(ntest) : 0.0};

  // ---- the graph: epochs [e0, E) and their evaluations
  Event fork, join;
  Graph G;
  const int e0 = host_src ? 1 : 0;
  // (--source host with one epoch and last-block updates leaves nothing for a graph to do)
  const bool has_graph = !persistent && (E > e0 || next_epoch || !eval_epochs.empty());
  if (has_graph) {
    NB_NVTX_RANGE(nb::Cat::Init, "capture graph");
    capture_epochs(G, L, ta, ea, eval_grid, eval_epochs, e0, E, !host_src, s0, s_eval, fork.e, join.e);
  }

  auto reset = [&] {
    NB_NVTX_RANGE(nb::Cat::Init, "reset w,b");
    reset_params_kernel<<<1, 1, 0, s0>>>(params.get(), hist.get(), acc.get(), counters.get(), nb::linreg_init_w(), nb::linreg_init_b());
    CHECK_LAUNCH();
    CUDA_CHECK(cudaMemsetAsync(loss.get(), 0xff, size_t(E) * sizeof(double), s0));  // poison: NaN until written
    CUDA_CHECK(cudaMemsetAsync(test_out.get(), 0xff, (eval_epochs.size() + 1) * sizeof(double), s0));
    if (persistent) {  // tagged words poisoned, the counter word zeroed
      CUDA_CHECK(cudaMemsetAsync(slots.get(), 0xff, (p3::slot_words(pgrid) - 1) * sizeof(unsigned long long), s0));
      CUDA_CHECK(cudaMemsetAsync(slots.get() + p3::slot_words(pgrid) - 1, 0, sizeof(unsigned long long), s0));
    }
    if (fixed_x) CUDA_CHECK(cudaMemsetAsync(fixed.get(), 0, p3::fixed_words(E) * sizeof(unsigned long long), s0));
  };
  // The persistent path: every epoch (or `epochs` of them) in one cooperative launch.
  const size_t psmem = persistent ? p3::smem_bytes(nt, ntest, pgrid) : 0;
  p3::PersistArgs pa{d_x, d_y, nt, ntest, E, o.eval_every, o.lr, 1.0 / double(nt),
                     ntest ? 1.0 / double(ntest) : 0.0, nb::linreg_init_w(), nb::linreg_init_b(), o.exchange == "grid-sync" ? p3::kGridSync : o.exchange == "counter" ? p3::kCounter : o.exchange == "fixed" ? p3::kFixed : p3::kPoll, o.poll_ns, slots.get(), fixed.get(), loss.get(),
                     test_out.get(), params.get(), hist.get()};
  auto launch_persistent = [&](int epochs) {
    p3::PersistArgs a = pa;
    a.epochs = epochs;
    p3::launch_epochs(a, pgrid, s0);
  };

  // --source host: chunk c goes to stream c % K; epoch 0 runs on it right after its copy.
  std::vector<std::unique_ptr<Event>> stream_done;
  for (size_t k = 0; k < st.s.size(); ++k) stream_done.push_back(std::make_unique<Event>());
  Event t_start(true), t_first(true), t_stop(true);
  auto upload = [&](bool with_epoch0) {
    NB_NVTX_RANGE(nb::Cat::H2D, with_epoch0 ? "upload chunks + epoch 0" : "upload chunks (pure)");
    for (size_t k = 1; k < st.s.size(); ++k) CUDA_CHECK(cudaStreamWaitEvent(st.s[k], t_start.e, 0));
    for (size_t c = 0; c < nchunks; ++c) {
      cudaStream_t s = st.s[c % st.s.size()];
      const size_t lo = c * chunk, len = std::min(chunk, N - lo);
      CUDA_CHECK(cudaMemcpyAsync(d_x + lo, pin_x->get() + lo, len * sizeof(float), cudaMemcpyHostToDevice, s));
      CUDA_CHECK(cudaMemcpyAsync(d_y + lo, pin_y->get() + lo, len * sizeof(float), cudaMemcpyHostToDevice, s));
      if (with_epoch0 && lo < nt) {
        fused_chunk_epoch0_kernel<<<chunk_grid, kBlock, 0, s>>>(d_x, d_y, lo, std::min(len, nt - lo), params.get(), chunk_partials.get(),
                                                   static_cast<int>(chunk_parts), static_cast<int>(c) * chunk_grid);
        CHECK_LAUNCH();
      }
    }
    for (size_t k = 1; k < st.s.size(); ++k) {
      CUDA_CHECK(cudaEventRecord(stream_done[k]->e, st.s[k]));
      CUDA_CHECK(cudaStreamWaitEvent(s0, stream_done[k]->e, 0));
    }
  };

  // ---- --source host: the pure upload time first (same chunks and streams, no compute), as
  // its own warm-up + measured runs, so the training runs' trace holds training only.
  std::vector<double> first_ms, upload_ms;
  for (int r = 0; host_src && r < opt.warmup + opt.repeats; ++r) {
    CUDA_CHECK(cudaMemsetAsync(xy.get(), 0xff, 2 * Npad * sizeof(float), s0));
    CUDA_CHECK(cudaEventRecord(t_start.e, s0));
    upload(false);
    CUDA_CHECK(cudaEventRecord(t_stop.e, s0));
    CUDA_CHECK(cudaEventSynchronize(t_stop.e));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t_start.e, t_stop.e));
    if (r >= opt.warmup) upload_ms.push_back(ms);
  }

  // ---- persistent path, --source host: the kernel needs every point before its first epoch's
  // exchange, so it starts once the chunks have landed; "first epoch done" is measured by runs
  // of upload + a one-epoch launch (same chunks and streams).
  for (int r = 0; persistent && host_src && r < opt.warmup + opt.repeats; ++r) {
    CUDA_CHECK(cudaMemsetAsync(xy.get(), 0xff, 2 * Npad * sizeof(float), s0));
    reset();
    CUDA_CHECK(cudaEventRecord(t_start.e, s0));
    upload(false);
    launch_persistent(1);
    CUDA_CHECK(cudaEventRecord(t_stop.e, s0));
    CUDA_CHECK(cudaEventSynchronize(t_stop.e));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t_start.e, t_stop.e));
    if (r >= opt.warmup) first_ms.push_back(ms);
  }

  // ---- one training run from w0, b0: its time (ms) and, for --source host, the first epoch's.
  std::vector<double> launch_ms;  // host time of cudaGraphLaunch (the enqueue of 200 nodes)
  auto one_run = [&](double* first) -> double {
    // poison: the device copy of the data is NaN unless this run uploads it
    if (host_src) CUDA_CHECK(cudaMemsetAsync(xy.get(), 0xff, 2 * Npad * sizeof(float), s0));
    reset();
    CUDA_CHECK(cudaEventRecord(t_start.e, s0));
    if (persistent) {
      NB_NVTX_RANGE(nb::Cat::Forward, "persistent kernel (all epochs)");
      if (host_src) upload(false);
      nb::HostTimer ht;
      launch_persistent(E);
      launch_ms.push_back(ht.elapsed_ms());
    } else if (host_src) {
      upload(true);
      chunk_finalize_update_kernel<<<1, kBlock, 0, s0>>>(ta, chunk_partials.get(), static_cast<int>(chunk_parts),
                                                         next_epoch ? 1 : 0);
      CHECK_LAUNCH();
      CUDA_CHECK(cudaEventRecord(t_first.e, s0));
    }
    if (!persistent) {
      NB_NVTX_RANGE(nb::Cat::Forward, "fused epochs (graph launch)");
      nb::HostTimer ht;
      if (has_graph) CUDA_CHECK(cudaGraphLaunch(G.exec, s0));
      launch_ms.push_back(ht.elapsed_ms());
    }
    CUDA_CHECK(cudaEventRecord(t_stop.e, s0));
    {
      // Polled, not cudaEventSynchronize: a SIGINT during a long graph (--epochs 100000 queues
      // seconds of work) stops the program within ~0.1 ms, abandoning the queued epochs. The
      // timing comes from the events, so the polling does not enter it.
      NB_NVTX_RANGE(nb::Cat::Sync, "wait for training");
      for (;;) {
        const cudaError_t q = cudaEventQuery(t_stop.e);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) CUDA_CHECK(q);
        nb::throw_if_interrupted("training (the queued epochs are abandoned)");
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    float ms = 0, fms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t_start.e, t_stop.e));
    if (host_src && !persistent) CUDA_CHECK(cudaEventElapsedTime(&fms, t_start.e, t_first.e));
    *first = fms;
    nb::throw_if_interrupted("training");
    return ms;
  };

  // ---- warm-up, the timed runs without our CUPTI tracer (it adds ~1.5 us to every launch, ~15% of
  // an epoch of the graph path: 2.98 -> 3.32 ms at 5M), then as many runs again with it on. Only the
  // timed runs keep their first-epoch time and their host launch time.
  const nb::TimedRuns runs = nb::timed_then_traced({opt.warmup, opt.repeats, opt.repeats, !opt.no_cupti},
                                                   [&](nb::RunKind kind) {
                                                     double f = 0;
                                                     const size_t nl = launch_ms.size();
                                                     const double ms = one_run(&f);
                                                     if (kind != nb::RunKind::Timed) launch_ms.resize(nl);
                                                     else if (host_src && !persistent) first_ms.push_back(f);
                                                     return ms;
                                                   });
  const std::vector<double>& samples = runs.samples;
  const nb::Stats launch_st = nb::summarize(launch_ms);
  // Summaries of exactly the traced runs (not of the final evaluation or --measure-peaks' benchmarks).
  const nlohmann::json traced = nb::linreg_trace_summary(
      opt.trace, runs.trace_runs,
      "kernels/memcpy/ranges: from trace_runs extra untimed runs after the timed ones, with our CUPTI tracer on "
      "(the timed runs ran without it)");
  tracer.stop();
  // ---- --epoch-split: one more run, of the stamping kernel, after the timed and traced ones
  nlohmann::json split_json;
  if (o.epoch_split && persistent && E >= 4) {
    DevBuf<unsigned long long> stamps(size_t(E) * size_t(pgrid) * p3::kSplitWords);
    reset();
    p3::PersistArgs a = pa;
    a.split = stamps.get();
    CUDA_CHECK(cudaEventRecord(t_start.e, s0));
    p3::launch_epochs(a, pgrid, s0);
    CUDA_CHECK(cudaEventRecord(t_stop.e, s0));
    CUDA_CHECK(cudaEventSynchronize(t_stop.e));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t_start.e, t_stop.e));
    std::vector<unsigned long long> hs(size_t(E) * size_t(pgrid) * p3::kSplitWords);
    CUDA_CHECK(cudaMemcpy(hs.data(), stamps.get(), hs.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    const p3::SplitSummary q = p3::split_summary(hs, E, pgrid);
    std::printf("epoch split (stamped run: %.1f us an epoch; medians over %d blocks x %d epochs, %.2f GHz): sums %.2f us "
                "(slowest block %.2f), publish %.2f, wait %.2f, step %.2f; words out over %.2f us, all seen %.2f us "
                "after the last\n",
                1e3 * ms / E, pgrid, q.epochs_used, q.clock_ghz, q.sums_us, q.slowest_sums_us, q.publish_us, q.wait_us,
                q.step_us, q.publish_skew_us, q.seen_after_last_us);
    split_json = {{"stamped_epoch_us", 1e3 * ms / E}, {"blocks", pgrid}, {"epochs_used", q.epochs_used},
                  {"clock_ghz", q.clock_ghz}, {"sums_us", q.sums_us}, {"slowest_block_sums_us", q.slowest_sums_us},
                  {"publish_us", q.publish_us}, {"wait_us", q.wait_us}, {"step_us", q.step_us},
                  {"publish_skew_us", q.publish_skew_us}, {"seen_after_last_publish_us", q.seen_after_last_us},
                  {"method", "one extra run of the kernel with thread 0 of every block stamping clock64 and globaltimer "
                             "at each phase of every epoch; medians over blocks and epochs 1..E-2 (see "
                             "p3::split_summary); durations from clock64, skew and seen-after-last from globaltimer "
                             "(0.256 us steps on an H100)"}};
  }

  // ---- results: the loss curve in one copy; the final test loss (untimed, eval stream)
  nb::LinregOutcome out;
  {
    NB_NVTX_RANGE(nb::Cat::Sync, "read loss curve");
    out.loss.resize(static_cast<size_t>(E));
    CUDA_CHECK(cudaMemcpy(out.loss.data(), loss.get(), size_t(E) * sizeof(double), cudaMemcpyDeviceToHost));
    float hp[2];
    CUDA_CHECK(cudaMemcpy(hp, params.get(), sizeof hp, cudaMemcpyDeviceToHost));
    out.w = hp[0];
    out.b = hp[1];
  }
  std::vector<double> test_curve(eval_epochs.size() + 1, NAN);
  if (ntest) {
    NB_NVTX_RANGE(nb::Cat::Eval, "final test loss");
    CUDA_CHECK(cudaDeviceSynchronize());
    test_eval_kernel<<<eval_grid, kBlock, 0, s_eval>>>(ea, E, static_cast<int>(eval_epochs.size()));
    CHECK_LAUNCH();
    CUDA_CHECK(cudaStreamSynchronize(s_eval));
    CUDA_CHECK(cudaMemcpy(test_curve.data(), test_out.get(), test_curve.size() * sizeof(double), cudaMemcpyDeviceToHost));
    out.test_loss = test_curve.back();
  }
  if (L.persist) CUDA_CHECK(cudaCtxResetPersistingL2Cache());
  const nb::Stats stt = nb::summarize(samples);

  // ---- the record
  // impl "cuda" is the default (auto) path whichever path it took; "cuda-graph" an explicit --path graph
  nlohmann::json rec = nb::new_record(kPhase, "linreg", o.path == "graph" ? "cuda-graph" : "cuda", cli);
  rec["device"] = nb::to_json(dev);
  const std::string evals = o.eval_every > 0 ? "test-loss evaluations every " + std::to_string(o.eval_every) +
                                                   " epochs on a second stream (concurrent)"
                                             : "no evaluations";
  rec["timing"] = nb::timing_json(
      "cuda-events",
      persistent ? (host_src ? "upload of the data set from pinned host memory (chunked over " + std::to_string(o.streams) +
                                   " streams) + one cooperative kernel running all " + std::to_string(E) + " epochs (" +
                                   evals + " inside it)"
                             : "one cooperative kernel running all " + std::to_string(E) +
                                   " epochs with the data on chip (" + evals + " inside it); data resident on the device")
      : host_src ? "upload of the data set from pinned host memory (chunked over " + std::to_string(o.streams) +
                     " streams, epoch 0 computed per chunk) + the remaining epochs as one CUDA graph (" + evals + ")"
               : std::to_string(E) + " epochs as one CUDA graph of fused epoch kernels (" + evals +
                     "); data resident on the device",
      "data generation, parameter reset, graph capture, final test evaluation, validation", opt.warmup, stt);
  rec["timing"]["per_epoch_ms_median"] = stt.median / E;
  rec["timing"]["source"] = o.source;
  rec["timing"]["traced"] = false;
  rec["timing"]["graph_launch_host_ms"] = nb::to_json(launch_st);
  if (persistent) rec["timing"]["first_epoch_note"] = "first_epoch_ms: runs of upload + a one-epoch launch of the persistent kernel";
  if (host_src) {
    const nb::Stats up = nb::summarize(upload_ms), fe = nb::summarize(first_ms);
    rec["timing"]["upload_ms"] = nb::to_json(up);
    rec["timing"]["first_epoch_ms"] = nb::to_json(fe);
    rec["timing"]["first_epoch_over_upload"] = nb::finite_or_null(fe.median / up.median);
    rec["timing"]["upload_gbps"] = nb::finite_or_null(2.0 * N * sizeof(float) / (up.median * 1e6));
  }
  nb::linreg_fill_results(rec, out);
  if (!eval_epochs.empty()) {
    std::vector<double> vals(test_curve.begin(), test_curve.end() - 1);
    rec["loss"]["test_eval"] = {{"every", o.eval_every}, {"epochs", eval_epochs}, {"values", nb::finite_array(vals)}};
  }
  rec["data"] = {{"n", N}, {"train", nt}, {"test", ntest}, {"seed", opt.seed}};
  if (!split_json.is_null()) rec["epoch_split"] = split_json;
  rec["launch"] = {{"path", persistent ? "persistent" : "graph"},
                   {"path_note", path_note},
                   {"on_chip",
                    {{"fits", fits_chip},
                     {"largest_n_that_fits", fit_n},
                     {"grid", pgrid},
                     {"max_grid", fit.grid},
                     {"threads", p3::kThreads},
                     {"register_points_per_thread", p3::kRegPts},
                     {"registers_per_thread", fit.regs_per_thread},
                     {"smem_optin_bytes", fit.smem_optin},
                     {"smem_bytes", psmem},
                     {"exchange", o.exchange},
                     {"poll_ns", o.poll_ns},
                     {"derivation", "blocks = co-resident blocks (occupancy at the opt-in shared memory) x SMs; a block "
                                    "holds threads x register_points_per_thread train points in registers and the rest "
                                    "(train + test) in shared memory, 16 B per 2 points"}}},
                   {"block", kBlock},
                   {"grid", grid},
                   {"eval_grid", eval_grid},
                   {"pdl", pdl ? o.pdl : std::string("off")},
                   {"blocks_per_sm", per_sm},
                   {"l2_persist", L.persist},
                   {"l2_persist_window_bytes", L.persist ? L.window.num_bytes : 0},
                   {"l2_persist_hit_ratio", L.persist ? L.window.hitRatio : 0.0f},
                   {"persisting_l2_max_bytes", prop.persistingL2CacheMaxSize},
                   {"update", next_epoch ? "next-epoch" : "last-block"},
                   {"graph_kernel_nodes", persistent ? 0 : E - e0 + static_cast<int>(eval_epochs.size()) + (next_epoch ? 1 : 0)}};
  if (host_src) rec["launch"]["chunks"] = {{"points", chunk}, {"count", nchunks}, {"streams", o.streams}, {"grid", chunk_grid}};
  rec["accumulation"] = persistent ? "float per thread (registers + shared memory), fp32 warp trees, float64 block sums; "
                                     "every block adds the blocks' tagged float64 words in block order (fixed: bit-identical "
                                     "runs, --deterministic costs nothing)"
                      : det ? "float within a float4, double per thread, block tree; block partials added by the last "
                              "block in a fixed order"
                            : "float within a float4, double per thread, block tree; three double atomicAdds per "
                              "block, the last block reads them";

  // Efficiency: the bytes an epoch must read (x and y of the train split, plus the test split
  // every eval_every epochs, amortized) over the measured time per epoch.
  nb::linreg_merge_trace(rec, traced);
  nb::Peaks peaks;
  if (opt.measure_peaks) {
    peaks = nb::measure_peaks();
    rec["peaks"] = nb::to_json(peaks);
  }
  const double train_bytes = 8.0 * double(nt);
  const double eval_bytes = 8.0 * double(ntest) * double(eval_epochs.size()) / E;
  const double epoch_s = stt.median / E * 1e-3;
  nlohmann::json eff = {{"bytes", train_bytes + eval_bytes},
                        {"bytes_train", train_bytes},
                        {"bytes_eval_amortized", eval_bytes},
                        {"flops", 8.0 * double(nt)},
                        {"epoch_ms", stt.median / E},
                        {"gbps", nb::finite_or_null((train_bytes + eval_bytes) / epoch_s * 1e-9)},
                        {"gbps_train_only", nb::finite_or_null(train_bytes / epoch_s * 1e-9)},
                        {"tflops", nb::finite_or_null(8.0 * double(nt) / epoch_s * 1e-12)}};
  if (peaks.copy_gbps > 0)
    eff["pct_copy_peak"] = nb::finite_or_null(100.0 * (train_bytes + eval_bytes) / epoch_s * 1e-9 / peaks.copy_gbps);
  eff["note"] = host_src ? "time per epoch includes the upload (source host)"
               : persistent ? "time per epoch = kernel time / epochs; the data is read from HBM once, then from registers "
                              "and shared memory (gbps: the bytes an epoch uses, not bytes moved from memory)"
                         : "time per epoch = graph time / epochs (launch gaps and evaluations included); "
                           "copy peak counts bytes read + written";
  rec["efficiency"] = {{"fused_epoch_kernel", eff}};

  std::printf("%s: n=%zu epochs=%d source=%s w=%.7f b=%.7f train_loss=%.7f test_loss=%.7f time median %.3f ms "
              "(%.2f us/epoch, %d runs, path %s)%s%s\n",
              kPhase, N, E, o.source.c_str(), out.w, out.b, out.loss.back(), out.test_loss, stt.median,
              1e3 * stt.median / E, stt.count, persistent ? "persistent" : "graph", det ? " [deterministic]" : "", pdl ? (o.pdl == "early" ? " [pdl early]" : " [pdl late]") : "");
  if (host_src)
    std::printf("  upload only %.3f ms, first epoch done at %.3f ms (%.3f x upload), %d streams, %zu chunks\n",
                rec["timing"]["upload_ms"]["median"].get<double>(), rec["timing"]["first_epoch_ms"]["median"].get<double>(),
                rec["timing"]["first_epoch_over_upload"].is_null() ? NAN : rec["timing"]["first_epoch_over_upload"].get<double>(),
                o.streams, nchunks);
  if (peaks.copy_gbps > 0)
    std::printf("  %.0f GB/s per epoch = %.1f%% of the measured copy bandwidth (%.0f GB/s)\n",
                (train_bytes + eval_bytes) / epoch_s * 1e-9,
                100.0 * (train_bytes + eval_bytes) / epoch_s * 1e-9 / peaks.copy_gbps, peaks.copy_gbps);

  return nb::linreg_finish(rec, hx, hy, o.lr, E, out, opt, dev.slug, kPhase);
}

}  // namespace

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, run); }
