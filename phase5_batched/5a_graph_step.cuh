// phase5_batched/5a_graph_step.cuh — phase 4's GEMM mainloop (common/mlp/kernels.cuh) with everything
// around it fused in: the operand loaders and the epilogues do the work that phase 4 spent
// separate kernels and host round trips on.
//
//   GatherView      the first layer's A operand (and the B operand of its weight gradient) read
//                   straight from the byte-valued data set resident on the GPU: row r of the i-th
//                   step of an epoch is image perm[i * batch + r]; pixels become x/255 in T.
//   FwdHiddenEpi    z + b -> ReLU -> inverted dropout (Philox bits, the same as phase 4) -> T.
//   SoftmaxCEEpi    last layer: z + b -> softmax cross-entropy -> dZ = (p - onehot)/B in T; the
//                   batch loss is summed tile by tile in a fixed order and stored in
//                   step_loss[s]; a non-finite loss records the first such step (atomicMin).
//   BwdReluEpi      dZ_prev = dH * (h > 0) * 1/(1-p)  (h > 0 exactly when active and kept).
//                   Both also store their tile's column sums of dZ (store_tile_colsums).
//   UpdateEpi       the weight gradient never reaches memory: each element of dW = dZ^T · H is
//                   consumed by Adam (or SGD) in the epilogue, which updates the fp32 master
//                   weight (and its fp16 copy). Blocks of the first column tile also add up dZ's
//                   tile column sums (batch / 32 a unit) and update the bias. Adam's per-step
//                   constants come from a table computed on the host (one load instead of two
//                   double pow() per block).
//   EvalEpi         test set: argmax and cross-entropy per row, counted per tile (read once).
//   gemm_pair_kernel  two independent products in one launch (launch_gemm_pair): a layer's update
//                   and the next layer's backward-data product, or the last two updates (the
//                   paired backward).
// The global step number (dropout counter, Adam's t, the loss slot) comes from device memory
// (StepRef: *base + i) so that a CUDA graph captured once replays every epoch; the host only
// writes `base` and the epoch's permutation before a replay. Epilogues read what they need
// besides the tile (step, bias, labels, Adam constants) in prefetch(), before the K loop, and
// issue all their loads before their stores. gemm_tile calls prefetch() after the first k-tile's
// loads are issued, so what it does overlaps their latency: FwdHiddenEpi draws its dropout bits
// there. Every epilogue here sets kVecFixup (the latency-tuned split-K fix-up of gemm_tile), and
// the problems are planned with plan_splits_p5 (down to one k-tile per split; a long-K weight
// gradient up to 256 slices, with the two-level fix-up).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "mlp/kernels.cuh"

namespace nb {
namespace mlp {

struct StepRef {
  const int64_t* base = nullptr;
  int i = 0;
  __device__ __forceinline__ int64_t get() const { return __ldg(base) + i; }
};

// Which image each row of a batch is: step i of the current graph (which always starts at an
// epoch boundary, so position i*batch + r of this epoch's permutation) — no read of the step
// number on the load path. perm == nullptr: rows row_offset, row_offset+1, ... (evaluation).
struct RowMap {
  const int* perm = nullptr;
  int i = 0;
  int batch = 0;
  int row_offset = 0;
  __device__ __forceinline__ int image(int r) const {
    return perm == nullptr ? row_offset + r : __ldg(perm + static_cast<size_t>(i) * batch + r);
  }
};

template <class T>
struct GatherView {
  using Elem = T;
  static constexpr bool kContig = true;  // (row, pixel): pixels contiguous
  static constexpr bool kByteRows = true;  // step 5 of the GEMM ladder stages its tiles as bytes
  const uint8_t* data = nullptr;         // images, 784 bytes each
  int ld = 784;
  RowMap rows;
  // Row r's bytes in two steps (step 5's loop fetches the first a stage ahead, X3Rows): its image (a
  // global load of the permutation) and that image's bytes.
  __device__ __forceinline__ int row_id(int r) const { return rows.image(r); }
  __device__ __forceinline__ const uint8_t* id_bytes(int id) const { return data + static_cast<size_t>(id) * ld; }

