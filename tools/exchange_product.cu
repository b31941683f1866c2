// tools/exchange_product.cu — one product phase of W2's grid step (rung 5g) alone: after a grid barrier,
// every block reads the whole exchanged activation H [32][K] (fp16, written by the other blocks just
// before, so it sits in L2) and multiplies it by its own 16 weight rows [16][K] in shared memory on
// mma.sync, sums the warps' partials and publishes its 16 columns of the next H; then the next barrier.
// How long does that take against the bare barrier, and which way of reading H brings it nearer the
// bytes' time?
//
// G blocks of 256 threads (5g's chain team: 8 warps), one an SM, K = 16 G (every block owns 16 units
// of a K-wide square layer, 5g's split at h = K): G = 16 / 32 / 64 / 128 for K = 256 / 512 / 1,024 /
// 2,048 (W2 at h = 256 ... 2,048). Each round runs one of (staging x fragments):
//   none          no product: the block publishes its columns and meets the others (the floor a round
//                 of any strategy pays; every other line subtracts it)
//   direct, 8 B   the grid kernel's first way (rows_product8 here): the 8 warps split K, each lane loads
//                 its fragments of H from L2 (ld.global.cg, 8 bytes a fragment) straight into the MMAs'
//   direct, 16 B  the same with 16-byte loads: a lane's 8 consecutive values of k feed two k-steps, half
//                 the load instructions, twice the bytes a load in flight (gr::rows_product: the grid
//                 kernel's way since this tool measured it)
//   cp.async, 8 B / 16 B   H copied into shared memory first (every thread, 16-byte cp.async.cg, one
//                 wait), then the fragments from shared memory
//   bulk, 8 B / 16 B       H copied by one thread as 32 bulk asynchronous copies (cp.async.bulk, one a
//                 row, completing on an mbarrier; Hopper and later): no load instruction for H at all
//   ..., W from L2         the block's weight rows read from L2 instead of shared memory (5g's case
//                 where its fp16 rows do not fit beside the rest, and the price of giving their shared
//                 memory to a staged H): direct 8 B / 16 B, cp.async 16 B, bulk 16 B
//   dsmem         at K = 256 only (16 blocks): the same rounds in one thread-block cluster, as rung 5d
//                 exchanges: every block holds the whole H, pushes its new columns into every block's
//                 shared memory and meets the others at a cluster barrier; a bare round, 8 B and 16 B
//   ..., busy team         a second team of 8 warps in each block runs 5g's update team's work the whole
//                 time (its wgrad of the block's rows from L2, an SGD epilogue on masters in global
//                 memory): the SM shared as in 5g, where that team is busy nearly all of a step; a bare
//                 round, direct 8 B and 16 B, bulk 16 B
// The values are small integers (H in {-1, 0, 1, 2}, W in {-1, 0, 1}), so every sum is exact in fp32
// and every strategy must give the same bits; a round's published value is (sum mod 4) - 1. After a
// launch of 3 rounds each strategy's H is compared with the host's (an exchange read stale, a proxy
// fence missing or a fragment misplaced fails it; the timed launches' values are not checked).
// One block an SM: each asks for more than half an SM's shared memory.
// Each strategy is timed with 0 and with --iters rounds in one cooperative launch (CUDA events,
// --warmup, median of --repeats); per round = (median(iters) - median(0)) / iters.
// What it leaves out of 5g's phase (but in the busy-team rows, the update team's warps sharing the SM):
// the second (unit-major) copy of the output, the bias and ReLU.
// PREDICTION, before measuring (H200): a bare barrier ~1.0 us (grid_barrier__bench-linreg.json); H is
// 64 KB at K = 1,024, ~0.5 us at one SM's share of L2 (~64 B a cycle), so a round of the best strategy
// ~2 us at K = 1,024. 5g's own phase (direct, 8 B) about 3 us there (its --breakdown: three forward
// products 10.9 us, two backward-data products 11.8 us a step, each with its barrier's wait beside it).
//
// MEASURED (NVIDIA H100, dbe261b, profiles/nvidia-h100-80gb-hbm3/exchange_product__default.json): at K = 1,024 a bare
// round 2.00 us, 8-byte fragments 4.36 (the product 2.35), 16-byte 3.73 (1.72), cp.async staging 5.16, bulk
// copies 5.13: staging adds a round trip; the weights from L2 +0.1 us; a busy team +0.5 (bare) and +0.7
// (product); at K = 256 a 16-block cluster's DSMEM round 6.69 against L2's 1.88 (logs/exchange_product_dbe261b/).
//
//   build/tools/exchange_product [--iters 2000] [--repeats 11] [--warmup 2] [--out DIR] [--tag default]
// writes profiles/<device-slug>/exchange_product__<tag>.json (phase "exchange_product"); exit 1 when a
// strategy's result differs from the host's, 3 without a GPU that runs cooperative launches.
#include <cooperative_groups.h>
#include <cuda/ptx>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.h"
#include "device_info.h"
#include "errors.h"
#include "record.h"
#include "stats.h"
#include "timing.cuh"
#include "../phase5_batched/5g_grid.cuh"  // gr::rows_product, gr::part_sum, kGrChainWarps, mma_f16

