// common/stats.h — summary statistics over repeated measurements, and a host steady-clock timer.
// Host-only (no CUDA), so the host test suite covers it. Device regions are timed with
// nb::EventTimer (timing.cuh); host regions with nb::HostTimer below.
#pragma once
#include <chrono>
#include <vector>

namespace nb {

struct Stats {
  int count = 0;
  double min = 0, median = 0, max = 0, mean = 0;
  std::vector<double> samples;  // in the order they were taken
};

// Median of an even count is the mean of the two middle values. Empty input gives count 0 and
// zeros; non-finite samples are kept (they sort last) so a bad run is visible, not hidden.
Stats summarize(const std::vector<double>& samples);

class HostTimer {
 public:
  HostTimer() : t0_(std::chrono::steady_clock::now()) {}
  void reset() { t0_ = std::chrono::steady_clock::now(); }
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace nb
