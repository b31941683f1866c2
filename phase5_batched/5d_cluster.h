// phase5_batched/5d_cluster.h — rung 5d as the trainer sees it: the cluster kernel's parameters, its
// plan, and three entry points. The kernel and its host code live in 5d_cluster.cuh, compiled in a
// translation unit of their own (5d_cluster.cu), so the trainer's file does not compile them.
//
//   ClusterParams p = ...;                               // the trainer fills it
//   ClusterPlan pl = cluster_rung_plan(p, blocks, device);  // refuses (exit 2) what cannot run
//   cluster_rung_launch(pl, p, stream);                  // one cluster launch: p.count steps
//   KernelCost c = cluster_rung_cost(p, pl);             // flops and bytes of one step
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "mlp/mlp_common.h"  // KernelCost

namespace nb {
namespace mlp {

constexpr int kClThreads = 512;
constexpr int kClWarps = kClThreads / 32;
constexpr int kClMaxLayers = 5;   // weight matrices: at most 4 hidden layers
constexpr int kClRows = 32;       // the batch, padded to one m32 tile (so --batch <= 32)
constexpr int kClMaxChunks = 4;   // next batch in registers: 16-byte chunks per thread (B * D <= 32 KiB)
constexpr int kClMaxBlocks = 16;  // the largest cluster an H100 runs (non-portable size)
constexpr int kClLdT = kClRows + 8;  // row stride (halves) of the transposed first-layer dZ

// Shapes and shared-memory offsets (bytes) of one layer, the same in every block.
struct ClusterLayer {
  int in = 0, out = 0;
  bool rep = false;       // the last layer: every block holds all rows
  int U = 0, Upad = 0;    // rows held per block (own units, or all), padded to 8
  int Kpad = 0, ldr = 0;  // in padded to 16; row stride (halves) of the fp16 rows and of this layer's input H
  int Uc = 0, Ucpad = 0;  // column copy (l >= 1): the previous layer's units per block, padded to 8
  int Npad = 0, ldc = 0;  // out padded to 16; row stride (halves) of the fp16 columns and of dZ_l
  size_t wr16 = 0, wr32 = 0, bias = 0, wc16 = 0, wc32 = 0;
  size_t act = 0;         // this layer's input H_{l-1}: [32][ldr] halves (l >= 1; two of them, by step parity, for l = 1)
  size_t dz = 0;          // dZ_l: [32][ldc] (l >= 1), [Upad][kClLdT] transposed (l = 0)
  int U16 = 0;            // U padded to 16 (the updates' m16n16k16 tiles)
  size_t hown = 0;        // hidden l: the block's own columns of H_l [32][ldo], zero past them (pushed from here)
  size_t dzt = 0;         // hidden l >= 1: the own columns of dZ_l transposed [U16][kClLdT], zero past them
};

struct ClusterParams {
  const uint8_t* images = nullptr;  // [n][D] bytes
  const uint8_t* labels = nullptr;
  const int* perm = nullptr;        // this epoch's order
  int L = 0;                        // weight matrices (layers)
  int w[kClMaxLayers + 1] = {};     // widths: w[0] = D, w[L] = classes
  int B = 0, NB = 0;                // batch, blocks in the cluster
  float* params = nullptr;          // flat fp32 masters (the Trainer's layout)
  __half* params16 = nullptr;       // their fp16 copies (written back at the end of a launch)
  float* grads_out = nullptr;       // validation only: the gradients of the last step run
  size_t woff[kClMaxLayers] = {}, boff[kClMaxLayers] = {};
  int64_t s0 = 0;                   // global step of the launch's first step
  int i0 = 0;                       // its batch index in the epoch
  int count = 0;                    // steps in this launch (never past the epoch's end)
  float lr = 0;
  float* step_loss = nullptr;
  unsigned long long* bad_step = nullptr;
  // --breakdown: SM clock cycles of block 0's thread 0 in each of kClSegments kinds of work, summed
  // over the launch's steps (null: not measured).
  unsigned long long* breakdown = nullptr;
  // Tests only: mismatches between the column copies and the row copies they mirror, counted at
  // the end of the launch (null: not checked).
  unsigned* copy_mismatches = nullptr;
  // shared-memory layout (cluster_layout)
  ClusterLayer ly[kClMaxLayers];
  int ldx = 0, xcols = 0;           // X: [32][ldx] halves, columns padded to 32 (xcols)
  size_t x16 = 0, xtab = 0, scratch = 0, logits = 0, lab = 0, rloss = 0, own16 = 0, total = 0;
  int ldo = 0;                      // own tiles ([32][ldo] halves: hown, own16): whole 16-column tiles + 8
};

// The kinds of work --breakdown times (cycles of block 0, thread 0: from one stamp to the next).
constexpr int kClSegments = 8;
inline const char* cluster_segment_name(int i) {
  static const char* names[kClSegments] = {
      "forward products, hidden layers (own units) and their epilogues",
      "forward pushes into every block and the cluster barriers after them",
      "last layer in every block: logits, softmax cross-entropy, dZ",
      "backward-data products (own units) and their epilogues",
      "backward pushes and the cluster barriers after them",
      "row and column updates of layers 1 .. L-1 (tensor-core weight gradients, SGD) and biases",
      "first layer's update (tensor cores) and its bias",
      "the next batch's bytes to fp16 (and the step's labels)"};
  return names[i];
}

struct ClusterPlan {
  int blocks = 0;
  size_t smem = 0;
};

struct p5_cluster {};  // tag for the efficiency table (the kernel's name contains it)

// The entry points (5d_cluster.cu): plan_cluster, launch_cluster and cluster_step_cost of 5d_cluster.cuh.
ClusterPlan cluster_rung_plan(ClusterParams& p, int requested_blocks, int device);
void cluster_rung_launch(const ClusterPlan& pl, const ClusterParams& p, cudaStream_t st);
KernelCost cluster_rung_cost(const ClusterParams& p, const ClusterPlan& pl);
// Whether cluster_rung_plan accepts the model (shapes only: L, B, w), for --launch auto.
bool cluster_rung_fits(const ClusterParams& p, int device);

}  // namespace mlp
}  // namespace nb
