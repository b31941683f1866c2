// common/timing.cuh — CUDA-event timer for device regions.
//   nb::EventTimer t(stream); t.start(); ...enqueue work...; t.stop(); double ms = t.elapsed_ms();
// elapsed_ms() synchronizes on the stop event. Events are created once and reused.
//   std::vector<double> ms = nb::time_runs(t, warmup, repeats, [&] { ...enqueue work... });
// times warmup + repeats calls, one event pair each, and returns the repeats' milliseconds.
#pragma once
#include <cuda_runtime.h>

#include <vector>

#include "check.cuh"
#include "stats.h"

namespace nb {

class EventTimer {
 public:
  explicit EventTimer(cudaStream_t stream = nullptr) : stream_(stream) {
    CUDA_CHECK(cudaEventCreate(&start_));
    CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start() { CUDA_CHECK(cudaEventRecord(start_, stream_)); }
  void stop() { CUDA_CHECK(cudaEventRecord(stop_, stream_)); }
  double elapsed_ms() {
    CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_{}, stop_{};
};

template <class F>
std::vector<double> time_runs(EventTimer& t, int warmup, int repeats, F&& enqueue) {
  std::vector<double> ms;
  for (int r = 0; r < warmup + repeats; ++r) {
    t.start();
    enqueue();
    t.stop();
    const double one = t.elapsed_ms();
    if (r >= warmup) ms.push_back(one);
  }
  return ms;
}

}  // namespace nb
