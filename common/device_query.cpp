// common/device_query.cpp — which GPU a run is on (device_info.h): query_device() gives the facts a
// run record needs (name, compute capability, SMs, memory, L2, clocks, driver/runtime versions);
// require_device() stops a program with no usable device with one line and exit code 3
// (kExitNoDevice) instead of failing at its first allocation. Host code on the CUDA runtime only
// (no kernels), so the libtorch twins, built with g++ against torch, use it too; a program that
// calls it links the CUDA runtime.
#include <cuda_runtime.h>

#include <string>

#include "check.cuh"
#include "device_info.h"

namespace nb {

DeviceInfo query_device() {
  DeviceInfo d;
  CUDA_CHECK(cudaGetDevice(&d.index));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, d.index));
  d.name = prop.name;
  d.slug = device_slug(d.name);
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.memory_bytes = prop.totalGlobalMem;
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  d.memory_free_bytes = free_b;
  d.l2_bytes = prop.l2CacheSize;
  d.mem_bus_width_bits = prop.memoryBusWidth;
  // cudaDeviceProp lost clockRate/memoryClockRate in CUDA 13: ask for the attributes instead.
  CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_clock_khz, cudaDevAttrClockRate, d.index));
  CUDA_CHECK(cudaDeviceGetAttribute(&d.mem_clock_khz, cudaDevAttrMemoryClockRate, d.index));
  CUDA_CHECK(cudaDriverGetVersion(&d.driver_version));
  CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime_version));
  return d;
}

DeviceInfo require_device(int min_cc_major) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
    std::string why = err != cudaSuccess ? std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err)
                                         : std::string("the driver reports 0 devices");
    throw Error(kExitNoDevice, "no CUDA device: " + why + " (this program needs an NVIDIA GPU)");
  }
  DeviceInfo d = query_device();
  if (d.cc_major < min_cc_major)
    throw Error(kExitNoDevice, "device " + std::to_string(d.index) + " (" + d.name + ") has compute capability " +
                                   std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor) +
                                   "; this program needs " + std::to_string(min_cc_major) + ".0 or newer");
  return d;
}

}  // namespace nb
