// phase5_batched/5c_persistent.cu — rung 5c's translation unit: the persistent kernel's instances
// (5c_persistent.cuh) and the entry points the trainer calls (5c_persistent.h).
#include "5c_persistent.cuh"

namespace nb {
namespace mlp {

PersistPlan persistent_rung_plan(PersistParams& p, int requested_blocks, int device, bool specialize) {
  return plan_persistent(p, requested_blocks, device, specialize);
}

void persistent_rung_launch(const PersistPlan& pl, const PersistParams& p, cudaStream_t st) {
  launch_persistent(pl, p, st);
}

KernelCost persistent_rung_cost(const PersistParams& p, const PersistPlan& pl) { return persist_step_cost(p, pl); }

}  // namespace mlp
}  // namespace nb
