// phase5_batched/launch_plan.h — `--launch auto`: which rung trains a model, decided from what the
// one-launch rungs' plans say of it (rungs.h asks them; the choice itself needs no GPU).
// fp32 models with two hidden layers (W1's kind): the pipelined kernel (5e) where its plan fuses the
// first layer's update with the next step's first layer (one first-layer unit a block, batch <= 32),
// else the persistent kernel (5c) where its plan gives every block one first-layer unit (batch <= 64).
// Measured on W1's model (H200): batch 32, 5e 10.03 / 5c 10.76 / the graph path 36.2 us a step
// (w1-pipelined.json, w1-persistent.json, batch-sweep-b32.json at 465b2a2); batch 64, 5c 21.38 / 5e
// 24.27 / the graph path 41.36 with PDL off (logs/check_0cd24e0/leads/), 38.34 with it at 465b2a2.
// fp16 SGD models without dropout (W2's kind): the W2 width sweep's rule (bench_frameworks.sh stage w2
// at 7d20915, h = 256 ... 1,024 again at f620a8f, 2,048 ... 8,192 at fdd6d02: profiles/nvidia-h200/
// phase5_batched__w2-h<h>-{own,grid,cluster}.json): the cluster kernel (5d) where the model fits one
// cluster (h = 128); the grid kernel (5g) where its plan gives every hidden layer one 16-unit tile a
// block on at most half the GPU's SMs (h = 256 ... 1,024 on 132 SMs); past that the graph of own
// GEMMs wins: at h = 2,048 (128 blocks, one an SM) 95.35 against 107.46 us a step, at 4,096 and 8,192
// (32 or 64 units a block, rows read through L2) 196.77 against 381.58 and 559.71 against 1,479
// (w2-h<h>-{own,grid}.json, ae47833).
// Everything else (more hidden layers in fp32, bigger batches, cuBLASLt) takes the graph path.
#pragma once
#include <string>

namespace nb {
namespace {

struct LaunchFacts {
  bool one_launch_legal = false;  // fp16, SGD, no dropout, own GEMMs: what both W2 kernels need of the options
  bool cluster_fits = false;      // 5d's plan accepts the model (one cluster of up to 16 blocks)
  int grid_units = 0;             // 5g's plan: the most units of a hidden layer a block holds (0: refused)
  bool pipelined_fuses = false;   // 5e's plan accepts the model and fuses the first layer's update (fp32)
  bool persist_one_unit = false;  // 5c's plan accepts the model with one first-layer unit a block (fp32)
  int grid_blocks = 0;            // 5g's plan: its blocks (one an SM)
  int sms = 0;                    // the GPU's SMs
};

struct LaunchChoice {
  std::string launch;  // a rung's --launch name
  std::string why;     // one line for the console and the record
};

inline LaunchChoice choose_launch(const LaunchFacts& f) {
  if (f.pipelined_fuses)
    return {"pipelined", "the pipelined kernel (5e) fuses the first layer's update with the next step (one unit a block)"};
  if (f.persist_one_unit) return {"persistent", "the persistent kernel (5c) holds one first-layer unit a block"};
  if (!f.one_launch_legal)
    return {"graph", "no one-launch kernel's plan fits: W1's kind needs one first-layer unit a block and a batch of at "
                     "most 64, W2's kind fp16, SGD, no dropout and own GEMMs"};
  if (f.cluster_fits) return {"cluster", "the model fits one thread-block cluster (5d)"};
  if (f.grid_units == 16 && 2 * f.grid_blocks <= f.sms)
    return {"grid", "the grid kernel (5g) holds one 16-unit tile of every hidden layer a block, on at most half the SMs"};
  if (f.grid_units == 16)
    return {"graph", "the grid kernel (5g) would span " + std::to_string(f.grid_blocks) +
                         " blocks, more than half the SMs, where the graph step is faster"};
  if (f.grid_units > 16)
    return {"graph", "the grid kernel (5g) would hold " + std::to_string(f.grid_units) +
                         " units of a hidden layer a block, where the graph step is faster"};
  return {"graph", "neither one-launch W2 kernel runs this model"};
}

}  // namespace
}  // namespace nb