  template <int V>
  __device__ __forceinline__ void load(int r, int c, int nrows, int ncols, T (&v)[V]) const {
    if (r >= nrows) {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = from_f<T>(0.f);
      return;
    }
    const uint8_t* src = data + static_cast<size_t>(rows.image(r)) * ld + c;
    uint8_t b[V];
    if (c + V <= ncols && (ld % V) == 0) {  // c is a multiple of V: the V bytes are aligned
      if constexpr (V == 8) *reinterpret_cast<uint2*>(b) = __ldg(reinterpret_cast<const uint2*>(src));
      else *reinterpret_cast<uint32_t*>(b) = __ldg(reinterpret_cast<const uint32_t*>(src));
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) b[i] = (c + i < ncols) ? src[i] : 0;
    }
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = from_f<T>(byte_over_255(b[i]));  // = b / 255, bit for bit
  }
};

// ------------------------------------------------------------------ epilogue plumbing
// Per-block scratch that prefetch() fills before the K loop and the epilogue reads after it (the
// loop's barriers order the two).
__device__ __forceinline__ int64_t& smem_step() {
  __shared__ int64_t s;
  return s;
}
__device__ __forceinline__ float* smem_bias() {
  __shared__ float s[kBN];
  return s;
}
__device__ __forceinline__ int* smem_label() {
  __shared__ int s[kBM];
  return s;
}
__device__ __forceinline__ AdamHyper& smem_adam() {
  __shared__ AdamHyper s;
  return s;
}
// Dropout keep bits, one word per thread ([0, 256)); step 5/6's 64-row tile keeps its second
// sub-tile's words at [256, 512) until that sub-tile's epilogue (FwdHiddenEpi::prefetch_pair).
__device__ __forceinline__ uint32_t* smem_keep() {
  __shared__ uint32_t s[512];
  return s;
}

// Split-K plan of phase 5: one k-tile per split is allowed (the products are latency-bound; the
// vectorised fix-up of gemm_tile makes more slices cheap) once K has 3 or more k-tiles; with 2
// the fix-up's round trips would cost more than the k-tile they save, so those stay unsplit.
// (Tried: planning the gathered first-layer product for 16 waves of blocks instead of 4, i.e. 13
// slices of 2 k-tiles at W2's h = 8192 instead of 5 of 5: 32.2 us against 23.8, H100.)
// Past 16 slices: a weight gradient at a large batch (K = batch) over few output tiles, e.g. 64 x 128
// x 8,192 (4 tiles), took 16 slices of 16 k-tiles each, 64 blocks on 132 SMs, each a chain of 16
// dependent k-tiles: 25.6 us (H200, GEMM record of 198c177). Where 16 slices would leave 4 or more
// k-tiles each, such a product may take up to 256 (the two-level fix-up, 3_split_k.cuh): there, 128
// slices of 2 k-tiles, 512 blocks. Predicted from the k-tile chain and the fix-up's two hand-overs
// (each a fence, an atomic and at most 16 slots read): about 6-7 us. Measured (H200, 737d448,
// logs/gemm_737d448/gemm-b8192.log): 21.7 us, and 15.0 for the 10 x 64 one (256 slices), against
// 25.6 and 25.7: the chain was not the cost; a batch-8,192 step 297 us against 334 before.
template <class P>
inline void plan_splits_p5(P& p, int sm_count) {
  const int ktiles = (p.K + P::kBK - 1) / P::kBK;
  const int max_splits = (TwoLevelSplit<P>::value && ktiles >= 4 * kFixupGroup) ? 16 * kFixupGroup : kFixupGroup;
  plan_splits(p, sm_count, 4, max_splits, ktiles <= 2 ? 2 : 1);
}

// Element-wise epilogues: thread t owns the 4 columns 4*(t % 16) .. +3 of rows t/16, t/16 + NT/16,
// ...: the bias of its columns is loaded once, every load of a row is issued before any store,
// and rows are read and written 16 (fp32) or 8 (fp16) bytes at a time when N % 4 == 0.
constexpr int kQuads = kBN / 4;

__device__ __forceinline__ void load4(const float* p, bool vec, int valid, float (&v)[4]) {
  if (vec && valid == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = j < valid ? p[j] : 0.f;
  }
}
__device__ __forceinline__ void load4(const __half* p, bool vec, int valid, float (&v)[4]) {
  if (vec && valid == 4) {
    const uint2 t = *reinterpret_cast<const uint2*>(p);
    const __half* h = reinterpret_cast<const __half*>(&t);
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = __half2float(h[j]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = j < valid ? __half2float(p[j]) : 0.f;
  }
}
__device__ __forceinline__ void store4(float* p, bool vec, int valid, const float (&v)[4]) {
  if (vec && valid == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (j < valid) p[j] = v[j];
  }
}
__device__ __forceinline__ void store4(__half* p, bool vec, int valid, const float (&v)[4]) {
  if (vec && valid == 4) {
    uint2 t;
    __half* h = reinterpret_cast<__half*>(&t);
#pragma unroll
    for (int j = 0; j < 4; ++j) h[j] = __float2half_rn(v[j]);
    *reinterpret_cast<uint2*>(p) = t;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (j < valid) p[j] = __float2half_rn(v[j]);
  }
}
template <class T>
__device__ __forceinline__ bool aligned4(const T* p) {
  return (reinterpret_cast<uintptr_t>(p) % (4 * sizeof(T))) == 0;
}

template <class T>
struct FwdHiddenEpi {
  const float* bias = nullptr;
  T* out = nullptr;  // [M, N]
  bool dropout = false;
  uint64_t key = 0;
  uint32_t layer = 0, threshold = 0;
  float scale = 1.f;
  StepRef step;
  static constexpr bool kVecFixup = true;
  // The dropout mask does not depend on the product: each thread draws the Philox bits of the
  // elements it will own in run() here, under the K loop's load latency, and keeps them as bits
  // (bit 4k + j: row k of its rows, column j of its quad) in shared memory.
  template <int NT>
  __device__ void draw_keep(int m0, int n0, int M, int N, uint32_t* dst) const {
    constexpr int RS = NT / kQuads, R = kBM / RS;
    const int c = (threadIdx.x % kQuads) * 4, n = n0 + c, valid = min(4, N - n);
    const uint64_t s = static_cast<uint64_t>(step.get());
    uint32_t keep = 0;
    if (valid > 0) {
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int m = m0 + threadIdx.x / kQuads + k * RS;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (j < valid && dropout_bits_dev(key, layer, s, static_cast<uint32_t>(m * N + n + j)) >= threshold)
            keep |= 1u << (4 * k + j);
      }
    }
    dst[threadIdx.x] = keep;
  }
  __device__ void prefetch(int m0, int n0, int M, int N) const {
    if (!dropout) return;
    if (blockDim.x == 256) draw_keep<256>(m0, n0, M, N, smem_keep());
    else draw_keep<128>(m0, n0, M, N, smem_keep());
  }
  // Step 5/6's 64-row tile (256 threads): both 32-row sub-tiles' bits at once, before the PDL wait
  // (they depend on no step kernel: the key, the layer and the step number, which the epoch's
  // permutation kernel wrote; the trainer launches the step kernel after it without PDL), so that
  // neither draw waits in the step's critical path; next_sub() moves the second sub-tile's words
  // into place before its epilogue.
  static constexpr bool kEarlyDraw = true;
  __device__ void prefetch_pair(int m0, int n0, int M, int N) const {
    if (!dropout) return;
    draw_keep<256>(m0, n0, M, N, smem_keep());
    draw_keep<256>(m0 + kBM, n0, M, N, smem_keep() + 256);
  }
  __device__ void next_sub() const {
    if (dropout) smem_keep()[threadIdx.x] = smem_keep()[256 + threadIdx.x];  // each thread its own word
  }
  // The tile's bias from b0 (the bias of column n0 onward): the global bias, or step 8's copy of it
  // in shared memory (run_from_bias), loaded while the product's first stages were in flight.
  template <int NT>
  __device__ void run(const float* cs, int m0, int n0, int M, int N, const float* b0) const {
    constexpr int RS = NT / kQuads, R = kBM / RS;
    const int c = (threadIdx.x % kQuads) * 4, n = n0 + c, valid = min(4, N - n);
    if (valid <= 0) return;
    const bool vec = (N % 4 == 0) && aligned4(out) && aligned4(bias);
    float b[4];
    load4(b0 + c, vec, valid, b);
    const uint32_t keep = dropout ? smem_keep()[threadIdx.x] : 0u;
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int r = threadIdx.x / kQuads + k * RS, m = m0 + r;
      if (m >= M) continue;
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = fmaxf(cs[r * kLdc + c + j] + b[j], 0.f);
        if (dropout) v[j] = ((keep >> (4 * k + j)) & 1u) ? v[j] * scale : 0.f;
      }
      store4(out + static_cast<size_t>(m) * N + n, vec, valid, v);
    }
  }
  __device__ void operator()(const float* cs, int m0, int n0, int M, int N) const {
    if (blockDim.x == 256) run<256>(cs, m0, n0, M, N, bias + n0);
    else run<128>(cs, m0, n0, M, N, bias + n0);
  }
  // Step 8 (256 threads): the epilogue with the bias of columns n0 ... from b0 (shared memory).
  static constexpr bool kBiasFrom = true;
  __device__ void run_from_bias(const float* cs, int m0, int n0, int M, int N, const float* b0) const {
    run<256>(cs, m0, n0, M, N, b0);
  }
};

