// phase5_batched/5c_persistent.cuh — rung 5c, `--launch persistent`: a whole epoch of W1's MLP (784-H1-H2-C,
// fp32, Adam, dropout) as ONE cooperative kernel instead of one CUDA-graph node per GEMM.
// WHAT IT ADDS: G blocks stay resident for the epoch with the parameters in their shared memory; a step is
// two exchanges of tagged words between blocks (no grid barrier) and the block-local work between them.
// BUILDS ON: 5b's fused backward (the arithmetic), the graph path's data and Adam constants.
// OWNERSHIP (block b of G, 5c_persistent_split.cuh): the W1 rows of its nc first-layer units and the W2
// rows of its nj second-layer units, with biases and Adam state, in shared memory; W3/b3 replicated in
// every block and updated identically (bit-identical replicas). One step t:
//   A.  first layer of the own units (the batch landed by cp.async during step t-1), published into h1;
//   X1. gather all of h1; meanwhile the next batch's fetch and step t-1's off-path updates (W3/b3, own W2
//       rows and b2, the W2 rows published for the column slices);
//   B.  second layer of the own units (warp dot products), published into h2;
//   X2. gather all of h2 and the column slice W2[:, own units] (for dz1);
//   C.  in every block: last layer, softmax cross-entropy, dz3 and dz2 (cheaper to repeat than to
//       exchange); dz1 for the own units; their W1 rows and b1 updated.
// THE DESIGN DECISION: exchange words carry the tag of the step that wrote them (onchip_tagged_words.cuh)
// and a reader polls until its step's tag is there, so nothing else orders the blocks: the first
// version's two grid barriers a step (~1.2 us each) are gone. Buffers are double-buffered by step parity
// (a block runs at most one step ahead of any other); the launch's one grid barrier follows the clearing
// of the words each block will write (tags count the launch's own steps). W1's shape runs an instance
// with the shape compiled in (kPersistW1): the same code and order of operations, constant index math.
// Arithmetic is fp32 with the graph path's pixel scaling, dropout bits and Adam constants (so --validate
// compares to the float64 reference); sums run in another order than the graph path's GEMMs, so the two
// are not bit-identical to each other; each is bit-reproducible (no atomics but the divergence flag).
// MEASURED (H200): 20.17 ms an epoch, 10.76 us a step (w1-persistent.json); the phase notes hold the rest.
#pragma once
#include <cooperative_groups.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "check.cuh"
#include "onchip_segment_clock.cuh"
#include "errors.h"
#include "mlp/kernels.cuh"
#include "mlp/mlp_common.h"
#include "5c_persistent.h"
#include "5c_persistent_split.cuh"
#include "onchip_optimizer.cuh"
#include "onchip_pixels.cuh"
#include "onchip_softmax_loss.cuh"
#include "onchip_tagged_words.cuh"
#include "onchip_warp_ops.cuh"

namespace nb {
namespace mlp {

// ------------------------------------------------------------------ the kernel, stage by stage
// What one step t works on: its global step, exchange tag, batch buffer and exchange buffers (by
// parity), Adam's constants.
struct PersistStep {
  int t, par;
  int64_t s;          // the global step
  uint32_t T;         // this step's exchange tag (step t writes tag t + 1)
  bool more;          // another step follows in this launch
  const uint8_t* xb;  // this step's batch
  const int* lb;      // its labels
  xword *h1_words, *h2_words;  // this step's exchange words
  xword* w2now;       // step t's W2 (its column slices)
  AdamHyper hy;
};

// One block of the persistent kernel: its share of the parameters (shared memory), the shape, and
// one member function per stage of a step (A, X1, B, X2, C in the file's opening comment).
template <int NC, bool kW1>
struct PersistBlock : PersistDims<kW1> {
  static_assert(NC == 1 || NC == 2 || NC == 4 || NC == 8, "NC: 1, 2, 4 or 8 first-layer units per block");
  static_assert(!kW1 || NC == 1, "W1's instance: one first-layer unit per block");
  using Dims = PersistDims<kW1>;
  using Dims::B, Dims::D, Dims::H1, Dims::H2, Dims::C, Dims::nc, Dims::nj;
  using Dims::xs, Dims::ks, Dims::ld1, Dims::ld2, Dims::cp, Dims::ldp;
  static constexpr int nt = kPersistThreads, nwarps = kPersistThreads / 32;  // the launch's block size
  PersistParams p;
  PersistSmem sm;
  int tid, lane, wid;
  int c0, ncown, j0, njown;  // own first-layer units c0 .. c0 + ncown, second-layer units j0 .. j0 + njown
  bool adam, keep_grads;
  int nimg[kRowsPerWarp], nlab[kRowsPerWarp];  // the next step's rows of this warp

