// phase5_batched/lt_bias_grad.cuh — the cuBLASLt path's bias gradients (`--gemm cublas`): db[c] = the sum
// over the batch of dZ[r][c], for each of a layer's columns, beside cuBLASLt's weight gradient.
//
// The graph path sums dZ's columns in its epilogues; the cuBLASLt path has no epilogue of ours to put
// them in, so they are a kernel of their own. One thread a column, rows in order (phase 4's
// bias_grad_kernel), is one block of 128 threads for W1's first layer: at batch 8,192 each thread
// walked 8,192 dependent rows, 142 us a call, three calls a step, two thirds of the cuBLASLt path's
// 653 us step on an H100 (the kernel table of the batch sweep's record of bf146b3). Here the rows
// are cut into slices of kLtBgRows: a block takes 32 columns (a lane each, so a warp reads 32
// consecutive values of a row) of one slice, its 8 warps every 8th row of it, and adds the 8 warps'
// sums in warp order; a second kernel adds the slices' sums in slice order (skipped where one slice
// holds the batch). The order is fixed by the shape alone: the same bits every run.
// Predicted from that table: the step ~230 us. Measured (H100, cecac83,
// profiles/nvidia-h100-80gb-hbm3/logs/ltbias_cecac83/): 657.9 -> 244.0 us a step in fp32, 512.2 ->
// 128.3 in fp16 (phase5_batched__batch-sweep-b8192-cublaslt-{fp32,fp16}.json).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "check.cuh"
#include "mlp/gemm/0_problem.cuh"  // to_f

namespace nb {
namespace mlp {

constexpr int kLtBgRows = 256;    // rows a slice (a block's 8 warps, 32 rows each)
constexpr int kLtBgThreads = 256;  // 8 warps of 32 columns

// Slices of a batch of `rows` rows, and the floats of the workspace their sums take (cols a slice).
inline int lt_bias_grad_slices(int rows) { return (rows + kLtBgRows - 1) / kLtBgRows; }
inline size_t lt_bias_grad_ws_floats(int rows, int cols) {
  const int s = lt_bias_grad_slices(rows);
  return s > 1 ? static_cast<size_t>(s) * cols : 0;
}

// Block (x, y): columns 32x .. 32x + 31 of rows [kLtBgRows y, kLtBgRows (y + 1)); the sum into
// out[y * cols + c].
template <class T>
__global__ void __launch_bounds__(kLtBgThreads) lt_bias_grad_slices_kernel(const T* __restrict__ dz, int rows, int cols,
                                                                            float* __restrict__ out) {
  __shared__ float warp_sum[kLtBgThreads / 32][32];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int c = blockIdx.x * 32 + lane, r0 = blockIdx.y * kLtBgRows;
  const int r1 = min(rows, r0 + kLtBgRows);
  float s = 0.f;
  if (c < cols)
    for (int r = r0 + w; r < r1; r += kLtBgThreads / 32) s += to_f(dz[static_cast<size_t>(r) * cols + c]);
  warp_sum[w][lane] = s;
  __syncthreads();
  if (w == 0 && c < cols) {
    float t = warp_sum[0][lane];
#pragma unroll
    for (int i = 1; i < kLtBgThreads / 32; ++i) t += warp_sum[i][lane];
    out[static_cast<size_t>(blockIdx.y) * cols + c] = t;
  }
}

// db[c] = the slices' sums of column c, in slice order.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) lt_bias_grad_sum_kernel(const float* __restrict__ part, int slices, int cols,
                                                                     float* __restrict__ db) {
  const int c = blockIdx.x * kThreads + threadIdx.x;
  if (c >= cols) return;
  float t = part[c];
  for (int s = 1; s < slices; ++s) t += part[static_cast<size_t>(s) * cols + c];
  db[c] = t;
}

// db (cols floats) from dz [rows][cols]; ws: lt_bias_grad_ws_floats(rows, cols) floats (none where
// one slice holds the batch).
template <class T>
inline void launch_lt_bias_grad(const T* dz, int rows, int cols, float* db, float* ws, cudaStream_t st) {
  const int slices = lt_bias_grad_slices(rows);
  const dim3 grid((cols + 31) / 32, slices);
  lt_bias_grad_slices_kernel<T><<<grid, kLtBgThreads, 0, st>>>(dz, rows, cols, slices > 1 ? ws : db);
  CHECK_LAUNCH();
  if (slices > 1) {
    constexpr int kSumThreads = 128;
    lt_bias_grad_sum_kernel<kSumThreads><<<(cols + kSumThreads - 1) / kSumThreads, kSumThreads, 0, st>>>(ws, slices, cols, db);
    CHECK_LAUNCH();
  }
}

}  // namespace mlp
}  // namespace nb
