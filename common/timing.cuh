// common/timing.cuh — CUDA-event timer for device regions, and a clock for the parts of a kernel.
//   nb::EventTimer t(stream); t.start(); ...enqueue work...; t.stop(); double ms = t.elapsed_ms();
// elapsed_ms() synchronizes on the stop event. Events are created once and reused.
//   std::vector<double> ms = nb::time_runs(t, warmup, repeats, [&] { ...enqueue work... });
// times warmup + repeats calls, one event pair each, and returns the repeats' milliseconds.
//   nb::SegmentClock<N> c; c.start(on); ...; c.stamp(k); ...; c.add_to(totals);   (device code)
// adds the SM clock cycles since the previous stamp to segment k (only where `on`: one thread).
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

// The --breakdown clock of the persistent kernels: one thread (`on`) adds the SM clock cycles
// from one stamp to the next to segment k; add_to() adds its segments to the launch's totals.
template <int N>
struct SegmentClock {
  bool timed = false;
  unsigned long long seg[N] = {};
  long long t_prev = 0;

  __device__ __forceinline__ SegmentClock() {}
  __device__ __forceinline__ void start(bool on) {
    timed = on;
    t_prev = timed ? clock64() : 0;
  }
  __device__ __forceinline__ void stamp(int k) {
    if (timed) {
      const long long now = clock64();
      seg[k] += static_cast<unsigned long long>(now - t_prev);
      t_prev = now;
    }
  }
  __device__ __forceinline__ void add_to(unsigned long long* totals) const {
    if (timed)
      for (int k = 0; k < N; ++k) totals[k] += seg[k];
  }
};

// The same clock with its sums and last stamp in shared memory (N + 1 words the caller provides):
// for kernels whose registers are all in use, where SegmentClock's N + 2 would be spilled to local
// memory and every stamp would wait for a load from L2 (measured in rung 5f: ~18% of its stall
// samples, in untimed runs too). Only the timed thread touches the words.
template <int N>
struct SharedSegmentClock {
  bool timed = false;
  unsigned long long* slots = nullptr;  // [0, N): the sums; [N]: the last stamp

  __device__ __forceinline__ void start(bool on, unsigned long long* words) {
    timed = on, slots = words;
    if (timed) {
      for (int k = 0; k < N; ++k) slots[k] = 0;
      slots[N] = static_cast<unsigned long long>(clock64());
    }
  }
  __device__ __forceinline__ void stamp(int k) {
    if (timed) {
      const unsigned long long now = static_cast<unsigned long long>(clock64());
      slots[k] += now - slots[N];
      slots[N] = now;
    }
  }
  __device__ __forceinline__ void add_to(unsigned long long* totals) const {
    if (timed)
      for (int k = 0; k < N; ++k) totals[k] += slots[k];
  }
};

}  // namespace nb