  __device__ __forceinline__ static PersistParams shape(PersistParams p) {
    if constexpr (kW1) {  // the plan chose this instance only for this shape, nc = 1 and nj as below
      p.B = Dims::B, p.D = Dims::D, p.H1 = Dims::H1, p.H2 = Dims::H2, p.C = Dims::C, p.nc = Dims::nc, p.nj = Dims::nj;
    }
    return p;
  }
  __device__ __forceinline__ PersistBlock(const PersistParams& pin, unsigned char* smem)
      : Dims(pin), p(shape(pin)), sm(smem, persist_layout(p, NC)) {
    tid = threadIdx.x, lane = tid & 31, wid = tid / 32;
    c0 = blockIdx.x * nc, ncown = max(0, min(nc, H1 - c0));
    j0 = blockIdx.x * nj, njown = max(0, min(nj, H2 - j0));
    adam = p.adam && p.adam_m != nullptr;
    keep_grads = p.grads_out != nullptr;
  }
  __device__ __forceinline__ size_t batch_bytes() const { return static_cast<size_t>(B) * xs; }

  // ---- before the first step: load what this block owns, clear the exchange words it will
  // write, start the first batch's copy
  __device__ __forceinline__ void load_owned() {
    for (int e = tid; e < D * NC; e += nt) {
      const int k = e / NC, c = e % NC;
      const size_t g = p.w0 + static_cast<size_t>(c0 + c) * D + k;
      const bool own = c < ncown;
      sm.w1[e] = own ? p.params[g] : 0.f;
      if (adam) sm.m1[e] = own ? p.adam_m[g] : 0.f, sm.v1[e] = own ? p.adam_v[g] : 0.f;
    }
    for (int c = tid; c < NC; c += nt) {
      const bool own = c < ncown;
      sm.b1[c] = own ? p.params[p.b0 + c0 + c] : 0.f;
      sm.mb1[c] = own && adam ? p.adam_m[p.b0 + c0 + c] : 0.f;
      sm.vb1[c] = own && adam ? p.adam_v[p.b0 + c0 + c] : 0.f;
    }
    for (int e = tid; e < njown * H1; e += nt) {
      const size_t g = p.w1 + static_cast<size_t>(j0) * H1 + e;
      const int es = (e / H1) * ld1 + e % H1;
      sm.w2r[es] = p.params[g];
      if (adam) sm.m2r[es] = p.adam_m[g], sm.v2r[es] = p.adam_v[g];
      xstore(p.w2_words + static_cast<size_t>(j0) * H1 + e, p.params[g], 1u);  // parity 0, tag 1: the launch's first step reads it
      xstore(p.w2_words + static_cast<size_t>(H2) * H1 + static_cast<size_t>(j0) * H1 + e, 0.f, 0u);
    }
    for (int j = tid; j < njown; j += nt) {
      sm.b2[j] = p.params[p.b1 + j0 + j];
      if (adam) sm.mb2[j] = p.adam_m[p.b1 + j0 + j], sm.vb2[j] = p.adam_v[p.b1 + j0 + j];
    }
    for (int e = tid; e < H2 * cp; e += nt) {
      const int n = e / cp, m = e % cp;
      const size_t g = p.w2 + static_cast<size_t>(m) * H2 + n;
      sm.w3[e] = m < C ? p.params[g] : 0.f;
      if (adam) sm.m3[e] = m < C ? p.adam_m[g] : 0.f, sm.v3[e] = m < C ? p.adam_v[g] : 0.f;
    }
    for (int j = tid; j < C; j += nt) {
      sm.b3[j] = p.params[p.b2 + j];
      if (adam) sm.mb3[j] = p.adam_m[p.b2 + j], sm.vb3[j] = p.adam_v[p.b2 + j];
    }
    for (int e = tid; e < B * NC; e += nt) sm.h1o[e] = 0.f;  // units past ncown stay 0
    for (int e = tid; e < 2 * persist_half_rows(B) * NC; e += nt) sm.dz1[e] = 0.f;  // and rows past B
    // Tags count this launch's steps (step t writes tag t + 1), so words left by an earlier launch
    // must not be mistaken for this one's: every block clears the words it will write, and one grid
    // barrier (the launch's only one, in the kernel) separates that from the first step.
    for (int e = tid; e < 2 * B * ncown; e += nt) {
      const int r = e / ncown, c = e % ncown;  // r runs over both parities' rows
      xstore(p.h1_words + static_cast<size_t>(r) * H1 + c0 + c, 0.f, 0u);
    }
    for (int e = tid; e < 2 * B * njown; e += nt) {
      const int r = e / njown, j = e % njown;
      xstore(p.h2_words + static_cast<size_t>(r) * H2 + j0 + j, 0.f, 0u);
    }
    for (int q = 0; q < kRowsPerWarp; ++q) {  // the first step's batch
      const int r = wid + q * nwarps;
      if (r >= B) break;
      const int img = __ldg(p.perm + static_cast<size_t>(p.i0) * B + r);
      copy_image_async(sm.xl + static_cast<size_t>(r) * xs, p.images + static_cast<size_t>(img) * D, D, lane);
      if (lane == 0) sm.lab[r] = __ldg(p.labels + img);
    }
    __pipeline_commit();
  }

