// phase5_batched/launch_plan.h — `--launch auto`: which rung trains a model, decided from what the
// one-launch rungs' plans say of it (rungs.h asks them; the choice itself needs no GPU).
// The rule is the W2 width sweep's (H200, bench_frameworks.sh stage w2 at 7d20915,
// profiles/nvidia-h200/phase5_batched__w2-h<h>-{own,grid,cluster}.json): the cluster kernel (5d) is
// the fastest path where the model fits one cluster (h = 128); the grid kernel (5g) wherever its plan
// gives every hidden layer one 16-unit tile a block (h = 256 ... 2,048 on 132 SMs); past that (4,096,
// 8,192: 32 or 64 units a block, rows read through L2) the graph of own GEMMs wins. Models the two
// kernels refuse (fp32, Adam, dropout, batch > 32, cuBLASLt) take the graph path.
#pragma once
#include <string>

namespace nb {
namespace {

struct LaunchFacts {
  bool one_launch_legal = false;  // fp16, SGD, no dropout, own GEMMs: what both kernels need of the options
  bool cluster_fits = false;      // 5d's plan accepts the model (one cluster of up to 16 blocks)
  int grid_units = 0;             // 5g's plan: the most units of a hidden layer a block holds (0: refused)
};

struct LaunchChoice {
  std::string launch;  // a rung's --launch name
  std::string why;     // one line for the console and the record
};

inline LaunchChoice choose_launch(const LaunchFacts& f) {
  if (!f.one_launch_legal)
    return {"graph", "the one-launch W2 kernels need fp16, SGD, no dropout and own GEMMs"};
  if (f.cluster_fits) return {"cluster", "the model fits one thread-block cluster (5d)"};
  if (f.grid_units == 16) return {"grid", "the grid kernel (5g) holds one 16-unit tile of every hidden layer a block"};
  if (f.grid_units > 16)
    return {"graph", "the grid kernel (5g) would hold " + std::to_string(f.grid_units) +
                         " units of a hidden layer a block, where the graph step is faster"};
  return {"graph", "neither one-launch W2 kernel runs this model"};
}

}  // namespace
}  // namespace nb
