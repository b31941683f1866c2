// common/mlp/gemm/3_split_k.cuh — the GEMM ladder, step 3: split-K. Slices of K run in separate
// blocks; the last block of a tile adds the partials in slice order (deterministic sums).
#pragma once
#include <type_traits>

#include "mlp/gemm/0_problem.cuh"

namespace nb {
namespace mlp {

// An epilogue that declares `static constexpr bool kVecFixup = true` (phase 5's) gets the split-K
// fix-up below in its latency-tuned form: partials written and read as float4, the loads of up to
// 16 float4 per thread issued before they are added (in the same slice order, so the sums are
// bit-identical to the plain form, which phase 4 keeps).
template <class E, class = void>
struct VecFixup : std::false_type {};
template <class E>
struct VecFixup<E, std::void_t<decltype(E::kVecFixup)>> : std::integral_constant<bool, E::kVecFixup> {};

// Split-K fix-up of one kBM x kBN fp32 tile `c` (row stride kLdc, in shared memory) computed by
// slice `split` of `splits`: the tile goes to its workspace slot (ws: per tile, `splits` slots of
// kBM * kBN floats), and the last block of the tile to finish (an atomic counter after a fence)
// adds all slots in slice order into c, resets the counter and returns true; the others return
// false. kVec: float4 traffic and up to 16 float4 loads a thread issued before they are added
// (the same order, so the same sums). Every thread of the block (NT of them) must call it.
template <int NT, bool kVec>
__device__ bool splitk_fixup(float* c, float* ws, unsigned* counters, int tile, int split, int splits) {
  __shared__ bool s_last;
  constexpr int kE4 = kBM * kBN / 4 / NT;  // float4 of the tile per thread: 2 (256 threads), 4 (128)
  float* mine = ws + (static_cast<size_t>(tile) * splits + split) * (kBM * kBN);
  if constexpr (kVec) {
#pragma unroll
    for (int i = 0; i < kE4; ++i) {
      const int e = (threadIdx.x + i * NT) * 4;
      reinterpret_cast<float4*>(mine)[e / 4] = *reinterpret_cast<const float4*>(&c[(e / kBN) * kLdc + e % kBN]);
    }
  } else {
    for (int e = threadIdx.x; e < kBM * kBN; e += NT) mine[e] = c[(e / kBN) * kLdc + e % kBN];
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned prev = atomicAdd(&counters[tile], 1u);
    s_last = (prev == static_cast<unsigned>(splits - 1));
  }
  __syncthreads();
  if (!s_last) return false;
  __threadfence();
  const float* all = ws + static_cast<size_t>(tile) * splits * (kBM * kBN);
  if constexpr (kVec) {
    constexpr int kG = 16 / kE4;  // slices loaded per round
    const float4* all4 = reinterpret_cast<const float4*>(all);
    float4 s[kE4];
#pragma unroll
    for (int i = 0; i < kE4; ++i) s[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int z0 = 0; z0 < splits; z0 += kG) {
      float4 v[kG][kE4];
#pragma unroll
      for (int g = 0; g < kG; ++g)
#pragma unroll
        for (int i = 0; i < kE4; ++i)
          v[g][i] = (z0 + g < splits) ? __ldcg(all4 + static_cast<size_t>(z0 + g) * (kBM * kBN / 4) + threadIdx.x + i * NT)
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int g = 0; g < kG; ++g)
        if (z0 + g < splits)
#pragma unroll
          for (int i = 0; i < kE4; ++i) s[i].x += v[g][i].x, s[i].y += v[g][i].y, s[i].z += v[g][i].z, s[i].w += v[g][i].w;
    }
#pragma unroll
    for (int i = 0; i < kE4; ++i) {
      const int e = (threadIdx.x + i * NT) * 4;
      *reinterpret_cast<float4*>(&c[(e / kBN) * kLdc + e % kBN]) = s[i];
    }
  } else {
    for (int e = threadIdx.x; e < kBM * kBN; e += NT) {
      float s = 0.f;
      for (int z = 0; z < splits; ++z) s += __ldcg(all + static_cast<size_t>(z) * (kBM * kBN) + e);
      c[(e / kBN) * kLdc + e % kBN] = s;
    }
  }
  if (threadIdx.x == 0) counters[tile] = 0u;  // ready for the next launch
  __syncthreads();
  return true;
}

}  // namespace mlp
}  // namespace nb
