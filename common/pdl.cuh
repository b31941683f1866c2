// common/pdl.cuh — Hopper's programmatic dependent launch (PDL): the device side, and the one
// launch helper every kernel that may take the attribute goes through (phase 3's epochs, the MLP
// GEMMs and the fused backward kernel):
//
//   nb::launch_kernel(kernel, grid, block, smem, stream, pdl, args...);
//   nb::launch_kernel(kernel, grid, block, smem, stream, nb::LaunchOpts{pdl, &l2_window}, args...);
//
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may start while the
// kernel before it in the stream is still running. pdl_wait() (griddepcontrol.wait) blocks until
// that kernel has completed and its writes are visible; pdl_launch_dependents()
// (griddepcontrol.launch_dependents) lets the next kernel start before this one ends. Both are
// no-ops in a grid launched without the attribute, and compile to nothing below sm_90 (where the
// hosts do not set the attribute: phases 3 and 5 check the compute capability).
#pragma once
#include <cuda_runtime.h>

#include "check.cuh"

namespace nb {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The launch attributes a kernel may take: PDL, an L2 access-policy window (phase 3's
// --l2-persist) and a one-dimensional thread-block cluster of `cluster` consecutive blocks (the
// slices' cluster hand-over of GEMM step 8 and of phase 5's fused backward pass; 0: none). A bool
// converts: launch_kernel(..., pdl, ...).
struct LaunchOpts {
  bool pdl = false;
  const cudaAccessPolicyWindow* l2_window = nullptr;
  unsigned cluster = 0;
  LaunchOpts(bool p = false, const cudaAccessPolicyWindow* w = nullptr, unsigned c = 0)  // NOLINT: implicit
      : pdl(p), l2_window(w), cluster(c) {}
};

template <class... KArgs, class... Args>
inline void launch_kernel(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, LaunchOpts o,
                          Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute attrs[3] = {};
  unsigned na = 0;
  if (o.pdl) {
    attrs[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[na].val.programmaticStreamSerializationAllowed = 1;
    ++na;
  }
  if (o.l2_window) {
    attrs[na].id = cudaLaunchAttributeAccessPolicyWindow;
    attrs[na].val.accessPolicyWindow = *o.l2_window;
    ++na;
  }
  if (o.cluster > 0) {
    attrs[na].id = cudaLaunchAttributeClusterDimension;
    attrs[na].val.clusterDim.x = o.cluster, attrs[na].val.clusterDim.y = 1, attrs[na].val.clusterDim.z = 1;
    ++na;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = na;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, k, args...));
}

}  // namespace nb