// The column sums of one 32-row tile of dz as stored, written by the epilogue that produced the
// tile: colsum[tile][n] = sum over the tile's rows of dz[m][n], the rows in 8 slices (r, r + 8, ...)
// added slice by slice, the order in which UpdateEpi once summed the whole batch. The update's bias
// gradient then adds one value a tile (batch / 32 of them) instead of a column of the batch: with
// the column walked by one block at the end of the weight gradient, that loop had cost W1's step
// about 50 us per layer at batch 8,192, 297 -> 241 us (H200, --pdl off kernel tables in
// profiles/nvidia-h200/logs/pdl_15e6532/ and bias_7bb5a0a/). at(i, n) reads row i of the tile,
// column n (dz itself, or a copy in shared memory: same values, same order, same bits). Called by
// every thread of the block after the tile is stored.
template <class At>
__device__ __forceinline__ void sum_tile_columns(At at, float* colsum, int m0, int n0, int M, int N) {
  __syncthreads();  // the tile's stores (other threads') are visible to the block
  const int n = n0 + static_cast<int>(threadIdx.x);
  if (threadIdx.x >= kBN || n >= N) return;
  const int rows = min(kBM, M - m0);
  float g = 0.f;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    float part = 0.f;
#pragma unroll
    for (int i = q; i < kBM; i += 8)
      if (i < rows) part += at(i, n);
    g += part;
  }
  colsum[static_cast<size_t>(m0 / kBM) * N + n] = g;
}
template <class T>
__device__ __forceinline__ void store_tile_colsums(const T* dz, float* colsum, int m0, int n0, int M, int N) {
  sum_tile_columns([&](int i, int n) { return to_f(dz[static_cast<size_t>(m0 + i) * N + n]); }, colsum, m0, n0, M, N);
}

