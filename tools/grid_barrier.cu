// tools/grid_barrier.cu — the on-chip floor of phase 3's persistent kernel: what do 200 grid-wide
// synchronizations cost with nothing else to do, and how fast can the SMs read an L2-resident
// data set?
//
// One cooperative kernel, one block per SM (phase 3's shape: 512 threads, the grid its
// persistent kernel gets on this device), runs --iters rounds of one of:
//   cg-sync   cooperative_groups::this_grid().sync()
//   counter   one atomicAdd per block (after __threadfence) on a counter that grows by G a round,
//             thread 0 spins on an acquire load, __syncthreads around it
//   exchange  phase 3's tagged exchange (--exchange poll) without the arithmetic: the warps meet at
//             __syncthreads, warps 0-2 each publish one tagged 64-bit word (the double with the
//             round number in its low 12 bits, two slots by parity) and poll every block's word
//             of their value from L2 (lane i: blocks i, i+32, ...), add them in block order and
//             with a butterfly shuffle tree, then a second __syncthreads: exactly the kernel's
//             per-epoch exchange with a block sum of 0 work (phase3_fused_streams/persistent.cuh)
// Each variant is timed with 0 rounds and with --iters rounds (CUDA events, --warmup, median of
// --repeats); per round = (median(iters) - median(0)) / iters, the launch itself excluded.
// The exchange's sums are checked (every block's published value is its index + round; the
// sum must equal the closed form) — a barrier that let a block run ahead would fail it.
//
// And the L2 read bandwidth: a grid-stride kernel reading --l2-mb MB of floats 20 times in one
// launch (the buffer fits in L2; warm-up launches first), median of --repeats, bytes read / time.
//
//   build/tools/grid_barrier [--iters 200] [--repeats 21] [--warmup 3] [--l2-mb 32] [--out DIR] [--tag default]
// writes profiles/<device-slug>/grid_barrier__<tag>.json (phase "grid_barrier").
// Measured (NVIDIA H200, profiles/nvidia-h200/grid_barrier__bench-linreg.json): 132 x 512 threads,
// 200 barriers: counter 0.95 µs, cg grid.sync 0.98 µs, phase 3's exchange 1.92 µs each; L2 read
// 7,214 GB/s (32 MB, 20 passes).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../phase3_fused_streams/persistent.cuh"
#include "check.cuh"
#include "cli.h"
#include "device_info.h"
#include "errors.h"
#include "record.h"
#include "stats.h"
#include "timing.cuh"

namespace {

namespace cg = cooperative_groups;
constexpr int kT = p3::kThreads;

__global__ void __launch_bounds__(kT, 1) cg_sync_kernel(int iters, unsigned* out) {
  cg::grid_group grid = cg::this_grid();
  for (int i = 0; i < iters; ++i) grid.sync();
  if (blockIdx.x == 0 && threadIdx.x == 0) *out = iters;
}

// one atomic arrive per block on a counter that grows by G a round; thread 0 spins (acquire)
__global__ void __launch_bounds__(kT, 1) counter_kernel(int iters, unsigned* counter) {
  for (int e = 0; e < iters; ++e) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(counter, 1u);
      const unsigned want = gridDim.x * unsigned(e + 1);
      unsigned seen;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      } while (int(seen - want) < 0);
    }
    __syncthreads();
  }
}

// per round r, block j publishes double(j + r) for each of 3 values; every block checks the sum
__global__ void __launch_bounds__(kT, 1) exchange_kernel(int iters, unsigned long long* slots, int* bad) {
  __shared__ double tot[3];
  const int G = gridDim.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double check = 0;
  for (int e = 0; e < iters; ++e) {
    __syncthreads();
    if (warp < 3) {
      unsigned long long* slot = slots + (size_t(e & 1) * p3::kValues + warp) * G;
      if (lane == 0) p3::st_relaxed(slot + blockIdx.x, p3::tag_word(double(blockIdx.x + e), e));
      unsigned long long got[p3::kMaxPerLane];
#pragma unroll
      for (int i = 0; i < p3::kMaxPerLane; ++i) got[i] = lane + 32 * i < G ? p3::ld_relaxed(slot + lane + 32 * i) : 0ull;
      for (;;) {
        bool done = true;
#pragma unroll
        for (int i = 0; i < p3::kMaxPerLane; ++i)
          if (lane + 32 * i < G && !p3::tag_ok(got[i], e)) {
            got[i] = p3::ld_relaxed(slot + lane + 32 * i);
            done = false;
          }
        if (__all_sync(0xffffffffu, done)) break;
      }
      double s = 0;
#pragma unroll
      for (int i = 0; i < p3::kMaxPerLane; ++i)
        if (lane + 32 * i < G) s += p3::tag_value(got[i]);
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0) tot[warp] = s;
    }
    __syncthreads();
    check += tot[e % 3];
  }
  // Σ_e Σ_j (j + e) = iters·G(G−1)/2 + G·iters(iters−1)/2 (exact in double at these sizes)
  const double want = double(iters) * G * (G - 1) / 2.0 + double(G) * iters * (iters - 1) / 2.0;
  if (threadIdx.x == 0 && check != want) atomicAdd(bad, 1);
}

