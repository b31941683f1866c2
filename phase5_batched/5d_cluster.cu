// phase5_batched/5d_cluster.cu — rung 5d's translation unit: the cluster kernel (5d_cluster.cuh) and the
// entry points the trainer calls (5d_cluster.h).
#include "5d_cluster.cuh"

namespace nb {
namespace mlp {

ClusterPlan cluster_rung_plan(ClusterParams& p, int requested_blocks, int device) {
  return plan_cluster(p, requested_blocks, device);
}

void cluster_rung_launch(const ClusterPlan& pl, const ClusterParams& p, cudaStream_t st) { launch_cluster(pl, p, st); }

KernelCost cluster_rung_cost(const ClusterParams& p, const ClusterPlan& pl) { return cluster_step_cost(p, pl); }

bool cluster_rung_fits(const ClusterParams& p, int device) {
  ClusterParams q = p;
  try {
    plan_cluster(q, 0, device);
  } catch (const Error& e) {
    if (e.code != kExitUsage) throw;
    return false;
  }
  return true;
}

}  // namespace mlp
}  // namespace nb
