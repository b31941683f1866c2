// phase5_batched/onchip_softmax_loss.cuh — the last layer's loss where every block repeats it (5c, 5e,
// 5f): softmax cross-entropy of one batch row held by a half-warp (one class a lane), and the batch's
// mean loss by one warp. 5d's (a warp a row, lanes over up to 8 x 16 classes; the mean in double) is
// its own and stays in 5d_cluster.cuh.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace nb {
namespace mlp {

// Row `half` of the warp's two, class j = lane & 15 of it: z the logit (-inf where !on: a class past C
// or a row past the batch), label() the row's label (0 past the batch; read once the sums are done),
// inv = 1 / B. Max and sum by shuffle trees over the half-warp (fixed order). Returns
// dz = (softmax - onehot) / B (0 where !on), and lse and z_y (every lane): the row's cross-entropy is
// lse - z_y, left to the one lane that stores it (no lane holds it in a register across that branch).
struct SoftmaxRow {
  float dz, lse, zy;
};
template <class Label>
__device__ __forceinline__ SoftmaxRow softmax_xent_half_warp(float z, bool on, int half, int j, Label label, float inv) {
  float mx = z;
#pragma unroll
  for (int w = 8; w >= 1; w >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, w));
  float sum = on ? expf(z - mx) : 0.f;
#pragma unroll
  for (int w = 8; w >= 1; w >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, w);
  const float lse = mx + logf(sum);
  const int y = label();
  const float zy = __shfl_sync(0xffffffffu, z, (half << 4) + y);
  return {on ? (expf(z - lse) - (j == y ? 1.f : 0.f)) * inv : 0.f, lse, zy};
}

// The batch's mean of the rows' losses rloss[0 .. B), by one warp: lane sums, then a fixed shuffle
// tree; lane 0 stores it as step s's loss and flags a loss that is not finite (the earliest such step).
__device__ __forceinline__ void batch_mean_loss(const float* rloss, int B, int lane, float* step_loss,
                                                unsigned long long* bad_step, int64_t s) {
  float part_sum = 0.f;
  for (int r = lane; r < B; r += 32) part_sum += rloss[r];
#pragma unroll
  for (int w = 16; w >= 1; w >>= 1) part_sum += __shfl_xor_sync(0xffffffffu, part_sum, w);
  if (lane == 0) {
    const float mean = part_sum / static_cast<float>(B);
    step_loss[s] = mean;
    if (!isfinite(mean)) atomicMin(bad_step, static_cast<unsigned long long>(s));
  }
}

}  // namespace mlp
}  // namespace nb
