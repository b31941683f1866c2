// common/linreg_data.cuh — generate the linear-regression data on the device (see linreg_data.h).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "linreg_data.h"

namespace nb {

// Fills d_x, d_y (n floats each, storage order) on `stream`. Uses a temporary device buffer of
// n (rounded up to even) floats for the normals, freed before returning. Deterministic for a seed.
void generate_linreg(float* d_x, float* d_y, size_t n, uint64_t seed, cudaStream_t stream = nullptr);

// Bytes of device memory generate_linreg + the two arrays need at peak (for the fits-in-memory check).
size_t linreg_generate_bytes(size_t n);

// Throws Error(kExitOutOfMemory, "needs X GiB of GPU memory, Y GiB free") when `bytes` (plus a
// small margin) exceeds cudaMemGetInfo's free memory. Call before allocating.
void require_free_memory(size_t bytes, const char* what);

}  // namespace nb
