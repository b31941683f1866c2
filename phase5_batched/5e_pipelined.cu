// phase5_batched/5e_pipelined.cu — rung 5e's translation unit: the pipelined persistent kernel's instances
// (5e_pipelined.cuh) and the entry points the trainer calls (5e_pipelined.h).
#include "5e_pipelined.cuh"

namespace nb {
namespace mlp {

PersistPlan pipelined_rung_plan(PersistParams& p, int requested_blocks, int device, bool specialize) {
  return plan_pipelined(p, requested_blocks, device, specialize);
}

void pipelined_rung_launch(const PersistPlan& pl, const PersistParams& p, cudaStream_t st) { launch_pipelined(pl, p, st); }

// The same flops and bytes as rung 5c's step (the same exchanges, the same arithmetic).
KernelCost pipelined_rung_cost(const PersistParams& p, const PersistPlan& pl) { return persist_step_cost(p, pl); }

}  // namespace mlp
}  // namespace nb
