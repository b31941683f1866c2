// common/tagged_exchange.cuh — the 64-bit words that blocks of one running grid exchange through global
// memory with no grid barrier: a writer stores a value and a tag (which epoch or step wrote it) in ONE
// word, a reader polls the word until its tag is the one it expects. Relaxed gpu-scope accesses: coherent
// in L2 (never a stale L1 line), and the word is read or written whole (single-copy atomic), so a reader
// sees either the old tag or the new tag together with its value. The packing of value and tag is each
// user's own (phase 3: a double with an 11-bit tag in its low mantissa bits; phase 5's persistent rungs:
// a float in the low half and a 32-bit step tag in the high half, phase5_batched/onchip_tagged_words.cuh).
#pragma once
#include <cuda_runtime.h>

namespace nb {

__device__ __forceinline__ unsigned long long ld_relaxed_gpu(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed_gpu(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

}  // namespace nb