// Softmax cross-entropy of one row: z[0, N) the logits without the bias, y the label, inv = 1 / batch.
// Stores dZ = (softmax - onehot) * inv as T at dz_row and, as stored, back into z; returns the row's
// loss lse - (z_y + b_y). SoftmaxCEEpi's rows and the row chain's (5a_row_chain.cuh).
template <class T>
__device__ __forceinline__ float softmax_ce_row(float* z, const float* bias, int N, int y, float inv, T* dz_row) {
  float mx = -INFINITY;
  for (int j = 0; j < N; ++j) mx = fmaxf(mx, z[j] + bias[j]);
  float se = 0.f;
  for (int j = 0; j < N; ++j) se += expf(z[j] + bias[j] - mx);
  const float lse = mx + logf(se);
  const float loss = lse - (z[y] + bias[y]);
  for (int j = 0; j < N; ++j) {
    const float p = expf(z[j] + bias[j] - lse);
    const T d = from_f<T>((p - (j == y ? 1.f : 0.f)) * inv);
    dz_row[j] = d;
    z[j] = to_f(d);
  }
  return loss;
}

// Last layer: needs the whole row of logits in one tile (N <= kBN, one column tile). Each row tile
// stores its summed loss at tile_loss[step][tile]; step_loss_kernel turns them into the steps' mean
// losses after the graph's last step, so no block of a step waits on a fence, an atomic counter or
// a last block's sum.
template <class T>
struct SoftmaxCEEpi {
  const float* bias = nullptr;
  const uint8_t* labels = nullptr;
  RowMap rows;
  T* dz = nullptr;                 // [M, N]
  float* dz_colsum = nullptr;      // [row tiles, N]: sum_tile_columns (null: not wanted)
  float* tile_loss = nullptr;      // [global step][row tile]: each tile's summed loss
  static constexpr bool kVecFixup = true;
  StepRef step;
  __device__ void prefetch(int m0, int, int M, int N) const {
    const int t = threadIdx.x;
    if (t < N) smem_bias()[t] = __ldg(bias + t);
    if (t < kBM) smem_label()[t] = (m0 + t < M) ? __ldg(labels + rows.image(m0 + t)) : 0;
    if (t == 0) smem_step() = step.get();
  }
  // cs: the block's own fp32 tile, rewritten row by row (thread r, row r) with dz as stored.
  __device__ void operator()(float* cs, int m0, int /*n0*/, int M, int N) const {
    __shared__ float s_loss[kBM];
    const int r = threadIdx.x;
    const float* bs = smem_bias();
    if (r < kBM) {
      const int m = m0 + r;
      float loss = 0.f;
      if (m < M)
        loss = softmax_ce_row(cs + r * kLdc, bs, N, smem_label()[r], 1.f / static_cast<float>(M), dz + static_cast<size_t>(m) * N);
      s_loss[r] = loss;
    }
    if (dz_colsum)  // from the tile, which now holds dz as stored
      sum_tile_columns([&](int i, int n) { return cs[i * kLdc + n]; }, dz_colsum, m0, 0, M, N);
    __syncthreads();
    if (threadIdx.x == 0) {
      float s = 0.f;
      for (int i = 0; i < kBM; ++i) s += s_loss[i];
      const int tiles = (M + kBM - 1) / kBM;
      tile_loss[static_cast<size_t>(smem_step()) * tiles + m0 / kBM] = s;
    }
  }
};

