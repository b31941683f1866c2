// phase5_batched/5f_cluster32.cu — rung 5f's translation unit: the fp32 cluster kernel's instances
// (5f_cluster32.cuh) and the entry points the trainer calls (5f_cluster32.h).
#include "5f_cluster32.cuh"

namespace nb {
namespace mlp {

PersistPlan cluster32_rung_plan(PersistParams& p, int requested_blocks, int device, bool specialize) {
  return plan_cluster32(p, requested_blocks, device, specialize);
}

void cluster32_rung_launch(const PersistPlan& pl, const PersistParams& p, cudaStream_t st) { launch_cluster32(pl, p, st); }

KernelCost cluster32_rung_cost(const PersistParams& p, const PersistPlan& pl) { return cluster32_step_cost(p, pl); }

}  // namespace mlp
}  // namespace nb
