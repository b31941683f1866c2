// common/pdl.cuh — Hopper's programmatic dependent launch (PDL), device side.
//
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may start while the
// kernel before it in the stream is still running. pdl_wait() (griddepcontrol.wait) blocks until
// that kernel has completed and its writes are visible; pdl_launch_dependents()
// (griddepcontrol.launch_dependents) lets the next kernel start before this one ends. Both are
// no-ops in a grid launched without the attribute, and compile to nothing below sm_90 (where the
// hosts do not set the attribute: phases 3 and 5 check the compute capability).
#pragma once

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

}  // namespace nb