// The mean loss of steps first.get() + s, s < count, from their tiles' sums (SoftmaxCEEpi), added
// in tile order in double; the first non-finite one is recorded in bad_step (init ~0ull). Run after
// a graph's steps (and after a single step).
template <class Dummy = void>
__global__ void step_loss_kernel(const float* __restrict__ tile_loss, int tiles, int M, StepRef first, int count,
                                 float* __restrict__ step_loss, unsigned long long* __restrict__ bad_step) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= count) return;
  const int64_t st = first.get() + s;
  const float* t = tile_loss + static_cast<size_t>(st) * tiles;
  double total = 0;
  for (int i = 0; i < tiles; ++i) total += t[i];
  const float mean = static_cast<float>(total / M);
  step_loss[st] = mean;
  if (!isfinite(mean)) atomicMin(bad_step, static_cast<unsigned long long>(st));
}

template <class T>
struct BwdReluEpi {
  const T* h = nullptr;  // forward output of this layer [M, N] (after ReLU and dropout)
  T* dz = nullptr;       // [M, N]
  float scale = 1.f;     // 1 / (1 - p)
  float* dz_colsum = nullptr;  // [row tiles, N]: store_tile_colsums (null: not wanted)
  static constexpr bool kVecFixup = true;
  __device__ void prefetch(int, int, int, int) const {}
  template <int NT>
  __device__ void run(const float* cs, int m0, int n0, int M, int N) const {
    store_relu<NT>(cs, m0, n0, M, N);
    if (dz_colsum) store_tile_colsums(dz, dz_colsum, m0, n0, M, N);
  }
  template <int NT>
  __device__ void store_relu(const float* cs, int m0, int n0, int M, int N) const {
    constexpr int RS = NT / kQuads, R = kBM / RS;
    const int c = (threadIdx.x % kQuads) * 4, n = n0 + c, valid = min(4, N - n);
    if (valid <= 0) return;
    const bool vec = (N % 4 == 0) && aligned4(h) && aligned4(dz);
    float hv[R][4];
#pragma unroll
    for (int k = 0; k < R; ++k) {  // every load first
      const int m = m0 + threadIdx.x / kQuads + k * RS;
      if (m < M) load4(h + static_cast<size_t>(m) * N + n, vec, valid, hv[k]);
    }
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int r = threadIdx.x / kQuads + k * RS, m = m0 + r;
      if (m >= M) continue;
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = hv[k][j] > 0.f ? cs[r * kLdc + c + j] * scale : 0.f;
      store4(dz + static_cast<size_t>(m) * N + n, vec, valid, v);
    }
  }
  __device__ void operator()(const float* cs, int m0, int n0, int M, int N) const {
    if (blockDim.x == 256) run<256>(cs, m0, n0, M, N);
    else run<128>(cs, m0, n0, M, N);
  }
};

