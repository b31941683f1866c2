// phase5_batched/5g_grid.h — rung 5g as the trainer sees it: the grid kernel's layout, its plan and three
// entry points. It takes rung 5d's parameter block (ClusterParams: the same model, data and buffers);
// the kernel and its host code live in 5g_grid.cuh, compiled in a translation unit of their own
// (5g_grid.cu).
//
//   GridPlan pl = grid_rung_plan(p, blocks, device);   // refuses (exit 2) what cannot run
//   grid_rung_launch(pl, p, stream);                    // one cooperative launch: p.count steps
//   KernelCost c = grid_rung_cost(p, pl);               // flops and bytes of one step
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "5d_cluster.h"       // ClusterParams, kClMaxLayers
#include "mlp/mlp_common.h"  // KernelCost

namespace nb {
namespace mlp {

constexpr int kGrThreads = 512;
constexpr int kGrWarps = kGrThreads / 32;
constexpr int kGrRows = 32;        // the batch, padded to 32 rows (so --batch <= 32)
constexpr int kGrLdT = kGrRows + 8;  // row stride (halves) of a transposed [unit][batch] tile
constexpr int kGrMaxClasses = 16;  // the last layer's softmax: a half-warp a row

// One layer's shapes, where its weights live and its buffers (shared-memory offsets in bytes; global
// ones in bytes from the start of the plan's arena). Hidden layers (l < L-1) are split by units: block
// r owns units [r U, r U + U) (fewer or none at the end); the last layer is split by its inputs.
struct GridLayer {
  int in = 0, out = 0;
  int U = 0;              // hidden: units a block (a multiple of 16); the last layer: 0
  int Kp = 0, ldw = 0;    // in padded to 16; row stride (halves) of the fp16 rows
  int Np = 0;             // out padded to 16
  bool w16_smem = false;  // the fp16 rows in shared memory (else in the arena: read through L2)
  bool m32_smem = false;  // the fp32 master rows in shared memory (else the trainer's p.params in place)
  size_t w16 = 0, m32 = 0, bias = 0;  // shared: fp16 rows [U][ldw], masters [U][in], biases [U]
  size_t hto = 0, dzt = 0;            // shared: own activations H_l (after ReLU) and own dZ_l, [U][kGrLdT]
  size_t w16g = 0;                    // arena: fp16 rows of every block [NB U][ldw] (when not in shared memory)
  size_t hb = 0, ht = 0;  // arena (hidden l < L-2): H_{l+1} = this layer's output, [32][Np] and (two, by step parity) [NB U][32]
  size_t dzb = 0;         // arena (1 <= l <= L-2): dZ_l [32][Np]
  size_t wt = 0;          // arena (1 <= l <= L-2): W_l transposed, fp16, two copies by step parity [2][NB U_{l-1}][Np]
};

struct GridLayout {
  int NB = 0, L = 0, C = 0, ldx = 0;
  GridLayer ly[kClMaxLayers];
  // shared: X fp16 [32][ldx], the next batch's bytes [32][D] (cp.async), the byte -> fp16 table, the products' partials, the last layer's own columns
  // (fp16 [C][Ul], fp32 [C][Ul]) and its biases [C] (every block), dZ of the last layer [32][C] (fp32
  // holding fp16 values), labels, row losses
  size_t x16 = 0, xb = 0, xtab = 0, scratch = 0, lw16 = 0, lw32 = 0, lb = 0, dzl = 0, lab = 0, rloss = 0, smem = 0;
  size_t bar = 0, part = 0, arena_bytes = 0;  // arena: the grid barrier's counter; the partial logits (two, by step parity) [NB][32][C] (fp32); the arena's size
  unsigned char* arena = nullptr;
};

struct GridPlan {
  int blocks = 0;
  size_t smem = 0;
  GridLayout g;
  std::shared_ptr<void> arena;  // owns g.arena (cudaFree on release)
};

// The kinds of work --breakdown times (cycles of block 0, thread 0, the chain's first: from one stamp to
// the next).
constexpr int kGrSegments = 7;
inline const char* grid_segment_name(int i) {
  static const char* names[kGrSegments] = {
      "forward products, hidden layers (own units) and their epilogues",
      "grid barriers (waiting for every block's part of an exchange)",
      "last layer: partial logits, their sum, softmax cross-entropy, dZ",
      "backward-data products (own units) and their epilogues",
      "waiting for the update team (inner layers' rows and the last layer's columns, updated beside the chain)",
      "dZ of the last hidden layer and the first layer's update",
      "the next batch's bytes to fp16 (and the step's labels)"};
  return names[i];
}

struct p5_grid {};  // tag for the efficiency table (the kernel's name contains it)

GridPlan grid_rung_plan(ClusterParams& p, int requested_blocks, int device);
void grid_rung_launch(const GridPlan& pl, const ClusterParams& p, cudaStream_t st);
KernelCost grid_rung_cost(const ClusterParams& p, const GridPlan& pl);
// The most units of a hidden layer a block would hold in the plan for the model (shapes only: L, B, w;
// requested_blocks as in grid_rung_plan), or 0 where the plan refuses it; blocks, when given and the
// plan accepts the model, receives its block count; for --launch auto.
int grid_rung_units(const ClusterParams& p, int requested_blocks, int device, int* blocks = nullptr);

}  // namespace mlp
}  // namespace nb