  __device__ __forceinline__ PersistStep step(int t) const {
    PersistStep st;
    st.t = t, st.par = t & 1;
    st.s = p.s0 + t;
    st.T = static_cast<uint32_t>(t) + 1u;
    st.xb = sm.xl + st.par * batch_bytes();
    st.lb = sm.lab + st.par * B;
    st.h1_words = p.h1_words + static_cast<size_t>(st.par) * B * H1;
    st.h2_words = p.h2_words + static_cast<size_t>(st.par) * B * H2;
    st.w2now = p.w2_words + static_cast<size_t>(st.par) * H2 * H1;
    st.hy = AdamHyper{};
    if (adam) st.hy = (p.hyper != nullptr && st.s + 1 < p.hyper_n) ? p.hyper[st.s + 1] : adam_hyper(p.lr, st.s + 1);
    st.more = t + 1 < p.count;
    return st;
  }

  // next batch, part 1: its image indices, issued a whole first layer before their use
  __device__ __forceinline__ void fetch_next_indices(const PersistStep& st) {
    if (st.more)
      for (int q = 0; q < kRowsPerWarp; ++q) {
        const int r = wid + q * nwarps;
        if (r < B) nimg[q] = __ldg(p.perm + static_cast<size_t>(p.i0 + st.t + 1) * B + r);
      }
  }

  // ---- A: this batch has landed (cp.async issued during the previous step); first layer, own
  // units. Lane = batch row, warp = (group of 32 rows, slice of the pixels): a lane reads its row
  // 4 pixels at a time (one word, conflict-free thanks to the odd stride) and the 4 x NC weights
  // of those pixels (the same for every lane: a broadcast). Sums of byte * weight, per slice into
  // `part`, added and divided by 255 once per output; bias, ReLU, dropout -> own columns of h1,
  // published.
  __device__ __forceinline__ void first_layer(const PersistStep& st) {
    __pipeline_wait_prior(0);
    __syncthreads();
    const int groups = (B + 31) / 32, KW = D / 4, kws = (KW + ks - 1) / ks;
    const int g = wid % groups, q = wid / groups, r = g * 32 + lane;
    if (q < ks && r < B) {
      float acc[4][NC];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[i][c] = 0.f;
      const uint32_t* row = reinterpret_cast<const uint32_t*>(st.xb + static_cast<size_t>(r) * xs);
      const int kw1 = min(KW, (q + 1) * kws);
#pragma unroll 4
      for (int kw = q * kws; kw < kw1; ++kw) {
        const uint32_t xw = row[kw];
        float wv[4 * NC];  // W1 of pixels 4kw .. 4kw+3, own units: 4 * NC consecutive floats
#pragma unroll
        for (int v = 0; v < NC; ++v) {
          const float4 t4 = reinterpret_cast<const float4*>(sm.w1 + 4 * kw * NC)[v];
          wv[4 * v] = t4.x, wv[4 * v + 1] = t4.y, wv[4 * v + 2] = t4.z, wv[4 * v + 3] = t4.w;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float x = byte_value(xw, i);
#pragma unroll
          for (int c = 0; c < NC; ++c) acc[i][c] = fmaf(x, wv[i * NC + c], acc[i][c]);
        }
      }
#pragma unroll
      for (int c = 0; c < NC; ++c) sm.part[(q * B + r) * NC + c] = (acc[0][c] + acc[1][c]) + (acc[2][c] + acc[3][c]);
    }
    __syncthreads();
    for (int o = tid; o < B * ncown; o += nt) {
      const int r = o / ncown, c = o % ncown;
      float z = 0.f;
      for (int q = 0; q < ks; ++q) z += sm.part[(q * B + r) * NC + c];
      float h = fmaxf(z / 255.f + sm.b1[c], 0.f);
      if (p.dropout)
        h = dropout_bits_dev(p.key, 0u, static_cast<uint64_t>(st.s), static_cast<uint32_t>(r * H1 + c0 + c)) >= p.threshold
                ? h * p.scale
                : 0.f;
      sm.h1o[r * NC + c] = h;
      xstore(st.h1_words + static_cast<size_t>(r) * H1 + c0 + c, h, st.T);
    }
  }

