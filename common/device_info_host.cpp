// common/device_info_host.cpp — the host-only half of device_info.h: the folder slug and the JSON
// forms (named _host so its object does not collide with device_info.cu's build/common/device_info.o).
// query_device()/require_device() are in device_query.cpp, measure_peaks() in device_info.cu.
#include "device_info.h"

#include <cmath>

namespace nb {

std::string device_slug(const std::string& name) {
  std::string out;
  bool pending_dash = false;
  for (unsigned char c : name) {
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<unsigned char>(c - 'A' + 'a');
      alnum = true;
    }
    if (!alnum) {  // '-' too: "A - B" gives "a-b", not "a---b"
      pending_dash = true;
      continue;
    }
    if (pending_dash && !out.empty()) out += '-';
    pending_dash = false;
    out += static_cast<char>(c);
  }
  return out.empty() ? "unknown-device" : out;
}

nlohmann::json to_json(const DeviceInfo& d) {
  return {{"index", d.index},
          {"name", d.name},
          {"slug", d.slug.empty() ? device_slug(d.name) : d.slug},
          {"cc_major", d.cc_major},
          {"cc_minor", d.cc_minor},
          {"sm_count", d.sm_count},
          {"memory_bytes", d.memory_bytes},
          {"memory_free_bytes", d.memory_free_bytes},
          {"l2_bytes", d.l2_bytes},
          {"sm_clock_khz", d.sm_clock_khz},
          {"mem_clock_khz", d.mem_clock_khz},
          {"mem_bus_width_bits", d.mem_bus_width_bits},
          {"driver_version", d.driver_version},
          {"runtime_version", d.runtime_version}};
}

nlohmann::json to_json(const Peaks& p) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"copy_gbps", num(p.copy_gbps)}, {"fp16_tflops", num(p.fp16_tflops)}};
}

}  // namespace nb
