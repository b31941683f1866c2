// common/mlp/gemm/3_split_k.cuh — the GEMM ladder, step 3: split-K. Slices of K run in separate
// blocks; the last block of a tile adds the partials in slice order (deterministic sums). Past 16
// slices (phase 5's weight gradients at large batches, K = batch over a few output tiles) the adding
// takes two levels, 16 slices a block at most: the last block of each group of 16 adds its group,
// the last group adds the groups, so no block reads more than 16 partial tiles and the order of the
// sums stays fixed. Prediction (5a_graph_step.cuh's plan_splits_p5): a 64 x 128 x 8,192 weight
// gradient from 25.6 us (16 slices of 16 k-tiles) to about 6-7 us (128 of 2). Measured (H200):
// 21.7 us (profiles/nvidia-h200/logs/gemm_737d448/gemm-b8192.log).
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

// A slice's arrival after its partials are stored: a fence, then one counter add for the block;
// true in every thread of the last of `splits` slices to arrive, which may then read the others'
// partials (a second fence). Every thread of the block must call it.
__device__ __forceinline__ bool splitk_arrive_last(unsigned* cnt, int splits) {
  __shared__ bool s_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(cnt, 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!s_last) return false;
  __threadfence();
  return true;
}

// Split-K fix-up of kSubs kBM x kBN fp32 tiles stacked in shared memory (sub-tile j at c + j * kBM *
// kLdc, row stride kLdc; the first `subs` of them inside the product), computed by slice `split`
// of `splits`, in one hand-over: every sub-tile goes to its workspace slot (ws: per tile, `splits`
// slots of kBM * kBN floats; sub-tile j's tile is tile0 + j * tile_step), and the last block to
// finish (tile0's atomic counter, after a fence) adds all slots in slice order into c, resets the
// counter and returns true; the others return false. One fence, one counter and one round of
// loads for all sub-tiles: step 5's 64-row block hands its two 32-row halves over at once, where
// two hand-overs in a row made the last block wait for two fences and two counters. kVec: float4
// traffic and up to 16 float4 loads a thread issued before they are added (the same order, so the
// same sums). Every thread of the block (NT of them) must call it.
// (stride: slots a tile in ws, when the slices handed over are a group of a longer split (the
// two-level form below); counter: the counter to count on, when not tile0's.)
template <int NT, bool kVec, int kSubs = 1>
__device__ bool splitk_fixup_rows(float* c, float* ws, unsigned* counters, int tile0, int tile_step, int subs,
                                  int split, int splits, int stride = 0, unsigned* counter = nullptr) {
  constexpr int kTile = kBM * kBN;
  constexpr int kE4 = kTile / 4 / NT;  // float4 of a sub-tile per thread: 2 (256 threads), 4 (128)
  const int ld = stride > 0 ? stride : splits;
  unsigned* cnt = counter ? counter : counters + tile0;
  auto slot = [&](int j, int z) { return ws + (static_cast<size_t>(tile0 + j * tile_step) * ld + z) * kTile; };
  if constexpr (kVec) {
#pragma unroll
    for (int j = 0; j < kSubs; ++j)
      if (j < subs)
#pragma unroll
        for (int i = 0; i < kE4; ++i) {
          const int e = (threadIdx.x + i * NT) * 4;
          reinterpret_cast<float4*>(slot(j, split))[e / 4] =
              *reinterpret_cast<const float4*>(&c[j * kBM * kLdc + (e / kBN) * kLdc + e % kBN]);
        }
  } else {
    for (int j = 0; j < subs; ++j)
      for (int e = threadIdx.x; e < kTile; e += NT) slot(j, split)[e] = c[j * kBM * kLdc + (e / kBN) * kLdc + e % kBN];
  }
  if (!splitk_arrive_last(cnt, splits)) return false;
  if constexpr (kVec) {
    constexpr int kN = kSubs * kE4;  // float4 a thread adds a slice
    constexpr int kG = kN < 16 ? 16 / kN : 1;  // slices loaded per round
    float4 s[kN];
#pragma unroll
    for (int i = 0; i < kN; ++i) s[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int z0 = 0; z0 < splits; z0 += kG) {
      float4 v[kG][kN];
#pragma unroll
      for (int g = 0; g < kG; ++g)
#pragma unroll
        for (int i = 0; i < kN; ++i) {
          const int j = i / kE4;
          v[g][i] = (z0 + g < splits && j < subs)
                        ? __ldcg(reinterpret_cast<const float4*>(slot(j, z0 + g)) + threadIdx.x + (i % kE4) * NT)
                        : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
      for (int g = 0; g < kG; ++g)
        if (z0 + g < splits)
#pragma unroll
          for (int i = 0; i < kN; ++i) s[i].x += v[g][i].x, s[i].y += v[g][i].y, s[i].z += v[g][i].z, s[i].w += v[g][i].w;
    }
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const int j = i / kE4, e = (threadIdx.x + (i % kE4) * NT) * 4;
      if (j < subs) *reinterpret_cast<float4*>(&c[j * kBM * kLdc + (e / kBN) * kLdc + e % kBN]) = s[i];
    }
  } else {
    for (int j = 0; j < subs; ++j)
      for (int e = threadIdx.x; e < kTile; e += NT) {
        float s = 0.f;
        for (int z = 0; z < splits; ++z) s += __ldcg(slot(j, z) + e);
        c[j * kBM * kLdc + (e / kBN) * kLdc + e % kBN] = s;
      }
  }
  if (threadIdx.x == 0) *cnt = 0u;  // ready for the next launch
  __syncthreads();
  return true;
}

