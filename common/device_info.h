// common/device_info.h — what GPU a run happened on, for the run record and the report.
// The struct is host-only; query_device()/require_device() live in device_query.cpp (CUDA runtime,
// no kernels), measure_peaks() in device_info.cu.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "stats.h"

namespace nb {

struct DeviceInfo {
  int index = 0;
  std::string name;          // "NVIDIA H100 80GB HBM3"
  std::string slug;          // "nvidia-h100-80gb-hbm3": the profiles/<slug>/ folder
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  uint64_t memory_bytes = 0, memory_free_bytes = 0;
  int l2_bytes = 0;
  int sm_clock_khz = 0, mem_clock_khz = 0, mem_bus_width_bits = 0;
  int driver_version = 0, runtime_version = 0;  // as cudaDriverGetVersion: 13000 = 13.0
};

// Lower-case, [a-z0-9-] only, runs of other characters collapsed to one '-'.
std::string device_slug(const std::string& name);
nlohmann::json to_json(const DeviceInfo& d);

// Defined in device_query.cpp (needs the CUDA runtime):
// query_device(): fills DeviceInfo for the current device.
// require_device(min_cc_major): no device → Error(kExitNoDevice, "no CUDA device: ..."); a device
// older than min_cc_major → Error(kExitNoDevice, ...) naming its compute capability.
DeviceInfo query_device();
DeviceInfo require_device(int min_cc_major = 8);

// Optional ceilings, measured once per run when asked (--measure-peaks): device-to-device copy
// bandwidth in GB/s counting bytes read + written, and fp16 tensor-core GEMM TFLOP/s (cuBLAS).
struct Peaks {
  double copy_gbps = 0;
  double fp16_tflops = 0;
};
Peaks measure_peaks();
nlohmann::json to_json(const Peaks& p);

// The same measurement with its evidence, for tools/ceilings (device_info.cu): the timing
// samples of both ceilings, their sizes, and the relative error of 64 GEMM entries against
// float64 dot products of the same fp16 inputs.
struct PeakDetail {
  Peaks peaks;
  size_t copy_bytes = 0;
  int copy_warmup = 3, copy_repeats = 15;
  Stats copy_ms;
  int gemm_n = 8192;  // m = n = k
  int gemm_warmup = 3, gemm_repeats = 20;
  Stats gemm_ms;
  double gemm_rel_error = 0;
};
PeakDetail measure_peaks_detailed();

}  // namespace nb