// dW[out, in] tile -> optimizer. M = out, N = in. dz: [batch, out] (the A operand, transposed).
// grad_out (validation only, else null): the weight gradient is also stored there ([out, in]),
// and the bias gradient at bgrad_out.
template <class T>
struct UpdateEpi {
  float* W = nullptr;
  float* mW = nullptr;
  float* vW = nullptr;
  __half* W16 = nullptr;  // fp16 copy (fp16 runs), else null
  float* b = nullptr;
  float* mb = nullptr;
  float* vb = nullptr;
  float* grad_out = nullptr;
  float* bgrad_out = nullptr;
  const T* dz = nullptr;
  const float* dz_colsum = nullptr;  // dz's 32-row tile column sums (store_tile_colsums), else null
  int batch = 0;
  bool adam = true;
  float lr = 0;
  StepRef step;
  // Adam's constants of step t at hyper[t] (computed on the host, as phase 4 does), for
  // t < hyper_n; without a table (or past its end) thread 0 computes them (two double pow()).
  const AdamHyper* hyper = nullptr;
  int64_t hyper_n = 0;
  static constexpr bool kVecFixup = true;
  __device__ void prefetch(int, int, int, int) const {
    if (adam && threadIdx.x == 0) {
      const int64_t t = step.get() + 1;
      smem_adam() = (hyper != nullptr && t < hyper_n) ? hyper[t] : adam_hyper(lr, t);
    }
  }
  template <int NT>
  __device__ void run(const float* cs, int m0, int n0, int M, int N) const {
    constexpr int RS = NT / kQuads, R = kBM / RS;
    const int c = (threadIdx.x % kQuads) * 4, n = n0 + c, valid = min(4, N - n);
    if (valid > 0) {
      const bool vec = (N % 4 == 0) && aligned4(W) && (!adam || (aligned4(mW) && aligned4(vW))) &&
                       (W16 == nullptr || aligned4(W16));
      float w[R][4], mm[R][4], vv[R][4];
#pragma unroll
      for (int k = 0; k < R; ++k) {  // every load first
        const int m = m0 + threadIdx.x / kQuads + k * RS;
        if (m >= M) continue;
        const size_t i = static_cast<size_t>(m) * N + n;
        load4(W + i, vec, valid, w[k]);
        if (adam) load4(mW + i, vec, valid, mm[k]), load4(vW + i, vec, valid, vv[k]);
      }
      const AdamHyper h = adam ? smem_adam() : AdamHyper{};
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int r = threadIdx.x / kQuads + k * RS, m = m0 + r;
        if (m >= M) continue;
        const size_t i = static_cast<size_t>(m) * N + n;
        float g[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          g[j] = cs[r * kLdc + c + j];
          if (adam) adam_apply(w[k][j], g[j], mm[k][j], vv[k][j], h);
          else w[k][j] -= lr * g[j];
        }
        store4(W + i, vec, valid, w[k]);
        if (adam) store4(mW + i, vec, valid, mm[k]), store4(vW + i, vec, valid, vv[k]);
        if (W16) store4(W16 + i, vec, valid, w[k]);
        if (grad_out) store4(grad_out + i, false, valid, g);
      }
    }
    if (n0 != 0) return;
    // Bias: db[m] = sum over the batch of dz[k][m]: over the tiles' column sums where the producer
    // of dz stored them, else over the rows; slices per thread group, added in slice order
    // (deterministic; with one tile of rows both give the same bits).
    __shared__ float s_part[8][kBM];
    const int slices = NT / kBM;  // 8 (SIMT) or 4 (WMMA)
    const int r = threadIdx.x % kBM, q = threadIdx.x / kBM, m = m0 + r;
    float part = 0.f;
    if (m < M && dz_colsum) {
      const int tiles = (batch + kBM - 1) / kBM;
      for (int k = q; k < tiles; k += slices) part += dz_colsum[static_cast<size_t>(k) * M + m];
    } else if (m < M) {
      for (int k = q; k < batch; k += slices) part += to_f(dz[static_cast<size_t>(k) * M + m]);
    }
    s_part[q][r] = part;
    __syncthreads();
    if (q == 0 && m < M) {
      float g = 0.f;
      for (int i = 0; i < slices; ++i) g += s_part[i][r];
      float p = b[m];
      if (adam) {
        float mi = mb[m], vi = vb[m];
        adam_apply(p, g, mi, vi, smem_adam());
        mb[m] = mi, vb[m] = vi;
      } else {
        p -= lr * g;
      }
      b[m] = p;
      if (bgrad_out) bgrad_out[m] = g;
    }
  }
  __device__ void operator()(const float* cs, int m0, int n0, int M, int N) const {
    if (blockDim.x == 256) run<256>(cs, m0, n0, M, N);
    else run<128>(cs, m0, n0, M, N);
  }
};

