// phase5_batched/onchip_segment_clock.cuh — the --breakdown clock of the one-launch rungs' kernels
// (5c, 5d, 5e, 5f), device code:
//   nb::SegmentClock<N> c; c.start(on); ...; c.stamp(k); ...; c.add_to(totals);
// adds the SM clock cycles since the previous stamp to segment k (only where `on`: one thread).
#pragma once
#include <cuda_runtime.h>

namespace nb {

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