  // ---- X1: all of h1. While its words travel: the next batch's fetch (part 2: images by
  // cp.async, labels into registers) and the previous step's off-critical-path updates.
  __device__ __forceinline__ void gather_h1(const PersistStep& st, const AdamHyper& hy_prev) {
    gather_rows(sm.h1, ld1, st.h1_words, B, H1, st.T, [&] {
      fetch_next_batch(st);
      if (st.t > 0) late_updates(hy_prev, st.w2now, st.T);
    });
    __syncthreads();
  }
  // next batch, part 2: the images by cp.async, the labels into registers
  __device__ __forceinline__ void fetch_next_batch(const PersistStep& st) {
    if (st.more) {
      for (int q = 0; q < kRowsPerWarp; ++q) {
        const int r = wid + q * nwarps;
        if (r >= B) break;
        copy_image_async(sm.xl + (st.par ^ 1) * batch_bytes() + static_cast<size_t>(r) * xs,
                         p.images + static_cast<size_t>(nimg[q]) * D, D, lane);
        nlab[q] = __ldg(p.labels + nimg[q]);
      }
      __pipeline_commit();
    }
  }

  // ---- B: second layer, own units (warp dot products) -> own columns of h2, published
  __device__ __forceinline__ void second_layer(const PersistStep& st) {
    const float* h1 = sm.h1;
    const float* w2r = sm.w2r;
    const float* b2 = sm.b2;
    warp_dot_gemm(
        B, njown, H1, [&](int m, int k) { return h1[m * ld1 + k]; }, [&](int k, int n) { return w2r[n * ld1 + k]; },
        [&](int m, int n, float acc) {
          float h = fmaxf(acc + b2[n], 0.f);
          if (p.dropout)
            h = dropout_bits_dev(p.key, 1u, static_cast<uint64_t>(st.s), static_cast<uint32_t>(m * H2 + j0 + n)) >=
                        p.threshold
                    ? h * p.scale
                    : 0.f;
          xstore(st.h2_words + static_cast<size_t>(m) * H2 + j0 + n, h, st.T);
        });
  }

  // next batch, part 3: its labels into shared memory
  __device__ __forceinline__ void store_next_labels(const PersistStep& st) {
    if (st.more && lane == 0)
      for (int q = 0; q < kRowsPerWarp; ++q) {
        const int r = wid + q * nwarps;
        if (r < B) sm.lab[(st.par ^ 1) * B + r] = nlab[q];
      }
  }

  // ---- X2: all of h2 (from the blocks that own second-layer units) and the column slice
  // W2[:, own units] that their owners published during X1 (for dz1)
  // (`between`: work for the wait, as gather_rows runs it; `after`: more words into shared memory
  // before the barrier. The pipelined rung draws a mask in the one and stores W3's words in the other.)
  template <class Between = NoWork, class After = NoWork>
  __device__ __forceinline__ void gather_h2(const PersistStep& st, Between between = {}, After after = {}) {
    const int j = tid / NC, c = tid % NC;
    const bool first = tid < H2 * NC && c < ncown;
    const xword* wp = st.w2now + static_cast<size_t>(j) * H1 + c0 + c;
    const xword w2c0 = first ? xload(wp) : 0;
    gather_rows(sm.h2, ld2, st.h2_words, B, H2, st.T, between);
    if (tid < H2 * NC) sm.w2c[tid] = first ? xvalue(wp, w2c0, st.T) : 0.f;
    for (int e = tid + nt; e < H2 * NC; e += nt) {
      const int jj = e / NC, cc = e % NC;
      const xword* q = st.w2now + static_cast<size_t>(jj) * H1 + c0 + cc;
      sm.w2c[e] = cc < ncown ? xvalue(q, xload(q), st.T) : 0.f;
    }
    after();
    __syncthreads();
  }

  // ---- C, in every block: the last layer, softmax cross-entropy and dz2 (10 x H2: cheaper to
  // repeat than to exchange), then the gradients of the own first-layer units.
  // C1: partial logits, lane = batch row, warp = (group of 32 rows, slice of H2): a lane reads its
  // h2 value once per hidden unit and the unit's C weights (one row of the transposed W3: cp / 4
  // broadcast float4 loads), C accumulators in registers.
  __device__ __forceinline__ void partial_logits() {
    const int groups = (B + 31) / 32, ks = nwarps / groups, kq = (H2 + ks - 1) / ks;
    const int g = wid % groups, q = wid / groups, r = g * 32 + lane;
    if (q < ks && r < B) {
      float acc[kMaxClasses];
#pragma unroll
      for (int n = 0; n < kMaxClasses; ++n) acc[n] = 0.f;
      const int k1 = min(H2, (q + 1) * kq);
      for (int k = q * kq; k < k1; ++k) {
        const float x = sm.h2[r * ld2 + k];
#pragma unroll
        for (int v = 0; v < kMaxClassStride / 4; ++v)
          if (4 * v < cp) {  // padding columns are 0: their sums stay 0 and are never read
            const float4 t4 = reinterpret_cast<const float4*>(sm.w3 + k * cp)[v];
            acc[4 * v] = fmaf(x, t4.x, acc[4 * v]);
            acc[4 * v + 1] = fmaf(x, t4.y, acc[4 * v + 1]);
            acc[4 * v + 2] = fmaf(x, t4.z, acc[4 * v + 2]);
            acc[4 * v + 3] = fmaf(x, t4.w, acc[4 * v + 3]);
          }
      }
#pragma unroll
      for (int n = 0; n < kMaxClasses; ++n)
        if (n < C) sm.part[(q * B + r) * ldp + n] = acc[n];  // lanes: rows ldp (odd) words apart
    }
    __syncthreads();
  }

