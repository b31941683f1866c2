// tools/cluster_latency.cu — the latencies a W1 step on chip is made of: how long does a cluster
// barrier take, how long does one block take to see a word another block wrote into its shared
// memory (distributed shared memory, DSMEM), and how long through L2 (the flags phase 5's
// persistent kernel exchanges its activations with)?
//
//   cluster-sync  one cluster of C blocks (C = 2, 4, 8, 16 where the GPU allows it) runs --iters
//                 cooperative_groups cluster.sync(); before each, every block writes rank + round
//                 into its own shared memory and after it reads its neighbour's through DSMEM: a
//                 barrier that let a block run ahead would read a stale value (counted, must be 0)
//   dsmem         in a cluster of C blocks, thread 0 of block 0 and of block C-1 ping-pong a counter:
//                 each stores the next value into the other's shared memory (st.release.cluster)
//                 and spins on its own (ld.acquire.cluster); one way = round trip / 2
//   l2            the same ping-pong between two blocks through one global word each
//                 (st.release.gpu / ld.acquire.gpu): what a flag through L2 costs one way; and
//                 with relaxed accesses (l2-relaxed: no fence orders anything else, as phase 5's
//                 tagged words, whose value and tag travel in one 64-bit access)
//   allgather     phase 5's exchange with nothing else to do (rungs 5c and 5e: h1 and h2 travel this
//                 way): a cooperative grid of G blocks of 512 threads (one an SM), each round the
//                 first P blocks publish W tagged 64-bit words each (value and round, relaxed
//                 stores, 5c's xstore) and every block gathers all P x W words with 5c's
//                 gather_rows (8 words a thread in flight, the stale ones reloaded together until
//                 every tag is the round's), checks them and meets at __syncthreads. Two buffers by
//                 round parity, as the kernels have. Shapes: W1's h1 (P = G = 128, W = 32), its h2
//                 (P = 64 of G = 128, W = 32), both with half the words (W = 16: two activations a
//                 word), and one word a block (P = G = 128, W = 1). Also two protocols the kernels
//                 do not use: two tagged words a load, and plain floats with a flag a producer
//                 (allgather_kernel's comment). And the tagged words with the producers 2 us late
//                 (a spin on %globaltimer before they publish), the readers polling meanwhile, as
//                 in the kernels, where readers wait for the slowest producer: round - 2 us.
// Each is timed with 0 and with --iters rounds in one launch (CUDA events, --warmup, median of
// --repeats); per round = (median(iters) - median(0)) / iters, the launch excluded. A ping-pong
// whose partner never answers gives up after 2^26 polls and counts an error (no hang).
// compute-sanitizer: memcheck clean; racecheck reports the ping-pong's flag store and poll as
// hazards (it does not take st.release / ld.acquire at cluster scope as synchronization); the
// cluster-sync kernel, whose reads follow a barrier, is clean.
// Measured (NVIDIA H100, profiles/nvidia-h100-80gb-hbm3/cluster_latency__h100.json, c9e7487):
// cluster.sync() 0.55 µs (2 blocks) to 0.62 µs (16), a DSMEM hop 0.43-0.44 µs, an L2 flag hop 0.57 µs
// (each the round's time / 2: the cluster-sync round also holds one DSMEM read). Since e2f796c (the
// same record; another machine than 410ea0f's, whose run was ~4% faster): a relaxed L2 hop 0.25 us;
// the all-gather 2.39 us a round at W1's h1 shape, 1.93 at h2's, 1.85 / 1.63 with half the words,
// 1.04 for one word a block; with the producers 2 us late, past those 2 us: 2.17, 2.57, 1.73 / 2.29,
// 1.05; two words a load 3.50 / 2.95; floats and a flag a producer 8.1 / 7.1 / 7.6 (the fences).
//
//   build/tools/cluster_latency [--iters 1000] [--threads 256] [--repeats 11] [--warmup 2] [--out DIR] [--tag default]
// writes profiles/<device-slug>/cluster_latency__<tag>.json (phase "cluster_latency").
#include <cooperative_groups.h>
#include <cuda_runtime.h>

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
#include "../phase5_batched/5c_persistent.cuh"

