// phase5_batched/5c_persistent.h — rung 5c as the trainer sees it: the persistent kernel's parameters,
// its plan, and three entry points. The kernel and its host code live in 5c_persistent.cuh, compiled in
// a translation unit of their own (5c_persistent.cu), so the trainer's file does not compile them.
//
//   PersistParams p = ...;                                    // the trainer fills it
//   PersistPlan pl = persistent_rung_plan(p, blocks, device, true);  // refuses (exit 2) what cannot run
//   persistent_rung_launch(pl, p, stream);                     // one cooperative launch: p.count steps
//   KernelCost c = persistent_rung_cost(p, pl);                // flops and bytes of one step
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "mlp/mlp_common.h"  // KernelCost

namespace nb {
namespace mlp {

struct AdamHyper;  // common/mlp/kernels.cuh

constexpr int kPersistThreads = 512;

// One word of an exchange between blocks: a float and the tag of the step that wrote it. A reader
// polls the word until the tag is the one it expects, so the value and its readiness travel in a
// single 64-bit access (single-copy atomic): no grid barrier, no fence, no flag.
using xword = unsigned long long;

struct PersistParams {
  const uint8_t* images = nullptr;  // [n][D] bytes
  const uint8_t* labels = nullptr;
  const int* perm = nullptr;        // this epoch's order
  int D = 784, H1 = 0, H2 = 0, C = 10, B = 0;
  int nc = 0, nj = 0;               // units per block (first / second hidden layer)
  // Parameters, flat fp32 (offsets as the Trainer lays them out); adam_m, adam_v (Adam's first and
  // second moments, the same layout) null for SGD; grads_out (validation only) receives the
  // gradients in the same layout.
  float* params = nullptr;
  float* adam_m = nullptr;
  float* adam_v = nullptr;
  float* grads_out = nullptr;
  size_t w0 = 0, b0 = 0, w1 = 0, b1 = 0, w2 = 0, b2 = 0;
  // Exchange buffers between blocks, double-buffered by step parity; each word is a tagged value
  // (xword: the step's tag in the high half, the float's bits in the low half).
  xword* h1_words = nullptr;  // [2][B][H1]
  xword* h2_words = nullptr;  // [2][B][H2]
  xword* w2_words = nullptr;  // [2][H2][H1]
  // rung 5e only (5e_pipelined.cuh): [2][C * H2 + C], W3 and b3 as their owners publish them
  xword* w3_words = nullptr;
  int64_t s0 = 0;        // global step of the first step of this launch
  int i0 = 0;            // its batch index in the epoch
  int count = 0;         // steps in this launch (never past the epoch's end)
  bool adam = true;
  float lr = 0;
  const AdamHyper* hyper = nullptr;  // hyper[t] for t < hyper_n
  int64_t hyper_n = 0;
  bool dropout = false;
  uint64_t key = 0;
  uint32_t threshold = 0;
  float scale = 1.f;
  float* step_loss = nullptr;
  unsigned long long* bad_step = nullptr;
  // --breakdown: SM clock cycles of block 0's thread 0 spent in each of kPersistSegments parts of
  // a step, summed over the launch's steps (null: not measured).
  unsigned long long* breakdown = nullptr;
  // Tests of rung 5f (5f_cluster32.cuh): bit differences between copies of a weight that must agree
  // (W2's column copies and the owners' rows, the W3 replicas) are added here (null: not checked).
  unsigned* copy_mismatches = nullptr;
};

// The parts of a step that --breakdown times (cycles of block 0, thread 0: from one stamp to the next).
constexpr int kPersistSegments = 8;
inline const char* persist_segment_name(int i) {
  static const char* names[kPersistSegments] = {
      "A: wait for the batch, first layer (own units), publish h1",
      "X1: wait for h1 (meanwhile: the previous step's W3 and own W2 updates)",
      "B: second layer (own units), publish h2",
      "X2: wait for h2 and the W2 column slice",
      "C1: last layer (partial logits: rows x slices of H2)",
      "C2: softmax cross-entropy and dz2 = relu'(dz3 W3), two rows a warp",
      "C3: dz1 for own units",
      "C4: own W1 rows and b1 updated"};
  return names[i];
}

// How the epoch is split over blocks; refuses (exit 2) what the kernel cannot run.
struct PersistPlan {
  int blocks = 0, nc = 0, NC = 0, nj = 0;
  size_t smem = 0;
  bool specialized = false;  // W1's instance (shape compiled in)
};

struct p5_persistent {};  // tag for the efficiency table (the kernel's name contains it)

// The entry points (5c_persistent.cu): plan_persistent, launch_persistent and persist_step_cost of
// 5c_persistent.cuh.
PersistPlan persistent_rung_plan(PersistParams& p, int requested_blocks, int device, bool specialize);
void persistent_rung_launch(const PersistPlan& pl, const PersistParams& p, cudaStream_t st);
KernelCost persistent_rung_cost(const PersistParams& p, const PersistPlan& pl);

}  // namespace mlp
}  // namespace nb