  // C2: two rows a warp, one class a lane (half-warp shuffle trees): the slices' sums plus b3 are
  // the logits; softmax cross-entropy -> dz3 (kept in z3 for the deferred W3/b3 update) and the
  // row's loss; then dz2 = relu'(dz3 W3) for the row (W3 before its update): each lane of the
  // half-warp gets the row's C values of dz3 by shuffles and takes hidden units j, j + 16, ...
  __device__ __forceinline__ void softmax_dz2(const PersistStep& st) {
    const int half = lane >> 4, j = lane & 15, ks = nwarps / ((B + 31) / 32);
    const float inv = 1.f / static_cast<float>(B);
    for (int r0 = 2 * wid; r0 < B; r0 += 2 * nwarps) {
      const int r = r0 + half;
      const bool row = r < B, on = row && j < C;
      float z = -INFINITY;
      if (on) {
        z = sm.b3[j];
        for (int q = 0; q < ks; ++q) z += sm.part[(q * B + r) * ldp + j];
      }
      const SoftmaxRow sr = softmax_xent_half_warp(z, on, half, j, [&] { return row ? st.lb[r] : 0; }, inv);
      const float dz = sr.dz;
      if (on) sm.z3[r * C + j] = dz;
      if (row && j == 0) sm.rloss[r] = sr.lse - sr.zy;
      float d[kMaxClassStride];  // 0 past C
#pragma unroll
      for (int n = 0; n < kMaxClassStride; ++n) d[n] = __shfl_sync(0xffffffffu, dz, (half << 4) + n);
      if (row)
        for (int u = j; u < H2; u += 16) {
          float acc = 0.f;
          if (sm.h2[r * ld2 + u] > 0.f) {
#pragma unroll
            for (int v = 0; v < kMaxClassStride / 4; ++v)
              if (4 * v < cp) {
                const float4 t4 = reinterpret_cast<const float4*>(sm.w3 + u * cp)[v];
                acc = fmaf(d[4 * v], t4.x, acc);  // d and W3's padding columns are 0 past C
                acc = fmaf(d[4 * v + 1], t4.y, acc);
                acc = fmaf(d[4 * v + 2], t4.z, acc);
                acc = fmaf(d[4 * v + 3], t4.w, acc);
              }
            acc *= p.scale;
          }
          sm.dz2[r * ld2 + u] = acc;
        }
    }
    __syncthreads();
  }

  // the batch loss, by block 0's last warp: lane sums, then a fixed shuffle tree
  __device__ __forceinline__ void batch_loss(const PersistStep& st) {
    if (wid == nwarps - 1 && blockIdx.x == 0) batch_mean_loss(sm.rloss, B, lane, p.step_loss, p.bad_step, st.s);
  }

  // dz1 for the own first-layer units: relu'(dz2 W2[:, own]) (W2 of the step's start)
  __device__ __forceinline__ void dz1_own_units() {
    const float* dz2 = sm.dz2;
    const float* w2c = sm.w2c;
    const float* h1o = sm.h1o;
    float* dz1 = sm.dz1;
    warp_dot_gemm(
        B, ncown, H2, [&](int m, int k) { return dz2[m * ld2 + k]; }, [&](int k, int n) { return w2c[k * NC + n]; },
        [&](int m, int n, float acc) { dz1[m * NC + n] = h1o[m * NC + n] > 0.f ? acc * p.scale : 0.f; });
    __syncthreads();
  }

