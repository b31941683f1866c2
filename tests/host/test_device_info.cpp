// tests/host/test_device_info.cpp — the profiles/<slug>/ folder name and the device JSON.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "device_info.h"

TEST_CASE("device_slug: lower case, [a-z0-9-], runs of other characters become one '-'") {
  CHECK(nb::device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3");
  CHECK(nb::device_slug("NVIDIA H200") == "nvidia-h200");
  CHECK(nb::device_slug("NVIDIA GeForce RTX 4090") == "nvidia-geforce-rtx-4090");
  CHECK(nb::device_slug("NVIDIA A100-SXM4-40GB") == "nvidia-a100-sxm4-40gb");
  CHECK(nb::device_slug("  Tesla  V100 -- (PCIe)/16GB  ") == "tesla-v100-pcie-16gb");
  CHECK(nb::device_slug("Intel(R) Xeon(R) CPU @ 2.20GHz") == "intel-r-xeon-r-cpu-2-20ghz");
  CHECK(nb::device_slug("") == "unknown-device");
  CHECK(nb::device_slug("***") == "unknown-device");
  CHECK(nb::device_slug("caf\xc3\xa9 GPU") == "caf-gpu");  // non-ASCII bytes are separators
}

TEST_CASE("device to_json: every schema field, slug derived when unset; peaks null when not finite") {
  nb::DeviceInfo d;
  d.name = "NVIDIA H100 80GB HBM3";
  d.cc_major = 9;
  d.sm_count = 132;
  d.memory_bytes = 85028634624ull;
  d.driver_version = 13000;
  nlohmann::json j = nb::to_json(d);
  for (const char* k : {"name", "slug", "cc_major", "cc_minor", "sm_count", "memory_bytes", "memory_free_bytes",
                        "l2_bytes", "sm_clock_khz", "mem_clock_khz", "mem_bus_width_bits", "driver_version",
                        "runtime_version"})
    CHECK_MESSAGE(j.contains(k), k);
  CHECK(j["slug"] == "nvidia-h100-80gb-hbm3");
  CHECK(j["memory_bytes"] == 85028634624ull);
  CHECK(j["cc_major"] == 9);
  nb::Peaks p;
  p.copy_gbps = 2900.5;
  p.fp16_tflops = std::numeric_limits<double>::quiet_NaN();
  nlohmann::json q = nb::to_json(p);
  CHECK(q["copy_gbps"] == 2900.5);
  CHECK(q["fp16_tflops"].is_null());
}
