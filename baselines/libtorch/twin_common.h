// baselines/libtorch/twin_common.h — what the two libtorch twins (linreg.cpp, mlp.cpp) share: the
// record's software object (its device object is common/device_query.cpp's, as the phases'), the
// translation of libtorch's exceptions into the project's exit codes (common/errors.h), the --impl
// list, CUDA-event timing and the record-file tag. Host code only: compiled with g++ against the libtorch of the installed
// torch package (make libtorch), never by nvcc.
#pragma once
#include <ATen/Context.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <functional>
#include <string>
#include <vector>

#include "cli.h"
#include "device_info.h"
#include "errors.h"
#include "record.h"

namespace nb {
namespace lt {

inline std::string first_line(const std::string& s) {
  const size_t p = s.find('\n');
  return p == std::string::npos ? s : s.substr(0, p);
}

// Runs body; libtorch's exceptions become nb::Error with the project's codes: out of GPU memory
// 5, any other c10::Error (a failed CUDA call inside torch, a shape error) 8 with its first line.
// nb::Error passes through, so guarded_main prints one line and returns the code.
inline int torch_guarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const c10::OutOfMemoryError& e) {
    throw Error(kExitOutOfMemory, "out of GPU memory: " + first_line(e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    throw Error(kExitCuda, "libtorch: " + first_line(e.what_without_backtrace()));
  }
}

// A usable CUDA device through libtorch, or Error(3).
inline void require_cuda() {
  if (!torch::cuda::is_available() || torch::cuda::device_count() < 1)
    throw Error(kExitNoDevice, "no CUDA device: torch::cuda::is_available() is false");
}

inline nlohmann::json software_json(const DeviceInfo& d) {
  nlohmann::json s;
#if defined(__GNUC__) && !defined(__clang__)
  s["compiler"] = std::string("g++ ") + __VERSION__;
#else
  s["compiler"] = "unknown";
#endif
  s["cuda_runtime"] = d.runtime_version;
  s["driver"] = d.driver_version;
  s["torch"] = TORCH_VERSION;  // the libtorch inside the torch package the twin was built against
  s["libtorch"] = true;
  s["glibcxx_use_cxx11_abi"] = _GLIBCXX_USE_CXX11_ABI;
  s["tf32_matmul"] = at::globalContext().allowTF32CuBLAS();
  return s;
}

// fp32 matrix products without TF32, as the Python twins and the CUDA phases.
inline void no_tf32() {
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
}

// "--impl eager,graph" -> {"eager", "graph"}; anything else is a usage error (exit 2).
inline std::vector<std::string> impl_list(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string v = s.substr(i, j - i);
    if (!v.empty()) {
      if (v != "eager" && v != "graph")
        throw Error(kExitUsage, "--impl: expected one or more of eager,graph, got '" + s + "'");
      out.push_back(v);
    }
    i = j + 1;
  }
  if (out.empty()) throw Error(kExitUsage, "--impl: expected one or more of eager,graph, got '" + s + "'");
  return out;
}

// Milliseconds between two timing events recorded on the current stream around fn().
class EventTimer {
 public:
  EventTimer() : start_(cudaEventDefault), stop_(cudaEventDefault) {}
  void start() { start_.record(c10::cuda::getCurrentCUDAStream()); }
  double stop() {
    stop_.record(c10::cuda::getCurrentCUDAStream());
    stop_.synchronize();
    return start_.elapsed_time(stop_);
  }

 private:
  at::cuda::CUDAEvent start_, stop_;
};

// Peak of the caching allocator's allocated bytes (torch.cuda.max_memory_allocated()).
inline void reset_peak_memory() { c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device()); }
inline int64_t peak_memory_allocated() {
  auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  return st.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

}  // namespace lt
}  // namespace nb
