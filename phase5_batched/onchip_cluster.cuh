// phase5_batched/onchip_cluster.cuh — what the two cluster rungs (5d: W2 in fp16 WMMA, 5f: W1 in fp32)
// share: the host's search for a cluster size that fits and runs, the loop of a push of a block's own
// columns into every block's shared memory (DSMEM), and the bit comparison of weight copies that the
// GPU tests count. The stores themselves differ (5d: plain DSMEM stores of halves, then a cluster
// barrier; 5f: st.async of floats completing on the receiver's mbarrier), so each rung passes its own.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "check.cuh"
#include "cluster_launch.cuh"

namespace nb {
namespace mlp {

// ------------------------------------------------------------------ host: the cluster's size
// The device's compute capability (major) and opt-in shared memory per block.
struct ClusterDevice {
  int cc = 0, smem_optin = 0;
  explicit ClusterDevice(int device) {
    CUDA_CHECK(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  }
};
// The cluster sizes to try, largest first: the requested one, or (0) every size from max_blocks down.
struct ClusterSizes {
  int lo, hi;
  ClusterSizes(int requested_blocks, int max_blocks)
      : lo(requested_blocks > 0 ? requested_blocks : 1), hi(requested_blocks > 0 ? requested_blocks : max_blocks) {}
};
// Why nb blocks of smem bytes each do not fit the GPU's opt-in shared memory ("" when they do).
inline std::string cluster_smem_refusal(int nb, size_t smem, int smem_optin) {
  if (smem <= static_cast<size_t>(smem_optin)) return {};
  return "needs " + std::to_string(smem) + " bytes of shared memory per block with " + std::to_string(nb) +
         " blocks, the GPU offers " + std::to_string(smem_optin);
}
// Sets kernel k's dynamic shared memory to smem; why a cluster of nb such blocks cannot run ("" when it can).
inline std::string cluster_run_refusal(const void* k, int nb, int threads, size_t smem) {
  CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  if (ClusterLaunch(nb, threads, smem).max_active(k) >= 1) return {};
  return "a cluster of " + std::to_string(nb) + " blocks with " + std::to_string(smem) + " bytes each cannot run";
}

// ------------------------------------------------------------------ device: the push and the copies
// A push's elements: chunk c (of n a row) of row b (of rows) for block q (of NB), element e of the
// NB * rows * n taken by thread `tid` of `nt` in turn; store(q, b, c) writes it.
template <class Store>
__device__ __forceinline__ void for_each_push_element(int tid, int nt, int NB, int rows, int n, Store store) {
  const int per = rows * n, total = NB * per;
  for (int e = tid; e < total; e += nt) {
    const int q = e / per, rest = e - q * per, b = rest / n, c = rest - b * n;
    store(q, b, c);
  }
}

// 1 where two copies of a value differ in any bit (the copies must be bit-identical)
__device__ __forceinline__ unsigned bits_differ(float a, float b) { return __float_as_uint(a) != __float_as_uint(b); }
__device__ __forceinline__ unsigned bits_differ(__half a, __half b) { return __half_as_ushort(a) != __half_as_ushort(b); }
// the count of a block's differing bits, added to the tests' counter (nothing when 0)
__device__ __forceinline__ void report_mismatches(unsigned bad, unsigned* counter) {
  if (bad) atomicAdd(counter, bad);
}

}  // namespace mlp
}  // namespace nb
