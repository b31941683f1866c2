// phase5_batched/5f_cluster32.h — rung 5f as the trainer sees it: the whole fp32 model (two hidden layers,
// Adam, dropout) in ONE thread-block cluster, the 784-wide layer and its weight gradient on tensor cores
// at fp32 accuracy (5f_cluster32.cuh). It takes rung 5c's parameters (PersistParams; the exchange
// buffers stay unused: the activations travel through distributed shared memory) and returns the same
// plan type (blocks = the cluster's size, nc / nj = units a block); its kernel and host code are compiled
// in a translation unit of their own (5f_cluster32.cu).
//
//   PersistParams p = ...;                                  // the trainer fills it, as for 5c
//   PersistPlan pl = cluster32_rung_plan(p, blocks, device, true);  // refuses (exit 2) what cannot run
//   cluster32_rung_launch(pl, p, stream);                   // one cluster launch: p.count steps
#pragma once
#include <cuda_runtime.h>

#include "5c_persistent.h"

namespace nb {
namespace mlp {

constexpr int kC32Threads = 512;
constexpr int kC32MaxBlocks = 16;  // the largest cluster an H100 runs (a non-portable size)
constexpr int kC32Units = 8;       // first-layer units a block holds at most (one n8 tile of the MMAs)
constexpr int kC32MaxRows = 64;    // the batch, padded to 32 or 64 rows
constexpr int kC32MaxClasses = 12; // the last layer's width (a half-warp's lanes, dz3 broadcast in registers)

// The parts of a step that --breakdown times on this rung (cycles of block 0, thread 0).
constexpr int kC32Segments = 8;
inline const char* cluster32_segment_name(int i) {
  static const char* names[kC32Segments] = {
      "A: first layer on tensor cores (3xTF32), bias, ReLU, dropout, h1 sent to every block",
      "X1: wait for h1 (meanwhile: the previous step's W2 rows, W2 column copy and b2; h2's mask)",
      "B: second layer (own units), h2 sent to every block",
      "X2: wait for h2 (meanwhile: the previous step's W3 and b3; the next h1 mask)",
      "C: last layer, softmax cross-entropy, dz3 and dz2 (in every block)",
      "D: dz1 for the own first-layer units",
      "E: own W1 rows' gradient on tensor cores (3xTF32) and Adam, b1",
      "F: the next batch in shared memory (W1's: its cp.async waited for; the others': from registers)"};
  return names[i];
}

struct p5_cluster32 {};  // tag for the efficiency table (the kernel's name contains it)

PersistPlan cluster32_rung_plan(PersistParams& p, int requested_blocks, int device, bool specialize);
void cluster32_rung_launch(const PersistPlan& pl, const PersistParams& p, cudaStream_t st);
KernelCost cluster32_rung_cost(const PersistParams& p, const PersistPlan& pl);

}  // namespace mlp
}  // namespace nb