// The fix-up of one kBM x kBN tile `c` (splitk_fixup_rows with one sub-tile): the 32 x 64 kernel's.
template <int NT, bool kVec>
__device__ bool splitk_fixup(float* c, float* ws, unsigned* counters, int tile, int split, int splits) {
  return splitk_fixup_rows<NT, kVec>(c, ws, counters, tile, 0, 1, split, splits);
}

// The two-level fix-up, for products planned past kFixupGroup slices (an instance of its own, so
// no other kernel carries its code), made of two one-level hand-overs: the slices of each group of
// kFixupGroup hand over to the last of them as a split-K of their own (their slots within the
// tile's, the group's counter), which then hands the group's sum over to the last group (the
// groups' slots after every tile's slices, the tile's last counter). Workspace and counters:
// ws_floats() and counter_slots() of the problem, laid out by its 32 x 64 tiles (`tiles` of them,
// each with `splits` slots and `groups` + 1 counters); steps 5-7's 64-row tiles hand both 32-row
// sub-tiles over at once, on their first sub-tile's counters. The order of the sums is fixed
// (slices in order within a group, then groups in order): deterministic.
template <int NT, bool kVec, int kSubs = 1>
__device__ bool splitk_fixup_rows_two_level(float* c, float* ws, unsigned* counters, int tile0, int tile_step,
                                            int subs, int tiles, int split, int splits) {
  constexpr size_t kTile = static_cast<size_t>(kBM) * kBN;
  const int groups = fixup_groups(splits), g = split / kFixupGroup, first = g * kFixupGroup;
  const int count = splits - first < kFixupGroup ? splits - first : kFixupGroup;
  unsigned* cnt = counters + static_cast<size_t>(tile0) * (groups + 1);
  if (!splitk_fixup_rows<NT, kVec, kSubs>(c, ws + first * kTile, counters, tile0, tile_step, subs, split - first, count,
                                          splits, cnt + g))
    return false;
  float* group_slots = ws + static_cast<size_t>(tiles) * splits * kTile;
  return splitk_fixup_rows<NT, kVec, kSubs>(c, group_slots, counters, tile0, tile_step, subs, g, groups, groups,
                                            cnt + groups);
}

// The 32 x 64 kernel's (one sub-tile).
template <int NT, bool kVec>
__device__ bool splitk_fixup_two_level(float* c, float* ws, unsigned* counters, int tile, int tiles, int split,
                                       int splits) {
  return splitk_fixup_rows_two_level<NT, kVec>(c, ws, counters, tile, 0, 1, tiles, split, splits);
}

}  // namespace mlp
}  // namespace nb
