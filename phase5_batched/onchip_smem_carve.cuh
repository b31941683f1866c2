// phase5_batched/onchip_smem_carve.cuh — the one-launch rungs' shared-memory carve-up: a bump allocator
// that hands out offsets from the start of the dynamic buffer, each rounded up to kAlign bytes (5c, 5e,
// 5f: 16, the widest vector or cp.async access; 5d: 128, WMMA's loads). constexpr on host and device, so
// a layout computed once by the host is recomputed identically by the kernel (or folded to constants).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace nb {
namespace mlp {

// The opt-in shared memory per block of a compute capability 9.0 GPU (227 KiB; an H100's and H200's).
constexpr size_t kSm90SmemOptinBytes = 232448;

template <size_t kAlign>
struct SmemCarve {
  size_t off;  // the next free byte (a multiple of kAlign once anything was taken)
  __host__ __device__ static constexpr size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
  // start: where the carve-up begins (rounded up), e.g. past another layout's total
  __host__ __device__ constexpr explicit SmemCarve(size_t start = 0) : off(round_up(start)) {}
  // `bytes` at the returned offset; the next one starts at the following multiple of kAlign. (Spelled
  // out rather than through round_up: through it, ptxas allocated 5e's 8-unit generic kernel with 48
  // more bytes of spill stores and it ran 4% slower on an H200; spelled out, every phase-5 kernel
  // spills exactly as with the rungs' former hand-written carve-ups.)
  __host__ __device__ constexpr size_t take(size_t bytes) {
    const size_t at = off;
    off = (off + bytes + kAlign - 1) / kAlign * kAlign;
    return at;
  }
};

}  // namespace mlp
}  // namespace nb