  // b1 of the own units, by the last warp (idle in the W1 update when the pixels' lane pairs fit the
  // other warps, as MNIST's 392 do)
  __device__ __forceinline__ void update_b1(const AdamHyper& hy) {
    if (wid == nwarps - 1)
      for (int c = lane; c < ncown; c += 32) {
        float g = 0.f;
#pragma unroll 8
        for (int r = 0; r < B; ++r) g += sm.dz1[r * NC + c];
        if (keep_grads) p.grads_out[p.b0 + c0 + c] = g;
        opt_apply(sm.b1[c], g, sm.mb1 + c, sm.vb1 + c, adam, p.lr, hy);
      }
  }
  // W1's gradient, lane pair (kw, h): g[i][c] = sum over rows of half h of batch xb of dz1[r][c] times
  // pixel 4kw + i of row r (as a byte; 0 when !on). A lane reads one word a row (4 pixels).
  __device__ __forceinline__ void pixel_grads(const uint8_t* xb, int kw, int h, bool on, float (&g)[4][NC]) const {
    const int RB = persist_half_rows(B);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int c = 0; c < NC; ++c) g[i][c] = 0.f;
    if (on) {
      const int r1 = min(B, (h + 1) * RB);
      for (int r0 = h * RB; r0 < r1; r0 += 4) {
        uint32_t xw[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
          xw[j] = r0 + j < B ? reinterpret_cast<const uint32_t*>(xb + static_cast<size_t>(r0 + j) * xs)[kw] : 0u;
        if constexpr (NC == 1) {
          const float4 d4 = *reinterpret_cast<const float4*>(sm.dz1 + r0);  // rows past B are 0
          const float d[4] = {d4.x, d4.y, d4.z, d4.w};
#pragma unroll
          for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) g[i][0] = fmaf(d[j], byte_value(xw[j], i), g[i][0]);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float d[NC];
            ld_units<NC>(sm.dz1 + (r0 + j) * NC, d);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const float x = byte_value(xw[j], i);
#pragma unroll
              for (int c = 0; c < NC; ++c) g[i][c] = fmaf(d[c], x, g[i][c]);
            }
          }
        }
      }
    }
  }
  // The pair's halves added (one shuffle each): tot[j][c] for pixel 4kw + 2h + j, first half's sum +
  // second half's. Every lane of the warp calls it.
  __device__ __forceinline__ static void pair_totals(const float (&g)[4][NC], int h, float (&tot)[2][NC]) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const float keep = h ? g[2 + j][c] : g[j][c], send = h ? g[j][c] : g[2 + j][c];
        const float recv = __shfl_xor_sync(0xffffffffu, send, 1);
        tot[j][c] = h ? recv + keep : keep + recv;
      }
  }

  // The own first-layer units' parameters: b1 (update_b1), and the own W1 rows: dW1[c0 + c][k] =
  // sum_r dz1[r][c] x[r][k], applied at once. A pair of lanes takes 4 pixels (one word a row),
  // each lane half of the rows (with MNIST's dense 196-word rows the pair's rows, 16 apart, share
  // a bank: a 2-way conflict); the halves are added with one shuffle and each lane updates 2 of
  // the 4 pixels.
  __device__ __forceinline__ void update_first_layer(const PersistStep& st) {
    update_b1(st.hy);
    const int KW = D / 4;
    for (int o0 = tid - lane; o0 < 2 * KW; o0 += nt) {  // warp-uniform bound: every lane shuffles
      const int o = o0 + lane, kw = o >> 1, h = o & 1;
      const bool on = o < 2 * KW;
      float g[4][NC];
      pixel_grads(st.xb, kw, h, on, g);
      float tot[2][NC];
      pair_totals(g, h, tot);
      if (!on) continue;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int k = 4 * kw + 2 * h + j;
        float w[NC], mm[NC], vv[NC];
        ld_units<NC>(sm.w1 + k * NC, w);
        if (adam) ld_units<NC>(sm.m1 + k * NC, mm), ld_units<NC>(sm.v1 + k * NC, vv);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          if (c >= ncown) continue;  // padding units stay 0
          float gc = tot[j][c];
          if (gc != 0.f) gc /= 255.f;  // (0 / 255 would take the division's slow path)
          if (keep_grads) p.grads_out[p.w0 + static_cast<size_t>(c0 + c) * D + k] = gc;
          opt_apply(w[c], gc, mm + c, vv + c, adam, p.lr, st.hy);
        }
        st_units<NC>(sm.w1 + k * NC, w);
        if (adam) st_units<NC>(sm.m1 + k * NC, mm), st_units<NC>(sm.v1 + k * NC, vv);
      }
    }
    __syncthreads();
  }

  // The updates nothing on a step's critical path waits for, run during the NEXT step's wait for
  // h1 (step t+1's first layer needs only W1; W3 is next read by step t+1's last layer, the own W2
  // rows by its second layer, their column slices by its dz1): dW3 = dz3^T h2 -> W3, b3 (the
  // replica), dW2[j0 + m][n] = sum_r dz2[r][j0 + m] h1[r][n] -> own W2 rows (published with `tag`
  // into `w2pub` for the column slices), b2. They read step t's h1, h2, dz2 and dz3 in shared
  // memory, which the next step overwrites only after them.
  __device__ __forceinline__ void late_updates(const AdamHyper& h, xword* w2pub, uint32_t tag) {
    // one round of tasks for W1's shapes (64 * 5 + 128 + 11 = 459 <= 512 threads): W3 in pairs of
    // rows (m, m + C2) that share each h2 load (consecutive tasks: the pairs of one unit n, so a
    // warp's accesses to the transposed W3 spread over the banks), own W2 elements, the biases
    const int C2 = (C + 1) / 2, n3 = H2 * C2, n2 = njown * H1, nb = C + njown;
    for (int o = tid; o < n3 + n2 + nb; o += nt) {
      if (o < n3) {
        const int m = o % C2, n = o / C2;
        const bool two = m + C2 < C;
        float g0 = 0.f, g1 = 0.f;
#pragma unroll 8
        for (int r = 0; r < B; ++r) {
          const float x = sm.h2[r * ld2 + n];
          g0 = fmaf(sm.z3[r * C + m], x, g0);
          if (two) g1 = fmaf(sm.z3[r * C + m + C2], x, g1);
        }
        if (keep_grads && blockIdx.x == 0) {
          p.grads_out[p.w2 + m * H2 + n] = g0;
          if (two) p.grads_out[p.w2 + (m + C2) * H2 + n] = g1;
        }
        const int e = n * cp + m;
        opt_apply(sm.w3[e], g0, sm.m3 + e, sm.v3 + e, adam, p.lr, h);
        if (two) opt_apply(sm.w3[e + C2], g1, sm.m3 + e + C2, sm.v3 + e + C2, adam, p.lr, h);
      } else if (o < n3 + n2) {
        update_w2(o - n3, h, w2pub, tag);
      } else {
        const int j = o - n3 - n2;
        if (j < C) {
          float g = 0.f;
#pragma unroll 8
          for (int r = 0; r < B; ++r) g += sm.z3[r * C + j];
          if (keep_grads && blockIdx.x == 0) p.grads_out[p.b2 + j] = g;
          opt_apply(sm.b3[j], g, sm.mb3 + j, sm.vb3 + j, adam, p.lr, h);
        } else {
          update_b2(j - C, h);
        }
      }
    }
  }

  // Own W2 element e2 (row j0 + e2 / H1, column e2 % H1): dW2 = sum_r dz2[r][row] h1[r][col], applied
  // and published into w2pub with `tag` (for the column slices).
  __device__ __forceinline__ void update_w2(int e2, const AdamHyper& h, xword* w2pub, uint32_t tag) {
    const int m = e2 / H1, n = e2 % H1, e = m * ld1 + n;
    const size_t gi = static_cast<size_t>(j0 + m) * H1 + n;
    float g = 0.f;
#pragma unroll 8
    for (int r = 0; r < B; ++r) g = fmaf(sm.dz2[r * ld2 + j0 + m], sm.h1[r * ld1 + n], g);
    if (keep_grads) p.grads_out[p.w1 + gi] = g;
    opt_apply(sm.w2r[e], g, sm.m2r + e, sm.v2r + e, adam, p.lr, h);
    xstore(w2pub + gi, sm.w2r[e], tag);
  }
  // b2 of own second-layer unit jj
  __device__ __forceinline__ void update_b2(int jj, const AdamHyper& h) {
    float g = 0.f;
#pragma unroll 8
    for (int r = 0; r < B; ++r) g += sm.dz2[r * ld2 + j0 + jj];
    if (keep_grads) p.grads_out[p.b1 + j0 + jj] = g;
    opt_apply(sm.b2[jj], g, sm.mb2 + jj, sm.vb2 + jj, adam, p.lr, h);
  }

  // after the last step: its deferred updates (nothing reads the W2 words they publish)
  __device__ __forceinline__ void finish(const AdamHyper& hy_last) {
    if (p.count > 0) late_updates(hy_last, p.w2_words + static_cast<size_t>(p.count & 1) * H2 * H1, static_cast<uint32_t>(p.count) + 1u);
    __syncthreads();
  }

  // ---- write back what this block owns (block 0 also writes the W3/b3 replica)
  __device__ __forceinline__ void write_back() {
    write_back_rows();
    write_back_replica();
  }
  __device__ __forceinline__ void write_back_rows() {
    write_back_first_layer();
    write_back_w2_rows();
    write_back_b2();
  }
  __device__ __forceinline__ void write_back_first_layer() {
    for (int e = tid; e < D * ncown; e += nt) {
      const int c = e / D, k = e % D;
      const size_t g = p.w0 + static_cast<size_t>(c0 + c) * D + k;
      p.params[g] = sm.w1[k * NC + c];
      if (adam) p.adam_m[g] = sm.m1[k * NC + c], p.adam_v[g] = sm.v1[k * NC + c];
    }
    for (int c = tid; c < ncown; c += nt) {
      p.params[p.b0 + c0 + c] = sm.b1[c];
      if (adam) p.adam_m[p.b0 + c0 + c] = sm.mb1[c], p.adam_v[p.b0 + c0 + c] = sm.vb1[c];
    }
  }
  __device__ __forceinline__ void write_back_w2_rows() {
    for (int e = tid; e < njown * H1; e += nt) {
      const size_t g = p.w1 + static_cast<size_t>(j0) * H1 + e;
      const int es = (e / H1) * ld1 + e % H1;
      p.params[g] = sm.w2r[es];
      if (adam) p.adam_m[g] = sm.m2r[es], p.adam_v[g] = sm.v2r[es];
    }
  }
  __device__ __forceinline__ void write_back_b2() {
    for (int j = tid; j < njown; j += nt) {
      p.params[p.b1 + j0 + j] = sm.b2[j];
      if (adam) p.adam_m[p.b1 + j0 + j] = sm.mb2[j], p.adam_v[p.b1 + j0 + j] = sm.vb2[j];
    }
  }
  __device__ __forceinline__ void write_back_replica() {
    if (blockIdx.x == 0) {
      for (int e = tid; e < C * H2; e += nt) {
        const int es = (e % H2) * cp + e / H2;
        p.params[p.w2 + e] = sm.w3[es];
        if (adam) p.adam_m[p.w2 + e] = sm.m3[es], p.adam_v[p.w2 + e] = sm.v3[es];
      }
      for (int j = tid; j < C; j += nt) {
        p.params[p.b2 + j] = sm.b3[j];
        if (adam) p.adam_m[p.b2 + j] = sm.mb3[j], p.adam_v[p.b2 + j] = sm.vb3[j];
      }
    }
  }
};