namespace {

using nb::mlp::kGrChainThreads;
using nb::mlp::kGrChainWarps;
using nb::mlp::kGrRows;
constexpr int kThreads = kGrChainThreads;  // 256: 5g's chain team
constexpr int kUnits = 16;                 // a block's units (rows of its weights)
constexpr int kPartials = kGrChainWarps * kUnits * kGrRows;  // floats: a warp's 16 x 32 partial each
enum Staging { kNone = 0, kDirect = 1, kCpAsync = 2, kBulk = 3, kDsmemNone = 4, kDsmem = 5 };
const char* kStagingName[] = {"none", "direct", "cp.async", "bulk", "dsmem, none", "dsmem"};
constexpr int kMaxCluster = 16;  // the largest (non-portable) cluster on Hopper: K = 256 only

// The values: exact small integers, the same on the host.
__host__ __device__ inline int h0_value(int b, int k) { return (b * 5 + k) % 4 - 1; }
__host__ __device__ inline int w_value(int n, int k) { return (n * 7 + k * 3) % 3 - 1; }
__host__ __device__ inline int next_value(int z) { return (z & 3) - 1; }  // z an exact integer sum

__device__ __forceinline__ void chain_bar() { asm volatile("bar.sync 1, %0;\n" ::"r"(kThreads) : "memory"); }

// 8-byte fragments, the grid kernel's reads before it took 16-byte ones (kept here as the comparison):
// out[m][b] (m < 16, b < 32) = sum_k A[m][k] Bm[b][k], each from L2 (kAL2, kBL2) or shared memory; lane
// (g, t) loads k = 4t .. 4t+3 of a 16-value k-step of rows g and g + 8 of A and of batch rows 8j + g of
// Bm (the k-slots permuted alike in both). The 8 warps split the k-steps; partials to scratch[kc][m][32]
// in gr::rows_product's layout. Returns the k-chunks.
template <bool kAL2, bool kBL2>
__device__ __forceinline__ int rows_product8(const __half* A, int lda, const __half* Bm, int ldb, int K, float* scratch) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int ksteps = K / 16;
  const int kcn = max(1, min(kGrChainWarps, ksteps));
  const int per = (ksteps + kcn - 1) / kcn;
  for (int kc = wid; kc < kcn; kc += kGrChainWarps) {
    float acc[4][4] = {};
    const __half* a0 = A + static_cast<size_t>(g) * lda + 4 * t;
    const __half* a1 = a0 + 8 * static_cast<size_t>(lda);
    const __half* b0 = Bm + static_cast<size_t>(g) * ldb + 4 * t;
    const int k1 = min(ksteps, (kc + 1) * per);
#pragma unroll 4
    for (int ks = kc * per; ks < k1; ++ks) {
      const int k = ks * 16;
      const uint2 x = nb::mlp::gr::ld8_at<kAL2>(a0 + k), y = nb::mlp::gr::ld8_at<kAL2>(a1 + k);
      const uint32_t a[4] = {x.x, y.x, x.y, y.y};
      uint2 b[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = nb::mlp::gr::ld8_at<kBL2>(b0 + 8 * j * static_cast<size_t>(ldb) + k);
#pragma unroll
      for (int j = 0; j < 4; ++j) nb::mlp::mma_f16(acc[j], a, b[j].x, b[j].y);
    }
    float* s = scratch + (static_cast<size_t>(kc) * kUnits + g) * kGrRows + 2 * t;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      s[8 * j] = acc[j][0], s[8 * j + 1] = acc[j][1];
      s[8 * kGrRows + 8 * j] = acc[j][2], s[8 * kGrRows + 8 * j + 1] = acc[j][3];
    }
  }
  chain_bar();
  return kcn;
}

