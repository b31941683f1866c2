// phase5_batched/5g_pipelined_tc.h — rung 5g as the trainer sees it: rung 5e's kernel with its fused W1
// pass (the W1 update of step t and the first layer of step t+1) on tensor cores (5g_pipelined_tc.cuh).
// Same parameters as 5c and 5e (PersistParams), the same split of the units over blocks; compiled in a
// translation unit of its own (5g_pipelined_tc.cu).
//
//   PersistParams p = ...;                                      // the trainer fills it, as for 5e
//   PersistPlan pl = pipelined_tc_rung_plan(p, blocks, device, true);  // refuses (exit 2) what cannot run
//   pipelined_tc_rung_launch(pl, p, stream);                    // one cooperative launch: p.count steps
#pragma once
#include <cuda_runtime.h>

#include "5c_persistent.h"

namespace nb {
namespace mlp {

// The parts of a step that --breakdown times on this rung (cycles of block 0, thread 0): 5e's.
constexpr int kTcSegments = 7;
inline const char* tc_segment_name(int i) {
  static const char* names[kTcSegments] = {
      "X1a: the previous step's own W2 rows, b2 and W3/b3 slice updated, the next batch's fetch, h2's mask (block barrier)",
      "X1b: wait for h1 (what is left of it)",
      "B: second layer (own units), publish h2",
      "X2: wait for h2, the W2 column slice and the W3/b3 words (meanwhile: the next h1 mask, the next batch as halves)",
      "C: last layer (partial logits), softmax cross-entropy and dz2 (5c's C1, C2)",
      "dz1 for own units (and the batch loss)",
      "W1 update fused with the next step's first layer, both products on tensor cores, publish the next h1"};
  return names[i];
}

struct p5_pipelined_tc {};  // tag for the efficiency table (the kernel's name contains it)

// What the rung runs: one first-layer unit a block, a batch of at most 32 rows (two m16 tiles), an
// input width that is a multiple of 16 (whole k16 tiles) and at most 16 x 16 x kTcTilesPerWarp
// (each of the 16 warps owns at most that many tiles). Anything else is refused with exit 2.
constexpr int kTcMaxBatch = 32;
constexpr int kTcTilesPerWarp = 4;
constexpr int kTcMaxWidth = 16 * 16 * kTcTilesPerWarp;
// The weights' planes are of w / 16 (a fixed power of two): |w| < 2^19 stays inside fp16's range.
constexpr float kTcWeightScale = 0x1p-4f;

PersistPlan pipelined_tc_rung_plan(PersistParams& p, int requested_blocks, int device, bool specialize);
void pipelined_tc_rung_launch(const PersistPlan& pl, const PersistParams& p, cudaStream_t st);
KernelCost pipelined_tc_rung_cost(const PersistParams& p, const PersistPlan& pl);

}  // namespace mlp
}  // namespace nb
