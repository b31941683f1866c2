// phase5_batched/onchip_tagged_words.cuh — the exchanges of the persistent rungs (5c, 5e): tagged
// float words in global memory, written once by their owner block and polled by every reader until
// they carry the reader's step tag, and gather_rows, which waits for a whole matrix of them.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "tagged_exchange.cuh"
#include "5c_persistent.h"

namespace nb {
namespace mlp {

// One word: the float's bits in the low half, the tag of the step that wrote it in the high half
// (xword, 5c_persistent.h), through common/tagged_exchange.cuh's relaxed gpu-scope accesses.
__device__ __forceinline__ xword xload(const xword* p) { return ld_relaxed_gpu(p); }
__device__ __forceinline__ void xstore(xword* p, float v, uint32_t tag) {
  const xword w = (static_cast<xword>(tag) << 32) | __float_as_uint(v);
  st_relaxed_gpu(p, w);
}
__device__ __forceinline__ bool xready(xword w, uint32_t tag) { return static_cast<uint32_t>(w >> 32) == tag; }
__device__ __forceinline__ float xfloat(xword w) { return __uint_as_float(static_cast<uint32_t>(w)); }
// Polling round r (r > 0: the previous round found a word not ready yet). A block waits only for
// blocks at most one step behind it, which all run, so the wait ends; the bound (2^28 rounds of at
// least one L2 round trip each: over a minute) turns a defect into a launch error instead of a
// hang. No sleep between rounds: a word is seen at most one round trip after it lands (a sleep
// made no measurable difference on an H100: phase notes, logs/probe_backoff_ec2fc57.log).
constexpr uint32_t kPollRoundLimit = 1u << 28;
__device__ __forceinline__ void xbackoff(uint32_t r) {
  if (r > kPollRoundLimit) __trap();
}
// The float of the word at p (first loaded as w), polled until its tag is `tag`.
__device__ __forceinline__ float xvalue(const xword* p, xword w, uint32_t tag) {
  for (uint32_t r = 1; !xready(w, tag); ++r) xbackoff(r), w = xload(p);
  return xfloat(w);
}

// rows x cols tagged words from global src (row stride cols) into shared dst (row stride ld),
// waiting for `tag`. A thread's U words are loaded together and, while any is not ready, the
// stale ones are reloaded together: one L2 round trip a round, never one per word. The row and
// column of each element advance by adding (no division per element).
// `between()` runs once, by every thread, while the first round of loads is in flight (work that
// hides the wait); a block barrier follows it, so it may still read dst's old contents.
template <class Between>
__device__ __forceinline__ void gather_rows(float* dst, int ld, const xword* src, int rows, int cols, uint32_t tag,
                                            Between between) {
  constexpr int U = 8;
  constexpr int nt = kPersistThreads;
  const int n = rows * cols;
  const int dr = nt / cols, dc = nt % cols;  // a step of nt elements: dr rows and dc columns
  int r = threadIdx.x / cols, c = threadIdx.x % cols;
  for (int e0 = threadIdx.x, first = 1; first || e0 < n; e0 += U * nt, first = 0) {  // every thread: the first chunk
    xword w[U];
#pragma unroll
    for (int u = 0; u < U; ++u) w[u] = e0 + u * nt < n ? xload(src + e0 + u * nt) : static_cast<xword>(tag) << 32;
    if (first) between(), __syncthreads();
    for (uint32_t round = 1;; ++round) {
      bool all = true;
#pragma unroll
      for (int u = 0; u < U; ++u) all = all && xready(w[u], tag);
      if (all) break;
      xbackoff(round);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (!xready(w[u], tag)) w[u] = xload(src + e0 + u * nt);
    }
    if (dc == 0) {  // cols divides the block (W1's shapes): the column never changes
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (e0 + u * nt < n) dst[(r + u * dr) * ld + c] = xfloat(w[u]);
      r += U * dr;
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (e0 + u * nt < n) dst[r * ld + c] = xfloat(w[u]);
        r += dr, c += dc;
        if (c >= cols) c -= cols, ++r;
      }
    }
  }
}
struct NoWork {
  __device__ __forceinline__ void operator()() const {}
};
__device__ __forceinline__ void gather_rows(float* dst, int ld, const xword* src, int rows, int cols, uint32_t tag) {
  gather_rows(dst, ld, src, rows, cols, tag, NoWork{});
}

}  // namespace mlp
}  // namespace nb
