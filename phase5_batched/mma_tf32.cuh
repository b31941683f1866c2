// phase5_batched/mma_tf32.cuh — the tensor-core instruction rungs 5e and 5f share: m16n8k8 with TF32
// operands and fp32 accumulators, and the split of an fp32 value into two TF32 parts that gives
// fp32-level products in two or three MMAs ("3xTF32").
//
// Fragments of mma.m16n8k8.row.col (lane = 4 g + t): A (16 x 8) a0 = A[g][t], a1 = A[g+8][t],
// a2 = A[g][t+4], a3 = A[g+8][t+4]; B (8 x 8) b0 = B[t][g], b1 = B[t+4][g]; C/D (16 x 8) c0 = C[g][2t],
// c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1].
#pragma once
#include <cstdint>

namespace nb {
namespace mlp {

__device__ __forceinline__ uint32_t tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
// x = hi + lo with hi and lo both TF32 (lo is the rounded rest): hi*b + lo*b is within ~2^-21 of x*b.
__device__ __forceinline__ void split(float x, uint32_t& hi, uint32_t& lo) {
  hi = tf32(x);
  lo = tf32(x - __uint_as_float(hi));
}
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace mlp
}  // namespace nb
