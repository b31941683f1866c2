// tests/gpu/gpu_test.cuh — helpers shared by the GPU test cases.
#pragma once
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include "tracer.h"

namespace nbtest {

// cudaGetDeviceCount fails (cudaErrorNoDevice, cudaErrorInsufficientDriver, ...) or returns 0 on
// machines without a usable GPU; both mean "no device". The error is cleared for later calls.
inline bool has_device() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

// Starts the tracer and forgets earlier records. When a profiler or sanitizer holds CUPTI the
// tracer steps aside by design: the case is skipped. Any other refusal is a failure.
inline bool start_tracer_or_skip() {
  nb::Tracer& tr = nb::Tracer::instance();
  if (!tr.start(true)) {
    if (tr.tool_present()) {
      MESSAGE("skipped: tracer unavailable (profiler/sanitizer present)");
      return false;
    }
    FAIL("the CUPTI tracer did not start: " << tr.off_reason());
    return false;
  }
  tr.clear();
  return true;
}

// Under compute-sanitizer/nsys/ncu (the tracer reports a tool present).
inline bool tool_attached() {
  nb::Tracer& tr = nb::Tracer::instance();
  return !tr.active() && !tr.start(true) && tr.tool_present();
}

}  // namespace nbtest

#define NB_SKIP_WITHOUT_DEVICE()                  \
  do {                                            \
    if (!::nbtest::has_device()) {                \
      MESSAGE("skipped: no CUDA device");         \
      return;                                     \
    }                                             \
  } while (0)