namespace {

namespace cg = cooperative_groups;
constexpr unsigned kMaxPolls = 1u << 26;

__global__ void cluster_sync_kernel(int iters, int* bad) {
  __shared__ int mine;
  cg::cluster_group cl = cg::this_cluster();
  const unsigned rank = cl.block_rank(), C = cl.num_blocks();
  int* next = cl.map_shared_rank(&mine, (rank + 1) % C);
  int wrong = 0;
  for (int i = 0; i < iters; ++i) {
    if (threadIdx.x == 0) mine = int(rank) + i;
    cl.sync();
    if (threadIdx.x == 0 && *next != int((rank + 1) % C) + i) ++wrong;
    cl.sync();  // nobody overwrites `mine` before its reader has read it
  }
  if (wrong) atomicAdd(bad, wrong);
}

__device__ inline void st_release_cluster(unsigned* p, unsigned v) {
  asm volatile("st.release.cluster.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ inline unsigned ld_acquire_cluster(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.cluster.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ inline void st_release_gpu(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ inline unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ inline void st_relaxed_gpu(unsigned* p, unsigned v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ inline unsigned ld_relaxed_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// spins until *p reaches v (acquire load `ld`); false after kMaxPolls polls
template <class Ld>
__device__ inline bool wait_for(const unsigned* p, unsigned v, Ld ld) {
  for (unsigned n = 0; n < kMaxPolls; ++n)
    if (ld(p) >= v) return true;
  return false;
}

// block 0 sends 2i+1 to block C-1, which answers 2i+2 (through each other's shared memory)
__global__ void dsmem_pingpong_kernel(int iters, int* bad) {
  __shared__ unsigned flag;
  cg::cluster_group cl = cg::this_cluster();
  const unsigned rank = cl.block_rank(), last = cl.num_blocks() - 1;
  if (threadIdx.x == 0) flag = 0;
  cl.sync();
  if (threadIdx.x == 0 && (rank == 0 || rank == last)) {
    unsigned* peer = cl.map_shared_rank(&flag, rank == 0 ? last : 0u);
    auto ld = [](const unsigned* p) { return ld_acquire_cluster(p); };
    bool ok = true;
    for (int i = 0; i < iters && ok; ++i) {
      if (rank == 0) {
        st_release_cluster(peer, 2u * i + 1);
        ok = wait_for(&flag, 2u * i + 2, ld);
      } else {
        ok = wait_for(&flag, 2u * i + 1, ld);
        if (ok) st_release_cluster(peer, 2u * i + 2);
      }
    }
    if (!ok) atomicAdd(bad, 1);
  }
  cl.sync();  // no block leaves while another may still write into its shared memory
}

// the same through global memory: flags[0] is block 0's inbox, flags[1] block 1's (zeroed before);
// release/acquire accesses, or relaxed ones (kRelaxed)
template <bool kRelaxed>
__global__ void l2_pingpong_kernel(int iters, unsigned* flags, int* bad) {
  if (threadIdx.x != 0) return;
  const unsigned me = blockIdx.x;
  auto ld = [](const unsigned* p) { return kRelaxed ? ld_relaxed_gpu(p) : ld_acquire_gpu(p); };
  auto st = [](unsigned* p, unsigned v) { kRelaxed ? st_relaxed_gpu(p, v) : st_release_gpu(p, v); };
  bool ok = true;
  for (int i = 0; i < iters && ok; ++i) {
    if (me == 0) {
      st(flags + 1, 2u * i + 1);
      ok = wait_for(flags, 2u * i + 2, ld);
    } else {
      ok = wait_for(flags + 1, 2u * i + 1, ld);
      if (ok) st(flags, 2u * i + 2);
    }
  }
  if (!ok) atomicAdd(bad, 1);
}

// The all-gather: round i publishes value(b, w, i) for round tag i + 1 into buffer i & 1, then
// gathers and checks every word. A block runs at most one round ahead of any other (each round needs
// every producer's words), so a buffer is never overwritten before every block has read it. Three
// protocols (kProto):
//   0 tagged words ([W][P], 5e's layout of h1), 5c's gather_rows: what the kernels do
//   1 tagged words, two a load (ld.relaxed.v2.u64: each 64-bit element is its own access, so a
//     word's value and tag still arrive together): half the load instructions, the same bytes
//   2 plain floats ([P][W]: a producer's words contiguous) and a flag a producer: every lane of the
//     producer's warp stores its word and fences (__threadfence), then after __syncwarp lane 0
//     stores the round into the flag; a consumer warp polls the flags of its producers (lanes), and
//     for each producer it finds ready (ld.acquire) loads its words, one coalesced load: half the
//     bytes and a flag of 4 bytes to poll, for a fence at the producer and one more round trip
__device__ __forceinline__ float allgather_value(int b, int w, int i) { return static_cast<float>(b * 64 + w + (i & 1023) * 8192); }
__device__ __forceinline__ void xload2(const nb::mlp::xword* p, nb::mlp::xword& a, nb::mlp::xword& b) {
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
template <int kProto>
__global__ void __launch_bounds__(nb::mlp::kPersistThreads, 1)
    allgather_kernel(int iters, int P, int W, nb::mlp::xword* buf, float* data, unsigned* flags, int* bad, int late_ns) {
  using nb::mlp::xword;
  extern __shared__ float got[];  // [W][P]
  constexpr int nt = nb::mlp::kPersistThreads;
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
  int wrong = 0;
  for (int i = 0; i < iters; ++i) {
    const uint32_t T = static_cast<uint32_t>(i) + 1u;
    const bool mine = static_cast<int>(blockIdx.x) < P;
    if (late_ns > 0 && mine && tid < W) {  // late producers: the readers poll for late_ns before any word lands
      uint64_t t0, t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
      do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < static_cast<uint64_t>(late_ns));
    }
    if constexpr (kProto < 2) {
      xword* b = buf + static_cast<size_t>(i & 1) * P * W;
      if (mine)
        for (int w = tid; w < W; w += nt) nb::mlp::xstore(b + static_cast<size_t>(w) * P + blockIdx.x, allgather_value(blockIdx.x, w, i), T);
      if constexpr (kProto == 0) {
        nb::mlp::gather_rows(got, P, b, W, P, T);
      } else {  // pairs of words: thread tid takes pairs tid, tid + nt, ... (P W even)
        constexpr int U = 4;
        const int np = P * W / 2;
        for (int q0 = tid; q0 < np; q0 += U * nt) {
          xword w[U][2];
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (q0 + u * nt < np) xload2(b + 2 * (q0 + u * nt), w[u][0], w[u][1]);
            else w[u][0] = w[u][1] = static_cast<xword>(T) << 32;
          for (uint32_t round = 1;; ++round) {
            bool all = true;
#pragma unroll
            for (int u = 0; u < U; ++u) all = all && nb::mlp::xready(w[u][0], T) && nb::mlp::xready(w[u][1], T);
            if (all) break;
            nb::mlp::xbackoff(round);
#pragma unroll
            for (int u = 0; u < U; ++u)
              if (!nb::mlp::xready(w[u][0], T) || !nb::mlp::xready(w[u][1], T)) xload2(b + 2 * (q0 + u * nt), w[u][0], w[u][1]);
          }
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (q0 + u * nt < np) {
              const int e = 2 * (q0 + u * nt);  // words e, e + 1: row e / P, columns e % P and the next
              got[e] = nb::mlp::xfloat(w[u][0]), got[e + 1] = nb::mlp::xfloat(w[u][1]);
            }
        }
      }
    } else {
      float* d = data + static_cast<size_t>(i & 1) * P * W;
      unsigned* f = flags + static_cast<size_t>(i & 1) * P;
      if (mine && wid == 0) {
        if (lane < W) d[static_cast<size_t>(blockIdx.x) * W + lane] = allgather_value(blockIdx.x, lane, i);
        __threadfence();
        __syncwarp();
        if (lane == 0) st_relaxed_gpu(f + blockIdx.x, T);
      }
      // warp wid: producers wid, wid + 16, ...; lane k watches producer wid + 16 k
      const int nw = nt / 32, mine_n = (P - wid + nw - 1) / nw;
      unsigned done = 0u, want = mine_n >= 32 ? ~0u : ((1u << mine_n) - 1u);
      for (uint32_t round = 1; done != want; ++round) {
        nb::mlp::xbackoff(round);
        unsigned v = 0u;
        if (lane < mine_n && !((done >> lane) & 1u)) v = ld_acquire_gpu(f + wid + nw * lane);
        unsigned fresh = __ballot_sync(0xffffffffu, lane < mine_n && !((done >> lane) & 1u) && v >= T);
        done |= fresh;
        while (fresh) {
          const int k = __ffs(fresh) - 1;
          fresh &= fresh - 1u;
          const int pb = wid + nw * k;
          // the acquire above was lane k's: share it with the warp before the others read the data
          __syncwarp();
          if (lane < W) got[lane * P + pb] = __ldcg(d + static_cast<size_t>(pb) * W + lane);
        }
      }
    }
    __syncthreads();
    for (int e = tid; e < W * P; e += nt)
      if (got[e] != allgather_value(e % P, e / P, i)) ++wrong;
    __syncthreads();  // every check reads `got` before the next round's gather writes it
  }
  if (wrong) atomicAdd(bad, wrong);
}

// One cluster of C blocks; false (and nothing launched) where the GPU cannot run such a cluster.
template <class K>
bool cluster_config(K kernel, int C, int threads, cudaLaunchConfig_t& cfg, cudaLaunchAttribute* at) {
  CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = C, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
  cfg = cudaLaunchConfig_t{};
  cfg.gridDim = dim3(C), cfg.blockDim = dim3(threads), cfg.attrs = at, cfg.numAttrs = 1;
  int clusters = 0;
  const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<const void*>(kernel), &cfg);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // (an unsupported cluster size is an answer here, not a failure)
    return false;
  }
  return clusters >= 1;
}

int run(int argc, char** argv) {
  int iters = 1000, threads = 256;
  nb::Cli cli("cluster_latency", "Time a cluster barrier, a DSMEM one-way hop and an L2 flag one-way hop.");
  cli.add_int("--iters", &iters, "rounds per launch", 1, 1000000);
  cli.add_int("--threads", &threads, "threads per block of the cluster-sync kernel", 32, 1024);
  nb::CommonOptions common;
  common.repeats = 11;
  common.warmup = 2;
  cli.add_common(&common);
  if (!cli.parse(argc, argv)) return nb::kExitOk;
  nb::check_output_dir(common.out);
  const nb::DeviceInfo dev = nb::require_device();
  int cluster_ok = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&cluster_ok, cudaDevAttrClusterLaunch, dev.index));
  if (!cluster_ok) throw nb::Error(nb::kExitNoDevice, "cluster_latency: this GPU cannot launch thread-block clusters");

  int* bad = nullptr;
  unsigned* flags = nullptr;
  CUDA_CHECK(cudaMalloc(&bad, sizeof(int)));
  CUDA_CHECK(cudaMalloc(&flags, 2 * sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(bad, 0, sizeof(int)));
  nb::EventTimer tm;
  auto per_round = [&](const char* name, int C, auto launch, double rounds_per_iter) {
    auto one = [&](int n) { return nb::time_runs(tm, common.warmup, common.repeats, [&] { launch(n); }); };
    const nb::Stats s0 = nb::summarize(one(0)), sN = nb::summarize(one(iters));
    const double us = 1e3 * (sN.median - s0.median) / iters / rounds_per_iter;
    std::printf("%-12s C=%2d: %d rounds %.4f ms, 0 rounds %.4f ms -> %.3f us\n", name, C, iters, sN.median, s0.median, us);
    return nlohmann::json{{"blocks", C}, {"ms_iters", nb::to_json(sN)}, {"ms_zero", nb::to_json(s0)}, {"us", us}};
  };
  nlohmann::json sync = nlohmann::json::array(), dsm = nlohmann::json::array(), skipped = nlohmann::json::array();
  for (int C : {2, 4, 8, 16}) {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at[1];
    if (!cluster_config(cluster_sync_kernel, C, threads, cfg, at)) {
      std::printf("cluster-sync C=%2d: this GPU cannot run such a cluster; skipped\n", C);
      skipped.push_back(C);
      continue;
    }
    // two cluster.sync() a round: the per-barrier time is half of it
    sync.push_back(per_round("cluster-sync", C, [&](int n) { CUDA_CHECK(cudaLaunchKernelEx(&cfg, cluster_sync_kernel, n, bad)); }, 2.0));
    cudaLaunchConfig_t cfg2;
    cudaLaunchAttribute at2[1];
    if (!cluster_config(dsmem_pingpong_kernel, C, 32, cfg2, at2)) continue;
    // a round is two one-way hops
    dsm.push_back(per_round("dsmem", C, [&](int n) { CUDA_CHECK(cudaLaunchKernelEx(&cfg2, dsmem_pingpong_kernel, n, bad)); }, 2.0));
  }
  const nlohmann::json l2 = per_round("l2", 2, [&](int n) {
    CUDA_CHECK(cudaMemsetAsync(flags, 0, 2 * sizeof(unsigned)));
    l2_pingpong_kernel<false><<<2, 32>>>(n, flags, bad);
    CHECK_LAUNCH();
  }, 2.0);
  const nlohmann::json l2r = per_round("l2-relaxed", 2, [&](int n) {
    CUDA_CHECK(cudaMemsetAsync(flags, 0, 2 * sizeof(unsigned)));
    l2_pingpong_kernel<true><<<2, 32>>>(n, flags, bad);
    CHECK_LAUNCH();
  }, 2.0);
  // the all-gathers: one cooperative block an SM (at most G = 128 of them), 512 threads
  nlohmann::json ag = nlohmann::json::array();
  {
    constexpr int nt = nb::mlp::kPersistThreads;
    const struct { int P, W, proto, late_ns; } shapes[] = {
        {128, 32, 0, 0}, {64, 32, 0, 0}, {128, 1, 0, 0}, {128, 16, 0, 0}, {64, 16, 0, 0}, {128, 32, 1, 0}, {64, 32, 1, 0},
        {128, 32, 2, 0}, {64, 32, 2, 0}, {128, 1, 2, 0}, {128, 32, 0, 2000}, {128, 16, 0, 2000}, {64, 32, 0, 2000},
        {64, 16, 0, 2000}, {128, 1, 0, 2000}};
    const void* kernels[] = {reinterpret_cast<const void*>(allgather_kernel<0>), reinterpret_cast<const void*>(allgather_kernel<1>),
                             reinterpret_cast<const void*>(allgather_kernel<2>)};
    const char* protos[] = {"tagged words (gather_rows)", "tagged words, two a load", "floats and a flag a producer"};
    nb::mlp::xword* buf = nullptr;
    float* data = nullptr;
    unsigned* fl = nullptr;
    CUDA_CHECK(cudaMalloc(&buf, 2 * sizeof(nb::mlp::xword) * 128 * 32));
    CUDA_CHECK(cudaMalloc(&data, 2 * sizeof(float) * 128 * 32));
    CUDA_CHECK(cudaMalloc(&fl, 2 * sizeof(unsigned) * 128));
    for (const auto& sh : shapes) {
      const int G = std::min(128, dev.sm_count), P = std::min(sh.P, G), W = sh.W;
      const size_t smem = sizeof(float) * P * W;
      int per_sm = 0;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernels[sh.proto], nt, smem));
      if (per_sm < 1) throw nb::Error(nb::kExitNoDevice, "cluster_latency: the all-gather kernel cannot run a block an SM");
      int n = 0;
      int late = sh.late_ns;
      void* args[] = {&n, const_cast<int*>(&P), const_cast<int*>(&W), &buf, &data, &fl, &bad, &late};
      const nlohmann::json r = per_round("allgather", G, [&](int rounds) {
        n = rounds;
        CUDA_CHECK(cudaMemsetAsync(buf, 0, 2 * sizeof(nb::mlp::xword) * P * W));  // tags 0: no round's
        CUDA_CHECK(cudaMemsetAsync(fl, 0, 2 * sizeof(unsigned) * P));
        CUDA_CHECK(cudaLaunchCooperativeKernel(kernels[sh.proto], dim3(G), dim3(nt), args, smem, nullptr));
      }, 1.0);
      nlohmann::json e = r;
      e["producers"] = P, e["words_each"] = W, e["protocol"] = protos[sh.proto], e["producer_delay_ns"] = late;
      std::printf("  (allgather, %s: %d producers x %d words, gathered by %d blocks%s)\n", protos[sh.proto], P, W, G,
                  late ? ", the producers 2 us late: subtract 2 us" : "");
      ag.push_back(e);
    }
    CUDA_CHECK(cudaFree(buf));
    CUDA_CHECK(cudaFree(data));
    CUDA_CHECK(cudaFree(fl));
  }
  int hbad = -1;
  CUDA_CHECK(cudaMemcpy(&hbad, bad, sizeof(int), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(bad));
  CUDA_CHECK(cudaFree(flags));

  nlohmann::json rec = nb::new_record("cluster_latency", "cluster_latency", "cuda", cli);
  rec["device"] = nb::to_json(dev);
  rec["timing"] = nb::timing_json("cuda-events", "one launch of --iters rounds (and of 0: subtracted)",
                                  "the launch; nothing else runs in the kernels", common.warmup,
                                  nb::summarize(std::vector<double>{l2["ms_iters"]["median"].get<double>()}));
  rec["timing"]["repeats"] = common.repeats;
  rec["latency"] = {{"iters", iters},
                    {"threads", threads},
                    {"cluster_sync_us", sync},
                    {"dsmem_one_way_us", dsm},
                    {"l2_flag_one_way_us", l2},
                    {"l2_relaxed_one_way_us", l2r},
                    {"allgather_us", ag},
                    {"cluster_sizes_not_launchable", skipped},
                    {"note", "cluster_sync: per cluster.sync() of one cluster of `blocks` blocks; dsmem: thread 0 of "
                             "block 0 to thread 0 of the cluster's last block, one way; l2: between two blocks, one way (l2_relaxed: relaxed accesses); "
                             "allgather: per round of phase 5's exchange (publish, gather, check, two block barriers)"}};
  const bool ok = hbad == 0;
  rec["validation"] = {{"performed", true},
                       {"passed", ok},
                       {"errors", {{"stale_or_wrong_reads_or_unanswered_pingpongs", hbad}}},
                       {"tolerances", {{"stale_or_wrong_reads_or_unanswered_pingpongs", 0}}}};
  if (!ok) rec["status"] = "validation_failed";
  const std::string path = nb::write_record(rec, common.out, dev.slug, "cluster_latency", common.tag);
  std::printf("checks: %s (%d stale or wrong reads or unanswered ping-pongs)\nrecord: %s\n", ok ? "PASS" : "FAIL", hbad, path.c_str());
  return ok ? nb::kExitOk : nb::kExitValidation;
}

}  // namespace

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, run); }