// The busy team's buffers: 5g's update team beside the chain, emulated: the unit-major input its weight
// gradients read [K][32] (fp16, every block), fp32 masters and their fp16 copies [blocks][16][K] (global,
// as 5g's at h = 1,024), the learning rate (0: the same traffic, the values unchanged).
struct Team {
  const __half* in = nullptr;
  float* master = nullptr;
  __half* copy = nullptr;
  float lr = 0.f;
};

// kTeam: 8 more warps a block run 5g's update team's work meanwhile (its wgrad of the block's 16 rows,
// an SGD epilogue on masters in global memory, the fp16 copy), over and over until the chain's rounds
// end: the chain then shares its SM as it does in 5g, where that team is busy nearly all of a step.
__device__ __forceinline__ void busy_team(int K, const Team& tm, const __half* dzt, const volatile int* stop) {
  const int lane = threadIdx.x & 31, w = (threadIdx.x - kThreads) >> 5, t2 = 2 * (lane & 3);
  float* M = tm.master + static_cast<size_t>(blockIdx.x) * kUnits * K;
  __half* C = tm.copy + static_cast<size_t>(blockIdx.x) * kUnits * K;
  const float lr = tm.lr;
  const auto epi = [&](int m, int n0, const float (&acc)[4][4]) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int mm = m + 8 * i, nn = n0 + 8 * j + t2;
        if (nn >= K) continue;
        float2 o = __ldcg(reinterpret_cast<const float2*>(M + static_cast<size_t>(mm) * K + nn));
        o.x -= lr * acc[j][2 * i], o.y -= lr * acc[j][2 * i + 1];
        *reinterpret_cast<float2*>(M + static_cast<size_t>(mm) * K + nn) = o;
        *reinterpret_cast<__half2*>(C + static_cast<size_t>(mm) * K + nn) = __floats2half2_rn(o.x, o.y);
      }
  };
  while (!*stop) nb::mlp::gr::wgrad<false>(dzt, tm.in, 0, 1, K / 8, w, kGrChainWarps, epi);
}

// Round i reads buf[i & 1] and writes buf[(i + 1) & 1]: a block can be at most one round ahead of any
// other (each round ends at the grid barrier), so it never writes a buffer another block still reads.
// kWL2: the block's weight rows read from L2 (Wg, [K][K]: 5g's layout where its fp16 rows do not fit
// shared memory) instead of shared memory.
template <int kStaging, int kFragBytes, bool kWL2, bool kTeam>
__global__ void __launch_bounds__(kTeam ? 2 * kThreads : kThreads, 1)
    exchange_kernel(int iters, int K, const __half* Wg, __half* buf0, __half* buf1, unsigned* counter, Team team) {
  extern __shared__ __align__(128) unsigned char sm[];
  const int tid = threadIdx.x, G = gridDim.x, u0 = blockIdx.x * kUnits, ld = K + 8;
  [[maybe_unused]] __shared__ int team_stop;
  [[maybe_unused]] __shared__ __align__(16) __half team_dz[kUnits * nb::mlp::kGrLdT];
  if constexpr (kTeam) {
    if (tid == 0) team_stop = 0;
    for (int e = tid; e < kUnits * nb::mlp::kGrLdT; e += 2 * kThreads) team_dz[e] = __float2half(0.f);
    __syncthreads();
    if (tid >= kThreads) {
      busy_team(K, team, team_dz, &team_stop);
      return;  // (the chain's threads use no barrier the team's take part in)
    }
  }
  const size_t wbytes = kWL2 ? 0 : sizeof(__half) * kUnits * ld;
  __half* W = reinterpret_cast<__half*>(sm);                                              // [16][ld] (not kWL2)
  float* scratch = reinterpret_cast<float*>(sm + wbytes);                                 // [8][16][32]
  [[maybe_unused]] __half* Hs = reinterpret_cast<__half*>(sm + wbytes + sizeof(float) * kPartials);  // [32][ld]
  [[maybe_unused]] __shared__ __align__(8) uint64_t mbar;
  if constexpr (!kWL2)
    for (int e = tid; e < kUnits * K; e += kThreads) W[(e / K) * ld + e % K] = __int2half_rn(w_value(u0 + e / K, e % K));
  const __half* A = kWL2 ? Wg + static_cast<size_t>(u0) * K : W;
  const int lda = kWL2 ? K : ld;
  if constexpr (kStaging == kBulk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (tid == 0) cuda::ptx::mbarrier_init(&mbar, 1);
#endif
  }
  chain_bar();  // (the chain's threads: with a busy team, the block's other half is already at work)
  for (int i = 0; i < iters; ++i) {
    const __half* H = (i & 1) ? buf1 : buf0;
    __half* Hn = (i & 1) ? buf0 : buf1;
    int kcn = 0;
    if constexpr (kStaging == kDirect) {
      kcn = kFragBytes == 8 ? rows_product8<kWL2, true>(A, lda, H, K, K, scratch)
                            : nb::mlp::gr::rows_product<kWL2, true>(A, lda, H, K, 1, K / 16, scratch);
    } else if constexpr (kStaging == kCpAsync || kStaging == kBulk) {
      if constexpr (kStaging == kCpAsync) {
        const int per_row = K / 8;  // 16-byte chunks
        for (int c = tid; c < kGrRows * per_row; c += kThreads) {
          const int b = c / per_row, k = (c - b * per_row) * 8;
          const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(Hs + b * ld + k));
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(H + static_cast<size_t>(b) * K + k) : "memory");
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
        chain_bar();
      } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (tid == 0) {
          // H was written by other blocks' ordinary stores (acquired at the barrier) and Hs last read by
          // ordinary loads: both ordered before the copies, which run in the async proxy.
          cuda::ptx::fence_proxy_async();
          (void)cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared, &mbar,
                                                     static_cast<uint32_t>(sizeof(__half) * kGrRows * K));
          for (int b = 0; b < kGrRows; ++b)
            cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_global, Hs + b * ld, H + static_cast<size_t>(b) * K,
                                     static_cast<uint32_t>(sizeof(__half) * K), &mbar);
        }
        while (!cuda::ptx::mbarrier_try_wait_parity(&mbar, static_cast<uint32_t>(i & 1))) {
        }