struct EvalEpi {
  const float* bias = nullptr;
  const uint8_t* labels = nullptr;  // test labels
  int row_offset = 0;
  int* tile_correct = nullptr;      // indexed by (row_offset + m0) / kBM
  float* tile_loss = nullptr;
  static constexpr bool kVecFixup = true;
  __device__ void prefetch(int m0, int, int M, int N) const {
    const int t = threadIdx.x;
    if (t < N) smem_bias()[t] = __ldg(bias + t);
    if (t < kBM) smem_label()[t] = (m0 + t < M) ? __ldg(labels + row_offset + m0 + t) : 0;
  }
  __device__ void operator()(const float* cs, int m0, int /*n0*/, int M, int N) const {
    __shared__ float s_loss[kBM];
    __shared__ int s_ok[kBM];
    const int r = threadIdx.x;
    const float* bs = smem_bias();
    if (r < kBM) {
      const int m = m0 + r;
      float loss = 0.f;
      int ok = 0;
      if (m < M) {
        const float* z = cs + r * kLdc;
        float mx = -INFINITY;
        int arg = 0;
        for (int j = 0; j < N; ++j) {
          const float v = z[j] + bs[j];
          if (v > mx) mx = v, arg = j;
        }
        float se = 0.f;
        for (int j = 0; j < N; ++j) se += expf(z[j] + bs[j] - mx);
        const int y = smem_label()[r];
        loss = mx + logf(se) - (z[y] + bs[y]);
        ok = (arg == y);
      }
      s_loss[r] = loss, s_ok[r] = ok;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float s = 0.f;
      int c = 0;
      for (int i = 0; i < kBM; ++i) s += s_loss[i], c += s_ok[i];
      tile_loss[(row_offset + m0) / kBM] = s;
      tile_correct[(row_offset + m0) / kBM] = c;
    }
  }
};

// Applies an epilogue to an fp32 matrix already in global memory (the cuBLASLt path: the product
// comes from cuBLASLt, the same epilogue functor does the rest). One block per 32x64 tile.
template <class Tag, class Epi>
__global__ void __launch_bounds__(128) epilogue_kernel(const float* __restrict__ z, int M, int N, Epi epi) {
  __shared__ float cs[kBM * kLdc];
  const int tiles_m = (M + kBM - 1) / kBM;
  const int bm = blockIdx.x % tiles_m, bn = blockIdx.x / tiles_m;
  const int m0 = bm * kBM, n0 = bn * kBN;
  epi.prefetch(m0, n0, M, N);
  for (int e = threadIdx.x; e < kBM * kBN; e += blockDim.x) {
    const int r = e / kBN, c = e % kBN, m = m0 + r, n = n0 + c;
    cs[r * kLdc + c] = (m < M && n < N) ? z[static_cast<size_t>(m) * N + n] : 0.f;
  }
  __syncthreads();
  epi(cs, m0, n0, M, N);
}

template <class Tag, class Epi>
inline void launch_epilogue(const float* z, int M, int N, const Epi& epi, cudaStream_t st) {
  const int blocks = ((M + kBM - 1) / kBM) * ((N + kBN - 1) / kBN);
  epilogue_kernel<Tag, Epi><<<blocks, 128, 0, st>>>(z, M, N, epi);
  CHECK_LAUNCH();
}

