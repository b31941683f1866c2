// phase5_batched/p5_options.h — phase 5's options: the MLP flags both MLP phases share (MlpOptions,
// common/mlp/mlp_common.h) and the ones only this phase has. main.cu registers and parses them
// (--gemm among the shared flags, the others after the common ones); rungs.h's check_rung refuses
// the combinations a rung cannot run.
#pragma once
#include <string>

#include "mlp/mlp_common.h"

namespace nb {
namespace {

struct P5Options : mlp::MlpOptions {
  std::string gemm = "own";        // own | cublas
  std::string launch = "graph";    // a rung's --launch name (rungs.h), or auto (launch_plan.h)
  std::string launch_auto;         // --launch auto: why it chose the rung now in `launch` (empty otherwise)
  int blocks = 0;                  // blocks of the persistent kernel or of a cluster (0 = auto)
  bool breakdown = false;          // time the parts of a one-launch kernel's step
  bool generic_kernel = false;     // the one-launch kernels' generic instance even for W1
  std::string backward = "auto";   // auto | fused (one pass a layer, fp16) | paired | branched
  std::string pdl = "on";          // programmatic dependent launch of the graph step's kernels
  std::string fp32_gemm = "auto";  // auto | tile | tf32x3 | fma | no-digits (fp32_gemm.h)
  std::string fp16_gemm = "auto";  // auto | tile | mma | wgmma (fp32_gemm.h)
  std::string fp16_stream = "auto";  // auto | regs | staged | on | off: forwards of <= 32 rows on GEMM step 8 (fp32_gemm.h)
  std::string handover = "cluster";  // cluster | global: how step 8's K slices and 5b's row slices hand over
  std::string l2_evict = "auto";     // auto | on | off: the fused passes' fp32 masters evict-first in L2
  std::string fused_warps = "auto";  // auto (4) | 4 | 8: warps a block of 5b's passes with a backward-data product
  std::string last_pass = "auto";    // auto | tail | kernel: the last layer's fused pass in softmax-CE's cluster, or its own
  std::string next_forward = "auto";  // auto | pass | kernel: the next step's first forward in the first layer's fused pass, or its own kernel
  std::string row_chain = "auto";    // auto | on | off: two hidden layers' middle in one kernel (5a_row_chain.cuh)
};

}  // namespace
}  // namespace nb
