// phase5_batched/onchip_warp_ops.cuh — the persistent rungs' (5c, 5e) building blocks below the level
// of a stage: a dot-product GEMM for few outputs with a long K, vector accesses to a row of NC unit
// values, and one image row's asynchronous copy into shared memory.
#pragma once
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "5c_persistent.h"

namespace nb {
namespace mlp {

// out(m, n) = sum_k a(m, k) b(k, n) for few outputs with a long K: one warp per output, lanes
// split K, a butterfly of shuffles adds them (fixed order: reproducible); two outputs per warp at
// a time, finished by lanes 0 and 1. No shared scratch, no block barrier.
template <class FA, class FB, class Fin>
__device__ __forceinline__ void warp_dot_gemm(int M, int N, int K, FA a, FB b, Fin fin) {
  constexpr int nw = kPersistThreads / 32;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, MN = M * N;
  for (int o = w; o < MN; o += 2 * nw) {
    const int o2 = o + nw;
    const bool two = o2 < MN;
    int m = o, n = 0, m2 = two ? o2 : m, n2 = 0;  // N == 1 (W1's one unit a block): no division
    if (N > 1) m = o / N, n = o % N, m2 = two ? o2 / N : m, n2 = two ? o2 % N : n;
    float s1 = 0.f, s2 = 0.f;
    for (int k = lane; k < K; k += 32) {
      s1 = fmaf(a(m, k), b(k, n), s1);
      s2 = fmaf(a(m2, k), b(k, n2), s2);
    }
#pragma unroll
    for (int x = 16; x >= 1; x >>= 1) {
      s1 += __shfl_xor_sync(0xffffffffu, s1, x);
      s2 += __shfl_xor_sync(0xffffffffu, s2, x);
    }
    if (lane == 0) fin(m, n, s1);
    if (lane == 1 && two) fin(m2, n2, s2);
  }
}

// NC consecutive floats (16-byte aligned when NC >= 4): one vector access instead of NC scalar
// ones (a warp reading rows k = lane of a [D][NC] array would otherwise meet NC-way conflicts).
template <int NC>
__device__ __forceinline__ void ld_units(const float* p, float (&v)[NC]) {
  if constexpr (NC % 4 == 0) {
#pragma unroll
    for (int c = 0; c < NC; c += 4) {
      const float4 t = *reinterpret_cast<const float4*>(p + c);
      v[c] = t.x, v[c + 1] = t.y, v[c + 2] = t.z, v[c + 3] = t.w;
    }
  } else if constexpr (NC == 2) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    v[0] = t.x, v[1] = t.y;
  } else {
    v[0] = p[0];
  }
}
template <int NC>
__device__ __forceinline__ void st_units(float* p, const float (&v)[NC]) {
  if constexpr (NC % 4 == 0) {
#pragma unroll
    for (int c = 0; c < NC; c += 4) *reinterpret_cast<float4*>(p + c) = make_float4(v[c], v[c + 1], v[c + 2], v[c + 3]);
  } else if constexpr (NC == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
  } else {
    p[0] = v[0];
  }
}

// One image row (D bytes) from global src into shared dst, lanes of one warp, by cp.async.
__device__ __forceinline__ void copy_image_async(uint8_t* dst, const uint8_t* src, int D, int lane) {
  if (D % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {  // 16-byte copies (dense rows)
    for (int c = lane; c < D / 16; c += 32) __pipeline_memcpy_async(dst + 16 * c, src + 16 * c, 16);
  } else {  // 4-byte copies into a padded row
    for (int c = lane; c < D / 4; c += 32) __pipeline_memcpy_async(dst + 4 * c, src + 4 * c, 4);
  }
}

}  // namespace mlp
}  // namespace nb