// cuBLASLt path: X[B, 784] (T) gathered from the byte data set.
template <class T>
__global__ void gather_kernel(T* __restrict__ x, const uint8_t* __restrict__ data, RowMap rows, int B, int D) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < B * D; i += gridDim.x * blockDim.x) {
    const int r = i / D, c = i % D;
    x[i] = from_f<T>(byte_over_255(data[static_cast<size_t>(rows.image(r)) * D + c]));
  }
}

// Start of an epoch: write the step base and this epoch's permutation (Feistel, mlp_common.h).
template <class Dummy = void>
__global__ void epoch_begin_kernel(int* __restrict__ perm, int n, Perm p, int64_t* __restrict__ base, int64_t b) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) perm[i] = static_cast<int>(perm_apply(p, static_cast<uint32_t>(i)));
  if (i == 0) *base = b;
}

// The cuBLASLt path's optimizer: every parameter in one launch (p, g, m, v flat; m == nullptr:
// SGD). The step's bias corrections come from the step number in device memory.
template <class Dummy = void>
__global__ void flat_update_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                   float* __restrict__ v, __half* __restrict__ p16, size_t n, float lr, StepRef sr) {
  __shared__ AdamHyper s_h;
  if (threadIdx.x == 0 && m) s_h = adam_hyper(lr, sr.get() + 1);
  __syncthreads();
  const AdamHyper h = s_h;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float pi = p[i];
    if (m) {
      float mi = m[i], vi = v[i];
      adam_apply(pi, g[i], mi, vi, h);
      m[i] = mi, v[i] = vi;
    } else {
      pi -= lr * g[i];
    }
    p[i] = pi;
    if (p16) p16[i] = __float2half_rn(pi);
  }
}

// Two independent problems in one launch (phase 5 pairs a weight update with the next layer's
// backward-data product): blocks [0, p1.blocks()) run p1, the rest p2.
template <class Tag, class T, class P1, class P2>
__global__ void __launch_bounds__(TileCfg<T>::kThreads) gemm_pair_kernel(P1 p1, P2 p2) {
  GemmSmem<T>& sm = gemm_smem<T>();
  const int b1 = p1.blocks();
  if (static_cast<int>(blockIdx.x) < b1) gemm_tile<T, Loop::Either, P1>(p1, blockIdx.x, sm);
  else gemm_tile<T, Loop::Either, P2>(p2, blockIdx.x - b1, sm);
}

// A pair runs as two launches when a step-5 problem is in it (the rungs' blocks differ in size) or
// a problem split past kFixupGroup slices (its two-level fix-up is an instance of its own).
template <class P1, class P2>
inline bool pair_as_two_launches(const P1& p1, const P2& p2) {
  return p1.rung != GemmRung::Tile || p2.rung != GemmRung::Tile || p1.splits > kFixupGroup || p2.splits > kFixupGroup;
}
template <class Tag, class T, class P1, class P2>
inline void launch_gemm_pair(const P1& p1, const P2& p2, cudaStream_t st, bool pdl = false) {
  if (pair_as_two_launches(p1, p2)) {
    launch_gemm<Tag, T>(p1, st, pdl);
    launch_gemm<Tag, T>(p2, st, pdl);
    return;
  }
  const size_t dyn = gemm_dyn_smem(p1) > gemm_dyn_smem(p2) ? gemm_dyn_smem(p1) : gemm_dyn_smem(p2);
  launch_kernel(gemm_pair_kernel<Tag, T, P1, P2>, p1.blocks() + p2.blocks(), TileCfg<T>::kThreads, dyn, st, pdl, p1,
                p2);
}

// Kernel-name tags of phase 5.
struct p5_fwd_gather {};
struct p5_fwd_hidden {};
struct p5_fwd_softmax_ce {};
struct p5_bwd_data {};
struct p5_update {};
struct p5_update_and_bwd_data {};
struct p5_update_pair {};
struct p5_eval {};
struct p5_epi_hidden {};
struct p5_epi_softmax_ce {};
struct p5_epi_bwd_relu {};

}  // namespace mlp
}  // namespace nb
