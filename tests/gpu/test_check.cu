// tests/gpu/test_check.cu — the check macros, device discovery and the memory guard.
#include <doctest/doctest.h>

#include <string>

#include "check.cuh"
#include "device_info.h"
#include "gpu_test.cuh"
#include "linreg_data.cuh"

namespace nbtest {

__global__ void noop_kernel(int* p) {
  if (p && threadIdx.x == 0 && blockIdx.x == 0) *p = 7;
}

TEST_CASE("a bad launch (2048 threads per block) is reported by CHECK_LAUNCH with file and line") {
  NB_SKIP_WITHOUT_DEVICE();
  if (tool_attached()) {
    // compute-sanitizer counts the deliberate cudaErrorInvalidConfiguration as an API error.
    MESSAGE("skipped: the deliberate launch error would count as a sanitizer error");
    return;
  }
  int line = 0;
  bool threw = false;
  try {
    noop_kernel<<<1, 2048>>>(nullptr);
    line = __LINE__; CHECK_LAUNCH();  // clang-format off: the line number must be this line's
  } catch (const nb::Error& e) {
    threw = true;
    const std::string msg = e.what();
    CHECK(e.code == nb::kExitCuda);
    CHECK_MESSAGE(msg.find("test_check.cu:" + std::to_string(line)) != std::string::npos, msg);
    // CUDA 13 on an H100 says cudaErrorInvalidValue; older runtimes cudaErrorInvalidConfiguration.
    CHECK_MESSAGE(msg.find("cudaErrorInvalid") != std::string::npos, msg);
    CHECK_MESSAGE(msg.find("<kernel launch>") != std::string::npos, msg);
  }
  CHECK(threw);
  // The error is not sticky: the next good launch succeeds.
  int* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
  noop_kernel<<<1, 32>>>(d);
  CHECK_NOTHROW(CHECK_LAUNCH());
  int h = 0;
  CUDA_CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  CHECK(h == 7);
  CUDA_CHECK(cudaFree(d));
}

TEST_CASE("CUDA_CHECK turns a failed runtime call into nb::Error naming the call") {
  NB_SKIP_WITHOUT_DEVICE();
  if (tool_attached()) {
    MESSAGE("skipped: the deliberate API error would count as a sanitizer error");
    return;
  }
  try {
    CUDA_CHECK(cudaSetDevice(100000));
    FAIL("cudaSetDevice(100000) did not fail");
  } catch (const nb::Error& e) {
    const std::string msg = e.what();
    CHECK(e.code == nb::kExitCuda);
    CHECK_MESSAGE(msg.find("cudaSetDevice(100000)") != std::string::npos, msg);
    CHECK_MESSAGE(msg.find("test_check.cu:") != std::string::npos, msg);
  }
  cudaGetLastError();
}

TEST_CASE("require_device: facts of the device, or exit code 3 without one") {
  if (!has_device()) {
    try {
      nb::require_device();
      FAIL("require_device() returned without a device");
    } catch (const nb::Error& e) {
      CHECK(e.code == nb::kExitNoDevice);
      CHECK(std::string(e.what()).rfind("no CUDA device", 0) == 0);
    }
    return;
  }
  const nb::DeviceInfo d = nb::require_device(8);
  CHECK_FALSE(d.name.empty());
  CHECK(d.slug == nb::device_slug(d.name));
  CHECK(d.cc_major >= 8);
  CHECK(d.sm_count > 0);
  CHECK(d.memory_bytes > 0);
  CHECK(d.memory_free_bytes <= d.memory_bytes);
  CHECK(d.l2_bytes > 0);
  CHECK(d.sm_clock_khz > 0);
  CHECK(d.mem_clock_khz > 0);
  CHECK(d.driver_version >= d.runtime_version / 1000 * 1000);  // the driver supports the runtime's major
  try {
    nb::require_device(99);
    FAIL("require_device(99) accepted a device");
  } catch (const nb::Error& e) {
    CHECK(e.code == nb::kExitNoDevice);
    CHECK(std::string(e.what()).find("compute capability") != std::string::npos);
  }
}

TEST_CASE("require_free_memory refuses an absurd size with exit code 5 before allocating") {
  NB_SKIP_WITHOUT_DEVICE();
  try {
    nb::require_free_memory(size_t(1) << 60, "an absurd test buffer");
    FAIL("1 EiB was accepted");
  } catch (const nb::Error& e) {
    const std::string msg = e.what();
    CHECK(e.code == nb::kExitOutOfMemory);
    CHECK_MESSAGE(msg.find("needs 1073741824.00 GiB of GPU memory for an absurd test buffer, only ") == 0, msg);
    CHECK_MESSAGE(msg.find("GiB free") != std::string::npos, msg);
  }
  CHECK_NOTHROW(nb::require_free_memory(size_t(1) << 20, "1 MiB"));
  CHECK(nb::linreg_generate_bytes(7) == 2 * 7 * 4 + 8 * 4);  // odd n: normals rounded up to even
  CHECK(nb::linreg_generate_bytes(8) == 2 * 8 * 4 + 8 * 4);
}

}  // namespace nbtest
