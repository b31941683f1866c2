// phase5_batched/onchip_pixels.cuh — how the one-launch rungs (5c, 5e, 5f) read their images'
// pixels, four bytes to a 32-bit word.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace nb {
namespace mlp {

// Byte i of w (four pixels of an image row) as a float, exactly: the byte becomes the low mantissa
// bits of 2^23 (one byte permute), then 2^23 is subtracted (one add). Phase 5's one-launch kernels
// read their pixels this way: two ALU operations instead of a shared-memory table lookup (5c's first
// version's table cost one dependent, often bank-conflicted load per pixel).
__device__ __forceinline__ float byte_value(uint32_t w, int i) {
  return __int_as_float(static_cast<int>(__byte_perm(w, 0x4B000000u, 0x7540u | static_cast<unsigned>(i)))) - 8388608.f;
}

}  // namespace mlp
}  // namespace nb
