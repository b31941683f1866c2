// tests/gpu/gpu_test.cuh — helpers shared by the GPU test cases.
#pragma once
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "check.cuh"

#include "tracer.h"

namespace nbtest {

// A device copy of n elements (RAII) for the GPU tests: upload, poison (0xFF bytes: NaN for float
// and half), zero, download.
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) { CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T))); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) { set(h); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void set(const std::vector<T>& h) {
    if (n) CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void poison() { CUDA_CHECK(cudaMemset(p, 0xFF, std::max<size_t>(n, 1) * sizeof(T))); }
  void zero() { CUDA_CHECK(cudaMemset(p, 0, std::max<size_t>(n, 1) * sizeof(T))); }
  std::vector<T> get() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n);
    if (n) CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

// Step 5 (3xTF32) against float64: the fp32 tolerance of a K-long sum, 2u·sqrt(K) (u = 2^-24, the
// probabilistic bound validate.h uses), plus 8u for the operand split (hi + lo keeps about 22 bits:
// each operand errs by up to 2^-22 = 4u). A one-term product (plain TF32, about 2^-12 an operand)
// fails it.
inline double tf32x3_tol(int K) { return 2 * 0x1p-24 * std::sqrt(static_cast<double>(K)) + 8 * 0x1p-24; }
// Step 6 against the float64 product of the same fp16 operands (bytes: byte / 255): only the fp32
// sums err, and the tensor cores' additions may truncate: the same form with u = 2^-22 (the GEMM
// benchmark's rule).
inline double f16mma_tol(int K) { return 2 * 0x1p-22 * std::sqrt(static_cast<double>(K)) + 8 * 0x1p-22; }

// The device's compute capability as major * 10 + minor (GEMM step 9 runs where it is 90).
inline int device_cc() {
  int dev = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return 10 * major + minor;
}

// The GPU tests' random source: fresh inputs every run (a failure prints the values it met).
inline std::mt19937_64& test_rng() {
  static std::mt19937_64 g(std::random_device{}());
  return g;
}

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