#endif
      }
      kcn = kFragBytes == 8 ? rows_product8<kWL2, false>(A, lda, Hs, ld, K, scratch)
                            : nb::mlp::gr::rows_product<kWL2, false>(A, lda, Hs, ld, 1, K / 16, scratch);
    }
    // publish: the block's 16 columns of the next H, batch-major as 5g's exchange
    for (int e = tid; e < kUnits * kGrRows; e += kThreads) {
      const int u = e / kGrRows, b = e - u * kGrRows;
      const float z = kcn > 0 ? nb::mlp::gr::part_sum(scratch, kcn, kUnits, u, b) : 0.f;
      Hn[static_cast<size_t>(b) * K + u0 + u] = __int2half_rn(next_value(__float2int_rn(z)));
    }
    // the grid barrier, as 5g's arrive() and wait()
    chain_bar();
    if (tid == 0) {
      __threadfence();
      atomicAdd(counter, 1u);
      const unsigned target = static_cast<unsigned>(i + 1) * static_cast<unsigned>(G);
      unsigned seen;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
      } while (seen < target);
      __threadfence();
    }
    chain_bar();
  }
  if constexpr (kTeam)
    if (tid == 0) *reinterpret_cast<volatile int*>(&team_stop) = 1;  // the team ends its pass and leaves
}