// The kernel: the block's setup, the launch's one grid barrier, then the steps, stage by stage
// (--breakdown's segments are the stamps' numbers).
template <int NC, bool kW1>
__global__ void __launch_bounds__(kPersistThreads, 1) p5_persistent_epoch(PersistParams pin) {
  extern __shared__ __align__(16) unsigned char smem[];
  PersistBlock<NC, kW1> blk(pin, smem);
  SegmentClock<kPersistSegments> clock;  // --breakdown: block 0's thread 0 (persist_segment_name)
  blk.load_owned();
  cooperative_groups::this_grid().sync();
  clock.start(blk.p.breakdown != nullptr && blockIdx.x == 0 && blk.tid == 0);
  AdamHyper hy_prev{};
  for (int t = 0; t < blk.p.count; ++t) {
    const PersistStep st = blk.step(t);
    blk.fetch_next_indices(st);
    blk.first_layer(st);         // A
    clock.stamp(0);
    blk.gather_h1(st, hy_prev);  // X1 (and step t-1's late updates)
    clock.stamp(1);
    blk.second_layer(st);        // B
    clock.stamp(2);
    blk.store_next_labels(st);
    blk.gather_h2(st);           // X2
    clock.stamp(3);
    blk.partial_logits();        // C1
    clock.stamp(4);
    blk.softmax_dz2(st);         // C2
    clock.stamp(5);
    blk.batch_loss(st);
    blk.dz1_own_units();
    clock.stamp(6);
    blk.update_first_layer(st);
    clock.stamp(7);
    hy_prev = st.hy;
  }
  blk.finish(hy_prev);
  clock.add_to(blk.p.breakdown);
  blk.write_back();
}

