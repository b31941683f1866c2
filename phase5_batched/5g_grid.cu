// phase5_batched/5g_grid.cu — rung 5g's translation unit: the grid kernel (5g_grid.cuh) and the entry
// points the trainer calls (5g_grid.h).
#include "5g_grid.cuh"

namespace nb {
namespace mlp {

GridPlan grid_rung_plan(ClusterParams& p, int requested_blocks, int device) { return plan_grid(p, requested_blocks, device); }

void grid_rung_launch(const GridPlan& pl, const ClusterParams& p, cudaStream_t st) { launch_grid(pl, p, st); }

KernelCost grid_rung_cost(const ClusterParams& p, const GridPlan& pl) { return grid_step_cost(p, pl); }

int grid_rung_units(const ClusterParams& p, int requested_blocks, int device, int* blocks) {
  ClusterParams q = p;
  try {
    return grid_units(q, requested_blocks, device, blocks);
  } catch (const Error& e) {
    if (e.code != kExitUsage) throw;
    return 0;
  }
}

}  // namespace mlp
}  // namespace nb