// The same rounds in one thread-block cluster of G blocks (5d's exchange, at the one shape both can run):
// each block keeps the whole H in its shared memory (two buffers by round parity), pushes its 16 new
// columns into every block's next buffer through DSMEM (4-byte stores, two units each) and meets the
// others at a cluster barrier, which orders the pushes before the next round's reads. kProduct false:
// the bare round. The result: each block's columns of the last H to buf[iters & 1], as the others.
template <bool kProduct, int kFragBytes>
__global__ void __launch_bounds__(kThreads, 1) cluster_kernel(int iters, int K, const __half*, __half* buf0, __half* buf1, unsigned*, Team) {
  extern __shared__ __align__(128) unsigned char sm[];
  cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
  const int tid = threadIdx.x, G = static_cast<int>(cl.num_blocks()), u0 = static_cast<int>(cl.block_rank()) * kUnits, ld = K + 8;
  __half* W = reinterpret_cast<__half*>(sm);                                               // [16][ld]
  float* scratch = reinterpret_cast<float*>(sm + sizeof(__half) * kUnits * ld);            // [8][16][32]
  __half* Hs = reinterpret_cast<__half*>(sm + sizeof(__half) * kUnits * ld + sizeof(float) * kPartials);  // [2][32][ld]
  for (int e = tid; e < kUnits * K; e += kThreads) W[(e / K) * ld + e % K] = __int2half_rn(w_value(u0 + e / K, e % K));
  for (int e = tid; e < kGrRows * K; e += kThreads) Hs[(e / K) * ld + e % K] = buf0[e];
  cl.sync();  // no block pushes into another before it has its first H
  for (int i = 0; i < iters; ++i) {
    const __half* H = Hs + (i & 1) * kGrRows * ld;
    __half* Hn = Hs + ((i + 1) & 1) * kGrRows * ld;
    int kcn = 0;
    if constexpr (kProduct)
      kcn = kFragBytes == 8 ? rows_product8<false, false>(W, ld, H, ld, K, scratch)
                            : nb::mlp::gr::rows_product<false, false>(W, ld, H, ld, 1, K / 16, scratch);
    for (int e = tid; e < kUnits / 2 * kGrRows; e += kThreads) {
      const int u = 2 * (e / kGrRows), b = e % kGrRows;
      const float z0 = kcn > 0 ? nb::mlp::gr::part_sum(scratch, kcn, kUnits, u, b) : 0.f;
      const float z1 = kcn > 0 ? nb::mlp::gr::part_sum(scratch, kcn, kUnits, u + 1, b) : 0.f;
      const __half2 v = __halves2half2(__int2half_rn(next_value(__float2int_rn(z0))), __int2half_rn(next_value(__float2int_rn(z1))));
      __half2* mine = reinterpret_cast<__half2*>(Hn + b * ld + u0 + u);
      for (int q = 0; q < G; ++q) *cl.map_shared_rank(mine, q) = v;
    }
    cl.sync();  // every push has landed and every read of this round's H is done
  }
  const __half* last = Hs + (iters & 1) * kGrRows * ld;
  __half* out = (iters & 1) ? buf1 : buf0;
  for (int e = tid; e < kUnits * kGrRows; e += kThreads) {
    const int u = e / kGrRows, b = e % kGrRows;
    out[static_cast<size_t>(b) * K + u0 + u] = last[b * ld + u0 + u];
  }
}

struct Strategy {
  int staging, frag;
  bool wl2;
  const void* kernel;
  bool team = false;
  bool cluster() const { return staging == kDsmemNone || staging == kDsmem; }
  bool bare() const { return staging == kNone || staging == kDsmemNone; }
  int threads() const { return team ? 2 * kThreads : kThreads; }
  int baseline() const { return cluster() ? 1 : team ? 2 : 0; }  // which bare round it is measured against
};

// The host's rounds: H [32][K] ints after `rounds` rounds from h0 (none: every published sum is 0).
std::vector<int> host_rounds(int K, int rounds, bool none) {
  std::vector<int> h(static_cast<size_t>(kGrRows) * K), n(h.size()), w(static_cast<size_t>(K) * K);
  for (int b = 0; b < kGrRows; ++b)
    for (int k = 0; k < K; ++k) h[static_cast<size_t>(b) * K + k] = h0_value(b, k);
  for (int u = 0; u < K; ++u)
    for (int k = 0; k < K; ++k) w[static_cast<size_t>(u) * K + k] = w_value(u, k);
  for (int r = 0; r < rounds; ++r) {
    for (int b = 0; b < kGrRows; ++b)
      for (int u = 0; u < K; ++u) {
        int z = 0;
        if (!none)
          for (int k = 0; k < K; ++k) z += w[static_cast<size_t>(u) * K + k] * h[static_cast<size_t>(b) * K + k];
        n[static_cast<size_t>(b) * K + u] = next_value(z);
      }
    h.swap(n);
  }
  return h;
}

