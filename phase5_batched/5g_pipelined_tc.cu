// phase5_batched/5g_pipelined_tc.cu — rung 5g's translation unit: the kernel's instances (W1's and the
// generic one, 5g_pipelined_tc.cuh) and the entry points the trainer calls (5g_pipelined_tc.h).
#include "5g_pipelined_tc.cuh"

namespace nb {
namespace mlp {

PersistPlan pipelined_tc_rung_plan(PersistParams& p, int requested_blocks, int device, bool specialize) {
  return plan_pipelined_tc(p, requested_blocks, device, specialize);
}

void pipelined_tc_rung_launch(const PersistPlan& pl, const PersistParams& p, cudaStream_t st) {
  launch_pipelined_tc(pl, p, st);
}

// The same flops and bytes as rung 5c's step (the same exchanges, the same arithmetic).
KernelCost pipelined_tc_rung_cost(const PersistParams& p, const PersistPlan& pl) { return persist_step_cost(p, pl); }

}  // namespace mlp
}  // namespace nb