__global__ void l2_read_kernel(const float4* p, size_t n4, int passes, float* sink) {
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (size_t k = blockIdx.x * size_t(blockDim.x) + threadIdx.x; k < n4 * size_t(passes); k += size_t(gridDim.x) * blockDim.x) {
    const size_t i = k % n4;
    const float4 v = __ldcg(p + i);
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  const float s = acc.x + acc.y + acc.z + acc.w;
  if (s == 12345.678f) *sink = s;  // never true for the zero-filled buffer; keeps the loads
}

int run(int argc, char** argv) {
  int iters = 200;
  int64_t l2_mb = 32;
  nb::Cli cli("grid_barrier", "Time bare grid barriers (cooperative groups and phase 3's tagged exchange) and the L2 read bandwidth.");
  cli.add_int("--iters", &iters, "grid barriers per launch", 1, 1000000);
  cli.add_int("--l2-mb", &l2_mb, "MB read by the L2 bandwidth kernel (should fit in L2)", 1, 4096);
  nb::CommonOptions common;
  common.repeats = 21;
  common.warmup = 3;
  cli.add_common(&common);
  if (!cli.parse(argc, argv)) return nb::kExitOk;
  nb::check_output_dir(common.out);
  const nb::DeviceInfo dev = nb::require_device();
  const p3::Fit fit = p3::query_fit(dev.index, dev.sm_count);
  if (fit.why_not) throw nb::Error(nb::kExitNoDevice, std::string("grid_barrier: ") + fit.why_not);
  const int G = fit.grid;

  unsigned long long* slots = nullptr;
  int* bad = nullptr;
  unsigned* out = nullptr;
  CUDA_CHECK(cudaMalloc(&slots, 2 * p3::kValues * size_t(G) * sizeof(unsigned long long)));
  CUDA_CHECK(cudaMalloc(&bad, sizeof(int)));
  CUDA_CHECK(cudaMalloc(&out, sizeof(int)));
  CUDA_CHECK(cudaMemset(bad, 0, sizeof(int)));
  nb::EventTimer tm;
  unsigned long long* slots_arg = slots;
  unsigned* out_arg = out;
  int* bad_arg = bad;
  auto launch_cg = [&](int n) {
    void* args[] = {&n, &out_arg};
    CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(cg_sync_kernel), dim3(G), dim3(kT), args, 0, nullptr));
  };
  auto launch_ex = [&](int n) {
    // the slots are poisoned before every launch (also in the 0-round timing, so it cancels)
    CUDA_CHECK(cudaMemsetAsync(slots, 0xff, 2 * p3::kValues * size_t(G) * sizeof(unsigned long long)));
    void* args[] = {&n, &slots_arg, &bad_arg};
    CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(exchange_kernel), dim3(G), dim3(kT), args, 0, nullptr));
  };
  auto launch_ctr = [&](int n) {
    CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(int)));
    void* args[] = {&n, &out_arg};
    CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(counter_kernel), dim3(G), dim3(kT), args, 0, nullptr));
  };
  auto variant = [&](const char* name, auto launch) {
    auto one = [&](int n) { return nb::time_runs(tm, common.warmup, common.repeats, [&] { launch(n); }); };
    const nb::Stats s0 = nb::summarize(one(0)), sN = nb::summarize(one(iters));
    const double us = 1e3 * (sN.median - s0.median) / iters;
    std::printf("%-9s %d blocks x %d threads: %d rounds %.4f ms, 0 rounds %.4f ms -> %.3f us per round\n", name, G, kT,
                iters, sN.median, s0.median, us);
    return nlohmann::json{{"ms_iters", nb::to_json(sN)}, {"ms_zero", nb::to_json(s0)}, {"us_per_barrier", us}};
  };
  nlohmann::json res;
  res["cg_sync"] = variant("cg-sync", launch_cg);
  res["counter"] = variant("counter", launch_ctr);
  CUDA_CHECK(cudaMemset(bad, 0, sizeof(int)));
  res["exchange"] = variant("exchange", launch_ex);  // every launch checks its sums into *bad
  int hbad = -1;
  CUDA_CHECK(cudaMemcpy(&hbad, bad, sizeof(int), cudaMemcpyDeviceToHost));

  // L2 read bandwidth
  // kPasses passes over the buffer in one launch, so that the launch does not dominate
  constexpr int kPasses = 20;
  const size_t bytes = size_t(l2_mb) << 20, n4 = bytes / 16;
  float4* buf = nullptr;
  float* sink = nullptr;
  CUDA_CHECK(cudaMalloc(&buf, bytes));
  CUDA_CHECK(cudaMalloc(&sink, sizeof(float)));
  CUDA_CHECK(cudaMemset(buf, 0, bytes));
  const int l2_grid = dev.sm_count * 4;
  const nb::Stats l2 = nb::summarize(nb::time_runs(tm, common.warmup, common.repeats, [&] {
    l2_read_kernel<<<l2_grid, 512>>>(buf, n4, kPasses, sink);
    CHECK_LAUNCH();
  }));
  const double l2_gbps = double(bytes) * kPasses / (l2.median * 1e-3) / 1e9;
  std::printf("L2 read: %d x %zu MB in %.4f ms (median) -> %.0f GB/s (L2 holds %d MB)\n", kPasses, bytes >> 20, l2.median,
              l2_gbps, dev.l2_bytes >> 20);
  CUDA_CHECK(cudaFree(buf));
  CUDA_CHECK(cudaFree(sink));
  CUDA_CHECK(cudaFree(slots));
  CUDA_CHECK(cudaFree(bad));
  CUDA_CHECK(cudaFree(out));

  const double floor_us = std::fmin(std::fmin(res["cg_sync"]["us_per_barrier"].get<double>(), res["exchange"]["us_per_barrier"].get<double>()),
                                    res["counter"]["us_per_barrier"].get<double>());
  nlohmann::json rec = nb::new_record("grid_barrier", "grid_barrier", "cuda", cli);
  rec["device"] = nb::to_json(dev);
  rec["timing"] = nb::timing_json("cuda-events",
                                  "one cooperative launch of --iters grid barriers (and of 0: subtracted)",
                                  "nothing else runs in the kernel", common.warmup, nb::summarize(std::vector<double>{
                                                                                         res["exchange"]["ms_iters"]["median"].get<double>()}));
  rec["timing"]["repeats"] = common.repeats;
  rec["barrier"] = {{"grid", G},
                    {"threads", kT},
                    {"iters", iters},
                    {"cg_sync", res["cg_sync"]},
                    {"exchange", res["exchange"]},
                    {"counter", res["counter"]},
                    {"floor_us_per_barrier", floor_us},
                    {"floor_note", "the cheaper of the two bare barriers: the least a grid-wide step costs per epoch"}};
  rec["l2_read"] = {{"bytes", bytes}, {"passes", kPasses}, {"ms", nb::to_json(l2)}, {"gbps", l2_gbps}, {"grid", l2_grid}, {"threads", 512},
                    {"l2_bytes", dev.l2_bytes}};
  const bool ok = hbad == 0;
  rec["validation"] = {{"performed", true},
                       {"passed", ok},
                       {"errors", {{"exchange_blocks_with_wrong_sums", hbad}}},
                       {"tolerances", {{"exchange_blocks_with_wrong_sums", 0}}}};
  if (!ok) rec["status"] = "validation_failed";
  const std::string path = nb::write_record(rec, common.out, dev.slug, "grid_barrier", common.tag);
  std::printf("floor: %.3f us per grid barrier; exchange check: %s\nrecord: %s\n", floor_us, ok ? "PASS" : "FAIL",
              path.c_str());
  return ok ? nb::kExitOk : nb::kExitValidation;
}

}  // namespace

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, run); }