int run(int argc, char** argv) {
  int iters = 2000;
  nb::Cli cli("exchange_product", "Time one product phase of W2's grid step (5g) against its bare grid barrier, per way of reading the exchanged activation.");
  cli.add_int("--iters", &iters, "rounds per launch", 1, 1000000);
  nb::CommonOptions common;
  common.repeats = 11;
  common.warmup = 2;
  cli.add_common(&common);
  if (!cli.parse(argc, argv)) return nb::kExitOk;
  nb::check_output_dir(common.out);
  const nb::DeviceInfo dev = nb::require_device();
  int coop = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev.index));
  if (!coop) throw nb::Error(nb::kExitNoDevice, "exchange_product: this GPU cannot launch cooperative kernels");
  const bool bulk_ok = dev.cc_major >= 9;
  int smem_per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev.index));

  const Strategy strategies[] = {
      {kNone, 8, false, reinterpret_cast<const void*>(exchange_kernel<kNone, 8, false, false>)},
      {kDirect, 8, false, reinterpret_cast<const void*>(exchange_kernel<kDirect, 8, false, false>)},
      {kDirect, 16, false, reinterpret_cast<const void*>(exchange_kernel<kDirect, 16, false, false>)},
      {kCpAsync, 8, false, reinterpret_cast<const void*>(exchange_kernel<kCpAsync, 8, false, false>)},
      {kCpAsync, 16, false, reinterpret_cast<const void*>(exchange_kernel<kCpAsync, 16, false, false>)},
      {kBulk, 8, false, reinterpret_cast<const void*>(exchange_kernel<kBulk, 8, false, false>)},
      {kBulk, 16, false, reinterpret_cast<const void*>(exchange_kernel<kBulk, 16, false, false>)},
      {kDirect, 8, true, reinterpret_cast<const void*>(exchange_kernel<kDirect, 8, true, false>)},
      {kDirect, 16, true, reinterpret_cast<const void*>(exchange_kernel<kDirect, 16, true, false>)},
      {kCpAsync, 16, true, reinterpret_cast<const void*>(exchange_kernel<kCpAsync, 16, true, false>)},
      {kBulk, 16, true, reinterpret_cast<const void*>(exchange_kernel<kBulk, 16, true, false>)},
      {kNone, 8, false, reinterpret_cast<const void*>(exchange_kernel<kNone, 8, false, true>), true},
      {kDirect, 8, false, reinterpret_cast<const void*>(exchange_kernel<kDirect, 8, false, true>), true},
      {kDirect, 16, false, reinterpret_cast<const void*>(exchange_kernel<kDirect, 16, false, true>), true},
      {kBulk, 16, false, reinterpret_cast<const void*>(exchange_kernel<kBulk, 16, false, true>), true},
      {kDsmemNone, 8, false, reinterpret_cast<const void*>(cluster_kernel<false, 8>)},
      {kDsmem, 8, false, reinterpret_cast<const void*>(cluster_kernel<true, 8>)},
      {kDsmem, 16, false, reinterpret_cast<const void*>(cluster_kernel<true, 16>)},
  };
  constexpr int kCheckRounds = 3;
  constexpr int kMaxK = 2048;
  __half *buf0 = nullptr, *buf1 = nullptr;
  __half* wg = nullptr;
  unsigned* counter = nullptr;
  CUDA_CHECK(cudaMalloc(&wg, sizeof(__half) * kMaxK * kMaxK));
  // the busy team's buffers, zero (its gradients then are 0, its updates rewrite the same values)
  Team team;
  __half* team_in = nullptr;
  float* team_master = nullptr;
  __half* team_copy = nullptr;
  const size_t team_elems = static_cast<size_t>(kMaxK / kUnits) * kUnits * kMaxK;  // [blocks][16][K] at the largest K
  CUDA_CHECK(cudaMalloc(&team_in, sizeof(__half) * kMaxK * kGrRows));
  CUDA_CHECK(cudaMalloc(&team_master, sizeof(float) * team_elems));
  CUDA_CHECK(cudaMalloc(&team_copy, sizeof(__half) * team_elems));
  CUDA_CHECK(cudaMemset(team_in, 0, sizeof(__half) * kMaxK * kGrRows));
  CUDA_CHECK(cudaMemset(team_master, 0, sizeof(float) * team_elems));
  team.in = team_in, team.master = team_master, team.copy = team_copy, team.lr = 0.f;
  CUDA_CHECK(cudaMalloc(&buf0, sizeof(__half) * kGrRows * kMaxK));
  CUDA_CHECK(cudaMalloc(&buf1, sizeof(__half) * kGrRows * kMaxK));
  CUDA_CHECK(cudaMalloc(&counter, sizeof(unsigned)));
  nb::EventTimer tm;
  long long wrong_total = 0;
  nlohmann::json shapes = nlohmann::json::array(), skipped = nlohmann::json::array();
  for (int G : {16, 32, 64, 128}) {
    const int K = 16 * G;
    if (G > dev.sm_count) {
      std::printf("K = %d: needs %d blocks, one an SM; this GPU has %d SMs: skipped\n", K, G, dev.sm_count);
      skipped.push_back({{"K", K}, {"blocks", G}, {"why", "more blocks than SMs"}});
      continue;
    }
    std::vector<__half> wh(static_cast<size_t>(K) * K);  // every block's rows, for the "W from L2" strategies
    for (int n = 0; n < K; ++n)
      for (int k = 0; k < K; ++k) wh[static_cast<size_t>(n) * K + k] = __int2half_rn(w_value(n, k));
    CUDA_CHECK(cudaMemcpy(wg, wh.data(), sizeof(__half) * wh.size(), cudaMemcpyHostToDevice));
    std::vector<__half> h0(static_cast<size_t>(kGrRows) * K);
    for (int b = 0; b < kGrRows; ++b)
      for (int k = 0; k < K; ++k) h0[static_cast<size_t>(b) * K + k] = __int2half_rn(h0_value(b, k));
    const std::vector<int> want = host_rounds(K, kCheckRounds, false), want_none = host_rounds(K, kCheckRounds, true);
    nlohmann::json rows = nlohmann::json::array();
    double bare_us[3] = {0.0, 0.0, 0.0};  // the bare round through L2 and a grid barrier; through DSMEM and a cluster barrier; the first with a busy team
    for (const Strategy& st : strategies) {
      const std::string name = std::string(kStagingName[st.staging]) +
                               (st.bare() ? "" : ", " + std::to_string(st.frag) + " B fragments") + (st.wl2 ? ", W from L2" : "") +
                               (st.team ? ", busy team" : "");
      if ((st.staging == kBulk || st.cluster()) && !bulk_ok) {
        std::printf("K = %4d  %-28s needs compute capability 9.0: skipped\n", K, name.c_str());
        rows.push_back({{"strategy", name}, {"skipped", "needs compute capability 9.0 (cp.async.bulk, clusters of 16)"}});
        continue;
      }
      if (st.cluster() && G > kMaxCluster) continue;  // (a cluster holds at most 16 blocks: K = 256 only)
      // more than half an SM's shared memory: one block an SM, whatever the strategy needs
      const size_t need = (st.wl2 ? 0 : sizeof(__half) * kUnits * (K + 8)) + sizeof(float) * kPartials +
                          (st.staging == kCpAsync || st.staging == kBulk ? sizeof(__half) * kGrRows * (K + 8) : 0) +
                          (st.cluster() ? 2 * sizeof(__half) * kGrRows * (K + 8) : 0);
      const size_t smem = std::max(need, static_cast<size_t>(smem_per_sm / 2 + 1024));
      CUDA_CHECK(cudaFuncSetAttribute(st.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      cudaLaunchConfig_t cfg{};
      cudaLaunchAttribute cluster_dim[1];
      if (st.cluster()) {
        CUDA_CHECK(cudaFuncSetAttribute(st.kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        cluster_dim[0].id = cudaLaunchAttributeClusterDimension;
        cluster_dim[0].val.clusterDim.x = G, cluster_dim[0].val.clusterDim.y = 1, cluster_dim[0].val.clusterDim.z = 1;
        cfg.gridDim = dim3(G), cfg.blockDim = dim3(st.threads()), cfg.dynamicSmemBytes = smem, cfg.attrs = cluster_dim, cfg.numAttrs = 1;
        int clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&clusters, st.kernel, &cfg) != cudaSuccess || clusters < 1) {
          (void)cudaGetLastError();  // (a cluster this GPU cannot run is an answer here, not a failure)
          std::printf("K = %4d  %-28s a cluster of %d blocks cannot run here: skipped\n", K, name.c_str(), G);
          rows.push_back({{"strategy", name}, {"skipped", "a cluster of this many blocks cannot run on this GPU"}});
          continue;
        }
      }
      int per_sm = 0;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, st.kernel, st.threads(), smem));
      if (per_sm != 1) throw nb::Error(nb::kExitNoDevice, "exchange_product: " + std::to_string(per_sm) + " blocks of " + name + " fit an SM, not one");
      int n = 0, k_arg = K;
      void* args[] = {&n, &k_arg, &wg, &buf0, &buf1, &counter, &team};
      auto launch = [&](int rounds) {
        n = rounds;
        CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(unsigned)));
        if (st.cluster()) CUDA_CHECK(cudaLaunchKernelExC(&cfg, st.kernel, args));
        else CUDA_CHECK(cudaLaunchCooperativeKernel(st.kernel, dim3(G), dim3(st.threads()), args, smem, nullptr));
      };
      // the check: kCheckRounds rounds from h0, the result against the host's
      CUDA_CHECK(cudaMemcpy(buf0, h0.data(), sizeof(__half) * h0.size(), cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemset(buf1, 0, sizeof(__half) * h0.size()));
      launch(kCheckRounds);
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<__half> got(h0.size());
      CUDA_CHECK(cudaMemcpy(got.data(), (kCheckRounds & 1) ? buf1 : buf0, sizeof(__half) * got.size(), cudaMemcpyDeviceToHost));
      const std::vector<int>& ref = st.bare() ? want_none : want;
      long long wrong = 0;
      for (size_t e = 0; e < got.size(); ++e) wrong += static_cast<int>(__half2float(got[e])) != ref[e];
      wrong_total += wrong;
      auto one = [&](int rounds) { return nb::time_runs(tm, common.warmup, common.repeats, [&] { launch(rounds); }); };
      const nb::Stats s0 = nb::summarize(one(0)), sN = nb::summarize(one(iters));
      const double us = 1e3 * (sN.median - s0.median) / iters;
      if (st.bare()) bare_us[st.baseline()] = us;
      const double product_us = us - bare_us[st.baseline()];
      std::printf("K = %4d (%3d blocks)  %-34s %.3f us a round%s  (%lld wrong)\n", K, G, name.c_str(), us,
                  st.bare() ? " (publish + barrier)" : (", the product " + std::to_string(product_us) + " us").c_str(), wrong);
      rows.push_back({{"strategy", name},
                      {"staging", kStagingName[st.staging]},
                      {"exchange", st.cluster() ? "DSMEM pushes, a cluster barrier" : "L2, a grid barrier"},
                      {"fragment_bytes", st.bare() ? 0 : st.frag},
                      {"weights", st.wl2 ? "L2" : "shared"},
                      {"busy_team", st.team},
                      {"shared_bytes", smem},
                      {"us_per_round", us},
                      {"product_us", st.bare() ? 0.0 : product_us},
                      {"wrong_values", wrong},
                      {"ms_iters", nb::to_json(sN)},
                      {"ms_zero", nb::to_json(s0)}});
    }
    shapes.push_back({{"K", K},
                      {"blocks", G},
                      {"units_per_block", kUnits},
                      {"h_bytes", sizeof(__half) * kGrRows * K},
                      {"barrier_round_us", bare_us[0]},
                      {"cluster_barrier_round_us", bare_us[1]},
                      {"busy_team_barrier_round_us", bare_us[2]},
                      {"strategies", rows}});
  }
  CUDA_CHECK(cudaFree(wg));
  CUDA_CHECK(cudaFree(team_in));
  CUDA_CHECK(cudaFree(team_master));
  CUDA_CHECK(cudaFree(team_copy));
  CUDA_CHECK(cudaFree(buf0));
  CUDA_CHECK(cudaFree(buf1));
  CUDA_CHECK(cudaFree(counter));
  if (shapes.empty()) throw nb::Error(nb::kExitNoDevice, "exchange_product: no shape fits this GPU (16 SMs or more needed)");

  nlohmann::json rec = nb::new_record("exchange_product", "exchange_product", "cuda", cli);
  rec["device"] = nb::to_json(dev);
  const nb::Stats first = nb::summarize(std::vector<double>{shapes[0]["strategies"][0]["ms_iters"]["median"].get<double>()});
  rec["timing"] = nb::timing_json("cuda-events",
                                  "one launch of --iters rounds (and of 0: subtracted), cooperative or one cluster; total_ms: the first "
                                  "shape's bare rounds (publish + grid barrier), every strategy's per-round time in latency.shapes",
                                  "the launch; nothing else runs in the kernel but, in the busy-team rows, that team's update work",
                                  common.warmup, first);
  rec["timing"]["repeats"] = common.repeats;
  rec["latency"] = {{"iters", iters},
                    {"threads", kThreads},
                    {"busy_team_threads", kThreads},
                    {"shapes", shapes},
                    {"shapes_not_run", skipped},
                    {"note", "a round: the block's product of the exchanged H [32][K] (fp16; from L2, or from its own shared memory "
                             "in the dsmem rows) by its 16 weight rows, its partials summed, its 16 columns of the next H published "
                             "(to L2, or pushed to every block of the cluster), a grid (or cluster) barrier; us_per_round per round, "
                             "product_us = us_per_round - the bare round of the same shape, exchange and team (barrier_round_us, "
                             "cluster_barrier_round_us, busy_team_barrier_round_us)"}};
  const bool ok = wrong_total == 0;
  rec["validation"] = {{"performed", true},
                       {"passed", ok},
                       {"errors", {{"values_unlike_the_host", wrong_total}}},
                       {"tolerances", {{"values_unlike_the_host", 0}}}};
  if (!ok) rec["status"] = "validation_failed";
  const std::string path = nb::write_record(rec, common.out, dev.slug, "exchange_product", common.tag);
  std::printf("checks: %s (%lld values unlike the host's)\nrecord: %s\n", ok ? "PASS" : "FAIL", wrong_total, path.c_str());
  return ok ? nb::kExitOk : nb::kExitValidation;
}

}  // namespace

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, run); }
