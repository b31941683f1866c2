// phase5_batched/5a_row_chain.cuh — the graph step's middle in one kernel (`--row-chain on`, W1's
// shape: two hidden layers).
//
// WHAT IT ADDS over 5a's kernels: between the gathered first layer's forward and the weight
// gradients, W1's step runs four dependent kernels (the hidden forward, softmax-CE, two backward-data
// products); here one kernel does all four. Each block takes 32 rows of the batch from the first
// hidden layer's output H0 to dZ of every layer: H1 = dropout(ReLU(H0 W1^T + b1)), the logits, the
// loss and dZ2, dZ1 = ReLU'(dZ2 W2), dZ0 = ReLU'(dZ1 W1), with both weight matrices in its shared
// memory, and stores what the updates read (H1, dZ2, dZ1, dZ0, each dZ's 32-row column sums, the
// tile's loss), the same buffers and order of tiles as the kernels it replaces.
// THE DESIGN DECISION: that part of the step is row-local (a row of each output needs only its own
// row of H0 and the weights), so no block waits for another; the weight gradients, which sum over the
// batch, stay GEMMs and all three now fork from this one kernel. The products are small (W1 at batch
// 8,192: 0.29 GFLOP against the step's 3.9) and run on the CUDA cores in fp32 (fp16 runs: the same
// fp16 operands, widened), 2 x 4 or 4 x 4 outputs a thread read 16 bytes at a time from
// conflict-free rows (row_chain_stride).
// PREDICTION (H200, W1 at batch 8,192, 256 blocks of 256 threads, two an SM): 565 K FMAs a block,
// 8.8 K FMA cycles an SM; ~4 K shared-memory wavefronts a block, 8.2 K an SM; the weights (34 KB a
// block, 8.7 MB from L2) and dropout bits fetched before the PDL wait: ~8 us against the ~34 us the
// four kernels take in the step's stamps (hidden forward 8.7, softmax-CE 9.4, backward-data 4.9 and
// 11.4): the fp32 step 131.4 -> ~106 us; fp16 88.35 -> ~75 (its four kernels ~0.64 of fp32's in the
// sweep's kernel tables), so our fp16 / fp32 ratio falls 1.49 -> ~1.41 (it rests on the first layer's
// GEMMs). Batch 32 (one block, latency-bound): a step's dependent kernels 6 -> 3, ~6 us of chain
// against ~19 us of kernels (PDL off): 35.1 -> ~27 us; batch 64 (the sweep's least lead) 37.1 -> ~29.
// MEASURED (H200, c3c7d16, logs/next_c3c7d16/b/: W1, 2 rounds, medians): batch 32 fp32 35.06 -> 33.90 us
// a step (one block: the kernel 17.0 us), 64 37.01 -> 35.93; 8,192 130.69 -> 131.69 (the kernel 23.6
// us, not ~8: the forked updates, now beside each other, take 9 us more). So --row-chain auto turns it
// on at the small batches where it measured faster (kRowChainAutoBatch) and nowhere else.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "5a_graph_step.cuh"

