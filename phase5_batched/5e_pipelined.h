// phase5_batched/5e_pipelined.h — rung 5e as the trainer sees it: the persistent kernel of rung 5c with
// fewer dependent phases a step (5e_pipelined.cuh). It takes the same parameters as 5c (PersistParams)
// and the same plan (the split of the units over blocks); its kernel and host code are compiled in a
// translation unit of their own (5e_pipelined.cu).
//
//   PersistParams p = ...;                                     // the trainer fills it, as for 5c
//   PersistPlan pl = pipelined_rung_plan(p, blocks, device, true);   // refuses (exit 2) what cannot run
//   pipelined_rung_launch(pl, p, stream);                      // one cooperative launch: p.count steps
#pragma once
#include <cuda_runtime.h>

#include "5c_persistent.h"

namespace nb {
namespace mlp {

// The parts of a step that --breakdown times on this rung (cycles of block 0, thread 0).
constexpr int kPipeSegments = 7;
inline const char* pipe_segment_name(int i) {
  static const char* names[kPipeSegments] = {
      "X1a: the next batch's fetch, h2's mask (other splits: and the previous step's W2 rows, b2, W3/b3 slice) (block barrier)",
      "X1b: wait for h1 and the own W2 rows (what is left of it)",
      "B: second layer (own units), publish h2",
      "X2: wait for h2 and the W3/b3 words (other splits: and the W2 column slice; meanwhile: the next h1 mask)",
      "C: last layer (partial logits), softmax cross-entropy and dz2 (5c's C1, C2)",
      "dz1 for own units (and the batch loss)",
      "W1 update fused with the next step's first layer (idle warps: the W2 column, W3/b3 slice, b2), publish the next h1"};
  return names[i];
}

struct p5_pipelined {};  // tag for the efficiency table (the kernel's name contains it)

// Does a split run the fused W1 update + next first layer? It keeps a lane's sums for half the batch in
// registers: one first-layer unit a block (NC, the kernel's padded width) and a batch of at most 32
// rows. Other splits run 5c's two passes in the same place of the step.
__host__ __device__ constexpr bool pipe_fuses(int NC, int B) { return NC == 1 && B <= 32; }
inline bool pipelined_fuses_first_layer(const PersistParams& p, const PersistPlan& pl) { return pipe_fuses(pl.NC, p.B); }

PersistPlan pipelined_rung_plan(PersistParams& p, int requested_blocks, int device, bool specialize);
void pipelined_rung_launch(const PersistPlan& pl, const PersistParams& p, cudaStream_t st);
KernelCost pipelined_rung_cost(const PersistParams& p, const PersistPlan& pl);

}  // namespace mlp
}  // namespace nb