// ------------------------------------------------------------------ host side

template <int NC, bool kW1>
struct PersistKernel {
  static const void* ptr() { return reinterpret_cast<const void*>(&p5_persistent_epoch<NC, kW1>); }
};
inline const void* persist_kernel(const PersistPlan& pl) { return persist_instance<PersistKernel>(pl); }

inline PersistPlan plan_persistent(PersistParams& p, int requested_blocks, int device, bool specialize = true) {
  const std::string mode = "--launch persistent";
  PersistPlan pl = persist_split(p, requested_blocks, device, specialize, mode);
  persist_fit(pl, persist_kernel(pl), device, mode);
  return pl;
}

inline void launch_persistent(const PersistPlan& pl, const PersistParams& p, cudaStream_t st) {
  persist_launch(persist_kernel(pl), pl, p, st);
}

// Flops and global-memory bytes of one step (what the kernel moves between blocks and from the
// data set; parameters stay on chip). Exchange words are 8 bytes (value + tag); every block reads
// all of h1 and h2.
inline KernelCost persist_step_cost(const PersistParams& p, const PersistPlan& pl) {
  const double B = p.B, D = p.D, H1 = p.H1, H2 = p.H2, C = p.C, G = pl.blocks, w = sizeof(xword);
  KernelCost c;
  const double fwd = 2 * B * (D * H1 + H1 * H2 + H2 * C);
  c.flops = fwd /* forward */ + fwd /* weight gradients */ + 2 * B * (H1 * H2 + H2 * C) /* data gradients */ +
            3 * 2 * B * H2 * C * (G - 1) /* last layer, dz2 and dW3 repeated in every block */;
  c.bytes = B * D * G /* images, once per block */ + B * H1 * w * (1 + G) /* h1: written once, read by every block */ +
            B * H2 * w * (1 + G) /* h2 */ + H1 * H2 * w * 2 /* W2 rows published, column slices read */;
  c.calls = 0;
  return c;
}

}  // namespace mlp
}  // namespace nb