namespace nb {
namespace mlp {

constexpr int kRowChainThreads = 256;
constexpr int kRowChainRows = kBM;  // 32: one row tile of the step's column sums and losses

// A shared-memory row stride (floats) for rows read 16 bytes at a time: a multiple of 4 whose
// quarter is odd, so that 8 consecutive rows start in 8 different groups of 4 banks (a warp's 16
// rows of W1 in the forward: 2 wavefronts, the least 256 bytes take).
__host__ __device__ constexpr int row_chain_round4(int n) { return (n + 3) / 4 * 4; }
__host__ __device__ constexpr int row_chain_stride(int n) {
  return (row_chain_round4(n) / 4) % 2 ? row_chain_round4(n) : row_chain_round4(n) + 4;
}

// Shared-memory layout, offsets in floats (each a multiple of 4: 16-byte aligned). W1 has
// round4(n1) rows (the rows past n1 zero: the dZ0 product runs k over whole groups of 4), H0's tile
// is rewritten in place with dZ0 as stored, the dropout bits are one byte per 8 columns of a row;
// the rows' labels and losses and the step number last (all of the block's shared memory is here,
// so that the fit check counts every byte).
struct RowChainLayout {
  int s0, s1, s2;  // row strides: n0-wide rows, n1-wide rows, the logits
  int k0, k1;      // n0, n1 rounded up to 4 (the products' K loops)
  int kb;          // bytes of dropout bits per row
  int w1, w2, b1, b2, h0, h1, z2, d1, keep, label, loss, step, end;
  __host__ __device__ RowChainLayout(int n0, int n1, int n2) {
    s0 = row_chain_stride(n0), s1 = row_chain_stride(n1), s2 = n2 + 1;
    k0 = row_chain_round4(n0), k1 = row_chain_round4(n1);
    kb = (n1 + 7) / 8;
    w1 = 0;
    w2 = w1 + k1 * s0;
    b1 = w2 + n2 * s1;
    b2 = b1 + row_chain_round4(n1);
    h0 = b2 + row_chain_round4(n2);
    h1 = h0 + kRowChainRows * s0;
    z2 = h1 + kRowChainRows * s1;
    d1 = z2 + row_chain_round4(kRowChainRows * s2);
    keep = d1 + kRowChainRows * s1;
    label = keep + row_chain_round4((kRowChainRows * kb + 3) / 4);
    loss = label + kRowChainRows;
    step = loss + kRowChainRows;
    end = step + 4;
  }
  __host__ __device__ size_t bytes() const { return static_cast<size_t>(end) * sizeof(float); }
};

template <class T>
struct RowChainParams {
  int M = 0;                    // rows of the batch
  int n0 = 0, n1 = 0, n2 = 0;   // widths: H0 (the first layer's output), H1, the classes
  const T* h0 = nullptr;        // [M, n0] as stored (after ReLU and dropout)
  const T* w1 = nullptr;        // [n1, n0]
  const float* b1 = nullptr;    // [n1]
  const T* w2 = nullptr;        // [n2, n1]
  const float* b2 = nullptr;    // [n2]
  T* h1 = nullptr;              // [M, n1]
  bool dropout = false;         // layer 1's dropout (FwdHiddenEpi's bits: layer 1, element m * n1 + j)
  uint64_t key = 0;
  uint32_t threshold = 0;
  float scale = 1.f;            // 1 / (1 - p): the kept units' factor and the backward ReLUs' (BwdReluEpi)
  const uint8_t* labels = nullptr;
  RowMap rows;
  StepRef step;
  T* dz2 = nullptr;             // [M, n2]
  float* dz2_colsum = nullptr;  // [row tiles, n2]
  float* tile_loss = nullptr;   // [global step][row tile]
  T* dz1 = nullptr;             // [M, n1]
  float* dz1_colsum = nullptr;
  T* dz0 = nullptr;             // [M, n0]
  float* dz0_colsum = nullptr;
};

__device__ __forceinline__ float4 rc_ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void rc_st4(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}

// A [rows, n] matrix of T in global memory into a shared-memory tile of stride s as floats, the
// columns [n, round4(n)) and the rows [rows, rows_to) zero.
template <class T>
__device__ __forceinline__ void rc_stage(const T* src, int rows, int rows_to, int n, int s, float* dst) {
  const int q4 = row_chain_round4(n) / 4;
  const bool vec = (n % 4 == 0) && aligned4(src);
  for (int i = threadIdx.x; i < rows_to * q4; i += blockDim.x) {
    const int r = i / q4, c = 4 * (i % q4);
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (r < rows) load4(src + static_cast<size_t>(r) * n + c, vec, min(4, n - c), v);
    rc_st4(dst + r * s + c, v);
  }
}

// Each dZ's column sums of the block's 32-row tile (sum_tile_columns, which syncs the block first), 64
// columns a call; null: none wanted (the block still syncs).
template <class At>
__device__ __forceinline__ void rc_colsums(At at, float* colsum, int m0, int n, int M) {
  for (int c = 0; c < n; c += kBN) {
    if (colsum) sum_tile_columns(at, colsum, m0, c, M, n);
    else __syncthreads();
  }
}

template <class T>
__global__ void __launch_bounds__(kRowChainThreads, 2) p5_row_chain(RowChainParams<T> p) {
  extern __shared__ float4 rc_smem4[];
  float* const sm = reinterpret_cast<float*>(rc_smem4);
  const RowChainLayout L(p.n0, p.n1, p.n2);
  int* const s_label = reinterpret_cast<int*>(sm + L.label);
  float* const s_loss = sm + L.loss;
  int64_t& s_step = *reinterpret_cast<int64_t*>(sm + L.step);
  float* const sW1 = sm + L.w1;
  float* const sW2 = sm + L.w2;
  float* const sB1 = sm + L.b1;
  float* const sB2 = sm + L.b2;
  float* const sH0 = sm + L.h0;  // H0 as stored; then dZ0 as stored (each thread its own elements)
  float* const sH1 = sm + L.h1;
  float* const sZ2 = sm + L.z2;  // the logits; then dZ2 as stored
  float* const sD1 = sm + L.d1;
  uint8_t* const sKeep = reinterpret_cast<uint8_t*>(sm + L.keep);
  const int t = threadIdx.x, n0 = p.n0, n1 = p.n1, n2 = p.n2;
  const int m0 = blockIdx.x * kRowChainRows, rows = min(kRowChainRows, p.M - m0);

  // 1. Before the PDL wait, what no kernel of this step writes: layers 1 and 2's weights and biases
  //    (last updated by the step before, whose branches joined before this step's first kernel), the
  //    step number, the labels, layer 1's dropout bits.
  rc_stage(p.w1, n1, L.k1, n0, L.s0, sW1);
  rc_stage(p.w2, n2, n2, n1, L.s1, sW2);
  for (int j = t; j < n1; j += blockDim.x) sB1[j] = __ldg(p.b1 + j);
  for (int j = t; j < n2; j += blockDim.x) sB2[j] = __ldg(p.b2 + j);
  for (int i = t; i < kRowChainRows * (L.k1 - n1); i += blockDim.x) {  // padding columns the K loops read
    const int r = i / (L.k1 - n1), c = n1 + i % (L.k1 - n1);
    sH1[r * L.s1 + c] = 0.f, sD1[r * L.s1 + c] = 0.f;
  }
  if (t < kRowChainRows) s_label[t] = t < rows ? __ldg(p.labels + p.rows.image(m0 + t)) : 0;
  const int64_t step = p.step.get();
  if (t == 0) s_step = step;
  if (p.dropout)
    for (int i = t; i < kRowChainRows * L.kb; i += blockDim.x) {
      const int r = i / L.kb, j0 = 8 * (i % L.kb);
      uint32_t bits = 0;
      if (r < rows)
        for (int j = j0; j < min(j0 + 8, n1); ++j)
          if (dropout_bits_dev(p.key, 1u, static_cast<uint64_t>(step), static_cast<uint32_t>((m0 + r) * n1 + j)) >= p.threshold)
            bits |= 1u << (j - j0);
      sKeep[i] = static_cast<uint8_t>(bits);
    }
  pdl_wait();  // H0: the kernel before this one wrote it
  pdl_launch_dependents();
  rc_stage(p.h0 + static_cast<size_t>(m0) * n0, rows, kRowChainRows, n0, L.s0, sH0);
  __syncthreads();

  // 2. H1 = dropout(ReLU(H0 W1^T + b1)): a thread 2 rows (tg, tg + 16) x 4 columns (c + tc + 16q),
  //    k four at a time.
  const int tg = t / 16, tc = t % 16;
  for (int c = 0; c < n1; c += 64) {
    float acc[2][4] = {};
    int jr[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) jr[q] = min(c + tc + 16 * q, n1 - 1);
    for (int k = 0; k < L.k0; k += 4) {
      const float4 a0 = rc_ld4(sH0 + tg * L.s0 + k), a1 = rc_ld4(sH0 + (tg + 16) * L.s0 + k);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 w = rc_ld4(sW1 + jr[q] * L.s0 + k);
        acc[0][q] = fmaf(a0.x, w.x, acc[0][q]), acc[0][q] = fmaf(a0.y, w.y, acc[0][q]);
        acc[0][q] = fmaf(a0.z, w.z, acc[0][q]), acc[0][q] = fmaf(a0.w, w.w, acc[0][q]);
        acc[1][q] = fmaf(a1.x, w.x, acc[1][q]), acc[1][q] = fmaf(a1.y, w.y, acc[1][q]);
        acc[1][q] = fmaf(a1.z, w.z, acc[1][q]), acc[1][q] = fmaf(a1.w, w.w, acc[1][q]);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = tg + 16 * i, j = c + tc + 16 * q;
        if (j >= n1) continue;
        float v = fmaxf(acc[i][q] + sB1[j], 0.f);
        if (p.dropout) v = ((sKeep[r * L.kb + j / 8] >> (j % 8)) & 1u) ? v * p.scale : 0.f;
        const T h = from_f<T>(v);
        sH1[r * L.s1 + j] = to_f(h);
        if (r < rows) p.h1[static_cast<size_t>(m0 + r) * n1 + j] = h;
      }
  }
  __syncthreads();

  // 3. The logits H1 W2^T (without the bias, as SoftmaxCEEpi takes them).
  for (int o = t; o < kRowChainRows * n2; o += blockDim.x) {
    const int r = o / n2, j = o % n2;
    float acc = 0.f;
    for (int k = 0; k < L.k1; k += 4) {
      const float4 a = rc_ld4(sH1 + r * L.s1 + k), w = rc_ld4(sW2 + j * L.s1 + k);
      acc = fmaf(a.x, w.x, acc), acc = fmaf(a.y, w.y, acc), acc = fmaf(a.z, w.z, acc), acc = fmaf(a.w, w.w, acc);
    }
    sZ2[r * L.s2 + j] = acc;
  }
  __syncthreads();

  // 4. Softmax cross-entropy (SoftmaxCEEpi's rows): dZ2 = (p - onehot) / M, a row a thread; the rows
  //    past the batch zero (they feed the products below).
  if (t < kRowChainRows) {
    float* z = sZ2 + t * L.s2;
    float loss = 0.f;
    if (t < rows)
      loss = softmax_ce_row(z, sB2, n2, s_label[t], 1.f / static_cast<float>(p.M), p.dz2 + static_cast<size_t>(m0 + t) * n2);
    else
      for (int j = 0; j < n2; ++j) z[j] = 0.f;
    s_loss[t] = loss;
  }
  rc_colsums([&](int i, int n) { return sZ2[i * L.s2 + n]; }, p.dz2_colsum, m0, n2, p.M);
  __syncthreads();
  if (t == 0) {
    float s = 0.f;
    for (int i = 0; i < kRowChainRows; ++i) s += s_loss[i];
    const int tiles = (p.M + kRowChainRows - 1) / kRowChainRows;
    p.tile_loss[static_cast<size_t>(s_step) * tiles + blockIdx.x] = s;
  }

  // 5. dZ1 = (dZ2 W2) * (H1 > 0) * scale (BwdReluEpi's arithmetic): the layout of step 2, k < n2.
  for (int c = 0; c < n1; c += 64) {
    float acc[2][4] = {};
    int jr[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) jr[q] = min(c + tc + 16 * q, n1 - 1);
    for (int k = 0; k < n2; ++k) {
      const float a0 = sZ2[tg * L.s2 + k], a1 = sZ2[(tg + 16) * L.s2 + k];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float w = sW2[k * L.s1 + jr[q]];
        acc[0][q] = fmaf(a0, w, acc[0][q]), acc[1][q] = fmaf(a1, w, acc[1][q]);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = tg + 16 * i, j = c + tc + 16 * q;
        if (j >= n1) continue;
        const T d = from_f<T>(sH1[r * L.s1 + j] > 0.f ? acc[i][q] * p.scale : 0.f);
        sD1[r * L.s1 + j] = to_f(d);
        if (r < rows) p.dz1[static_cast<size_t>(m0 + r) * n1 + j] = d;
      }
  }
  rc_colsums([&](int i, int n) { return sD1[i * L.s1 + n]; }, p.dz1_colsum, m0, n1, p.M);
  __syncthreads();

  // 6. dZ0 = (dZ1 W1) * (H0 > 0) * scale: a thread 4 rows x 4 adjacent columns (the 16 lanes of a half
  //    warp: 64 adjacent columns, read 16 bytes at a time), W1 read along its rows; k four at a time.
  //    Each thread reads H0's mask of its own outputs, then writes dZ0 as stored in their place.
  {
    const int lane = t % 32, w = t / 32, q16 = lane % 16, rh = lane / 16;
    const int r0 = 8 * (w % 4) + 4 * rh, cb = 64 * (w / 4) + 4 * q16;
    const bool vec = (n0 % 4 == 0) && aligned4(p.dz0);
    for (int c0 = 0; c0 < n0; c0 += 128) {
      const int c = c0 + cb;
      if (c >= L.k0) continue;
      float acc[4][4] = {};
      for (int k = 0; k < L.k1; k += 4) {
        float4 a[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = rc_ld4(sD1 + (r0 + i) * L.s1 + k);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const float4 b = rc_ld4(sW1 + (k + kk) * L.s0 + c);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float ai = kk == 0 ? a[i].x : kk == 1 ? a[i].y : kk == 2 ? a[i].z : a[i].w;
            acc[i][0] = fmaf(ai, b.x, acc[i][0]), acc[i][1] = fmaf(ai, b.y, acc[i][1]);
            acc[i][2] = fmaf(ai, b.z, acc[i][2]), acc[i][3] = fmaf(ai, b.w, acc[i][3]);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = r0 + i;
        const float4 h = rc_ld4(sH0 + r * L.s0 + c);
        const float hv[4] = {h.x, h.y, h.z, h.w};
        float v[4];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) v[jj] = to_f(from_f<T>(hv[jj] > 0.f ? acc[i][jj] * p.scale : 0.f));
        rc_st4(sH0 + r * L.s0 + c, v);
        if (r < rows) store4(p.dz0 + static_cast<size_t>(m0 + r) * n0 + c, vec, min(4, n0 - c), v);
      }
    }
  }
  rc_colsums([&](int i, int n) { return sH0[i * L.s0 + n]; }, p.dz0_colsum, m0, n0, p.M);
}

// Whether the kernel can run a model: two hidden layers, the classes within one softmax tile, the
// layout within the device's opt-in shared memory a block.
inline bool row_chain_fits(int n0, int n1, int n2, size_t smem_optin) {
  return n0 > 0 && n1 > 0 && n2 > 0 && n2 <= kBN && RowChainLayout(n0, n1, n2).bytes() <= smem_optin;
}

// --row-chain auto: the largest batch it runs at (where it measured faster than the four kernels:
// fp32 at 32 and 64, fp16 at 32 only; logs/next_c3c7d16/b/summary.txt).
template <class T>
constexpr int kRowChainAutoBatch = std::is_same<T, __half>::value ? 32 : 64;

template <class T>
inline void row_chain_setup(size_t smem) {
  CUDA_CHECK(cudaFuncSetAttribute(p5_row_chain<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
}

template <class T>
inline void launch_row_chain(const RowChainParams<T>& p, cudaStream_t st, bool pdl) {
  const int blocks = (p.M + kRowChainRows - 1) / kRowChainRows;
  launch_kernel(p5_row_chain<T>, blocks, kRowChainThreads, RowChainLayout(p.n0, p.n1, p.n2).bytes(), st, pdl, p);
}

}  // namespace mlp
}  // namespace nb
