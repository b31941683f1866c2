// phase5_batched/5e_pipelined.cuh — `--launch pipelined`: rung 5c's persistent kernel with fewer dependent
// phases a step. Same ownership (a block's W1 rows, W2 rows, a W3 replica in shared memory), same two
// exchanges of tagged words, same arithmetic in fp32; what changes is how many things in a step wait on
// the thing before them.
//
// WHAT IT ADDS OVER 5c (5c's step: A first layer -> X1 wait for h1 -> B second layer -> X2 wait for h2
// -> C1 partial logits -> C2 softmax + dz2 -> C3 dz1 -> C4 W1 update; --breakdown, H100 a975929, us:
// 1.76, 2.33, 1.06, 1.59, 0.71, 1.22, 0.32, 1.57 = 10.6 a step):
//   * the W1 update of step t and the first layer of step t+1 are ONE pass over the block's W1 rows: a
//     lane pair that has just updated its four pixels' weights multiplies them straight into the next
//     batch's rows (already in shared memory), a transposing warp reduction sums the pixels, and one
//     block barrier later the next h1 is published. 5c reads W1 twice and crosses two more barriers;
//   * the last layer and the softmax are one pass in registers: a half-warp per batch row, each lane
//     4 hidden units x the classes, a transposing half-warp reduction leaves lane j with logit j (5c
//     wrote 16 slices of partial logits, crossed a barrier and added them 16 loads deep);
//   * the dropout masks are drawn while the block waits (h2's during the wait for h1, the next h1's
//     during the wait for h2), not between a sum and its publication;
//   * the W3 replica's update reads dz3 as float4 rows (a task = one hidden unit x 4 classes), a third
//     of 5c's shared-memory wavefronts, so the previous step's updates leave the wait for h1 sooner.
// The fused pass needs a lane's forward sums for its half of the batch in registers: one first-layer
// unit a block and a batch of at most 32 rows (W1's split). Other splits run 5c's update and first
// layer (two passes) in the same place; every other change applies to every shape.
//
// THE DESIGN DECISION: the step is a chain of latencies, so merge links of the chain rather than
// make any link's arithmetic faster. Nothing is added to the exchanges; the first step of a launch
// runs the fused pass's forward half alone, so a launch of n steps and n launches of one step give
// bit-identical results.
//
// PREDICTION (written before the first run; H100, W1): X1 2.33 -> ~1.2 us (the updates' loads ~40%
// of 5c's; what is left is one L2 flag hop, 0.57 us in cluster_latency__h100, and the skew between
// blocks), B 1.06 -> ~0.7 (no Philox draw: --dropout 0 measured 0.38 less), X2 unchanged 1.6, C1+C2
// 1.93 -> ~1.1, dz1 0.3, W1 update + next first layer 3.33 -> ~2.1: ~7.0 us a step, ~13 ms an epoch.
// A floor for this structure on this GPU: 2 L2 hops (1.14 us) + the block-local issue time of a
// step's ~0.6 MFLOP a block (~0.6 us at 4 warps x 32 FMA a cycle and its byte conversions) + ~8
// block barriers and shared-memory round trips (~0.1 us each): ~2.5 us, 4.7 ms an epoch.
//
// MEASURED: see phase5_batched/main.cu's card (the records of the run that measured this rung).
#pragma once
#include "5c_persistent.cuh"
#include "5e_pipelined.h"

namespace nb {
namespace mlp {

// Shared memory past rung 5c's layout (bytes from the start of the dynamic buffer).
struct PipeLayout {
  size_t mask1, mask2, fpart, dz3, total;
};
__host__ __device__ inline PipeLayout pipe_layout(const PersistParams& p, int NC) {
  PipeLayout L{};
  size_t off = (persist_layout(p, NC).total + 15) / 16 * 16;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off = (off + bytes + 15) / 16 * 16;
    return at;
  };
  const size_t f = sizeof(float);
  L.mask1 = take(static_cast<size_t>(p.B) * NC * f);                  // next step's h1 mask (0 or 1/(1-p))
  L.mask2 = take(static_cast<size_t>(p.B) * (p.nj > 0 ? p.nj : 1) * f);  // this step's h2 mask
  L.fpart = take(static_cast<size_t>(kPersistThreads) * f);           // the fused pass's warp sums
  L.dz3 = take(static_cast<size_t>(p.B) * class_stride(p.C) * f);     // dz3, rows padded to 4-float groups
  L.total = off;
  return L;
}

// Transposing sum of 2^L values over the 2^L lanes that differ in the lane bits x0, x0/2, ...
// (x0 a power of two): each level keeps half the values and sends the other half to the partner, so
// 2^L - 1 shuffles replace L x 2^L. Afterwards a[0] holds the sum of value number
// sum_l bit(lane, x0 >> l) * 2^(L-1-l) over those lanes. The order of the additions is fixed.
template <int L, int X0, int N = (1 << L)>
__device__ __forceinline__ void transpose_sum(float (&a)[1 << L]) {
  if constexpr (N > 1) {  // one level a template instance: every index a constant, a stays in registers
    constexpr int n = N / 2;
    const bool hi = (threadIdx.x & X0) != 0;
#pragma unroll
    for (int i = 0; i < n; ++i) {
      const float lo_v = a[i], hi_v = a[i + n];
      const float recv = __shfl_xor_sync(0xffffffffu, hi ? lo_v : hi_v, X0);
      a[i] = (hi ? hi_v : lo_v) + recv;
    }
    transpose_sum<L, X0 / 2, n>(a);
  }
}

template <int NC, bool kW1>
struct PipeBlock : PersistBlock<NC, kW1> {
  using Base = PersistBlock<NC, kW1>;
  using Base::B, Base::D, Base::H1, Base::H2, Base::C, Base::nc, Base::nj;
  using Base::xs, Base::ld1, Base::ld2, Base::cp;
  using Base::nt, Base::nwarps, Base::p, Base::sm, Base::tid, Base::lane, Base::wid;
  using Base::c0, Base::ncown, Base::j0, Base::njown, Base::adam, Base::keep_grads;
  float *mask1, *mask2, *fpart, *dz3;
  bool fused;  // the fused W1 update + next first layer (NC == 1, B <= 32)

  __device__ __forceinline__ PipeBlock(const PersistParams& pin, unsigned char* smem) : Base(pin, smem) {
    const PipeLayout L = pipe_layout(p, NC);
    mask1 = reinterpret_cast<float*>(smem + L.mask1), mask2 = reinterpret_cast<float*>(smem + L.mask2);
    fpart = reinterpret_cast<float*>(smem + L.fpart), dz3 = reinterpret_cast<float*>(smem + L.dz3);
    fused = pipe_fuses(NC, B);
  }

  // ---- dropout masks, drawn while the block waits: the multiplier of each own unit (0: dropped)
  __device__ __forceinline__ void draw_h1_mask(int64_t s) {
    if (p.dropout)
      for (int o = tid; o < B * ncown; o += nt) {
        const int r = o / ncown, c = o % ncown;
        mask1[r * NC + c] =
            dropout_bits_dev(p.key, 0u, static_cast<uint64_t>(s), static_cast<uint32_t>(r * H1 + c0 + c)) >= p.threshold
                ? p.scale
                : 0.f;
      }
  }
  __device__ __forceinline__ void draw_h2_mask(int64_t s) {
    if (p.dropout)
      for (int o = tid; o < B * njown; o += nt) {
        const int r = o / njown, j = o % njown;
        mask2[r * njown + j] =
            dropout_bits_dev(p.key, 1u, static_cast<uint64_t>(s), static_cast<uint32_t>(r * H2 + j0 + j)) >= p.threshold
                ? p.scale
                : 0.f;
      }
  }

  // ---- B: second layer, own units (warp dot products, 5c's) with the mask drawn during X1
  __device__ __forceinline__ void second_layer(const PersistStep& st) {
    const float* h1 = sm.h1;
    const float* w2r = sm.w2r;
    const float* b2 = sm.b2;
    const float* m2 = mask2;
    const int nown = njown;
    const bool drop = p.dropout;
    warp_dot_gemm(
        B, njown, H1, [&](int m, int k) { return h1[m * ld1 + k]; }, [&](int k, int n) { return w2r[n * ld1 + k]; },
        [&](int m, int n, float acc) {
          float h = fmaxf(acc + b2[n], 0.f);
          if (drop) h = m2[m * nown + n] != 0.f ? h * m2[m * nown + n] : 0.f;
          xstore(st.h2x + static_cast<size_t>(m) * H2 + j0 + n, h, st.T);
        });
  }

  // ---- C: the last layer, softmax cross-entropy, dz3 and dz2 = relu'(dz3 W3) in one pass, a
  // half-warp per batch row. Lane j of the half-warp takes hidden units j, j + 16, ... and all the
  // classes (W3's transposed rows, 5c's broadcast float4 loads); transpose_sum leaves it the logit of
  // class j. Then 5c's softmax and dz2 (dz3 shared by shuffles), W3 before its update.
  __device__ __forceinline__ void last_layer_softmax(const PersistStep& st) {
    const int half = lane >> 4, j = lane & 15;
    const float inv = 1.f / static_cast<float>(B);
    for (int r0 = 2 * wid; r0 < B; r0 += 2 * nwarps) {  // warp-uniform: every lane shuffles
      const int r = r0 + half;
      const bool row = r < B, on = row && j < C;
      float a[16];
#pragma unroll
      for (int n = 0; n < 16; ++n) a[n] = 0.f;
      if (row)
        for (int u = j; u < H2; u += 16) {
          const float x = sm.h2[r * ld2 + u];
#pragma unroll
          for (int v = 0; v < kMaxClassStride / 4; ++v)
            if (4 * v < cp) {  // padding columns are 0
              const float4 t4 = reinterpret_cast<const float4*>(sm.w3 + u * cp)[v];
              a[4 * v] = fmaf(x, t4.x, a[4 * v]);
              a[4 * v + 1] = fmaf(x, t4.y, a[4 * v + 1]);
              a[4 * v + 2] = fmaf(x, t4.z, a[4 * v + 2]);
              a[4 * v + 3] = fmaf(x, t4.w, a[4 * v + 3]);
            }
        }
      transpose_sum<4, 8>(a);  // lane j: the sum for class j
      const float z = on ? a[0] + sm.b3[j] : -INFINITY;
      float mx = z;
#pragma unroll
      for (int w = 8; w >= 1; w >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, w));
      float sum = on ? expf(z - mx) : 0.f;
#pragma unroll
      for (int w = 8; w >= 1; w >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, w);
      const float lse = mx + logf(sum);
      const int y = row ? st.lb[r] : 0;
      const float zy = __shfl_sync(0xffffffffu, z, (half << 4) + y);
      const float dz = on ? (expf(z - lse) - (j == y ? 1.f : 0.f)) * inv : 0.f;
      if (row && j < cp) dz3[r * cp + j] = dz;  // padding classes 0
      if (row && j == 0) sm.rloss[r] = lse - zy;
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
                acc = fmaf(d[4 * v], t4.x, acc);
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

  // ---- W1 update of step `up` (null: none) and first layer of step `nx` (null: none), one pass.
  // Lane pairs as 5c's update: lane (kw, h) sums its half h of the rows of `up`'s batch for the four
  // pixels of word kw, the halves are exchanged by one shuffle, and each lane updates two pixels.
  // Then the pair swaps its new weights (two shuffles) and each lane multiplies the four into its
  // half of the rows of `nx`'s batch: fw[i] = row h * RB + i's partial sum. transpose_sum over the 16
  // lanes of the same h leaves lane l the warp's sum for row (l & 1) * RB + (l >> 1); the warps' sums
  // are added 4 at a time by 4 lanes and a shuffle pair; bias, ReLU, the mask drawn during X2, publish.
  // NC == 1 and B <= 32 (RB <= 16). Needs the batch of `nx` landed and visible (the caller's barrier).
  __device__ __forceinline__ void update_forward(const PersistStep* up, const PersistStep* nx) {
    if (up && wid == nwarps - 1)
      for (int c = lane; c < ncown; c += 32) {
        float g = 0.f;
#pragma unroll 8
        for (int r = 0; r < B; ++r) g += sm.dz1[r * NC + c];
        if (keep_grads) p.G[p.b0 + c0 + c] = g;
        opt_apply(sm.b1[c], g, sm.mb1 + c, sm.vb1 + c, adam, p.lr, up->hy);
      }
    const int KW = D / 4, RB = persist_half_rows(B);
    float fw[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) fw[i] = 0.f;
    for (int o0 = tid - lane; o0 < 2 * KW; o0 += nt) {  // warp-uniform bound: every lane shuffles
      const int o = o0 + lane, kw = o >> 1, h = o & 1;
      const bool on = o < 2 * KW;
      float wn[2] = {0.f, 0.f};  // this lane's two pixels' weights, updated
      if (up) {
        float g[4] = {0.f, 0.f, 0.f, 0.f};
        if (on) {
          const int r1 = min(B, (h + 1) * RB);
          for (int r0 = h * RB; r0 < r1; r0 += 4) {
            uint32_t xw[4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
              xw[j] = r0 + j < B ? reinterpret_cast<const uint32_t*>(up->xb + static_cast<size_t>(r0 + j) * xs)[kw] : 0u;
            const float4 d4 = *reinterpret_cast<const float4*>(sm.dz1 + r0);  // rows past B are 0
            const float d[4] = {d4.x, d4.y, d4.z, d4.w};
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
              for (int i = 0; i < 4; ++i) g[i] = fmaf(d[j], byte_value(xw[j], i), g[i]);
          }
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {  // pixels 4kw + 2h + j: first half's sum + second half's
          const float keep = h ? g[2 + j] : g[j], send = h ? g[j] : g[2 + j];
          const float recv = __shfl_xor_sync(0xffffffffu, send, 1);
          float gc = h ? recv + keep : keep + recv;
          if (!on) continue;
          const int k = 4 * kw + 2 * h + j;
          if (gc != 0.f) gc /= 255.f;  // (0 / 255 would take the division's slow path)
          if (keep_grads) p.G[p.w0 + static_cast<size_t>(c0) * D + k] = gc;
          float w = sm.w1[k];
          opt_apply(w, gc, sm.m1 + k, sm.v1 + k, adam, p.lr, up->hy);
          sm.w1[k] = w;
          wn[j] = w;
        }
      } else if (on) {
        wn[0] = sm.w1[4 * kw + 2 * h], wn[1] = sm.w1[4 * kw + 2 * h + 1];
      }
      if (nx) {
        const float q0 = __shfl_xor_sync(0xffffffffu, wn[0], 1), q1 = __shfl_xor_sync(0xffffffffu, wn[1], 1);
        const float w4[4] = {h ? q0 : wn[0], h ? q1 : wn[1], h ? wn[0] : q0, h ? wn[1] : q1};
        if (on)
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            const int r = h * RB + i;
            if (i < RB && r < B) {
              const uint32_t xw = reinterpret_cast<const uint32_t*>(nx->xb + static_cast<size_t>(r) * xs)[kw];
#pragma unroll
              for (int e = 0; e < 4; ++e) fw[i] = fmaf(byte_value(xw, e), w4[e], fw[i]);
            }
          }
      }
    }
    if (!nx) {
      __syncthreads();
      return;
    }
    const int nwu = min(nwarps, (2 * KW + 31) / 32);  // warps that took pixels
    transpose_sum<4, 16>(fw);
    if (wid < nwu) fpart[wid * 32 + lane] = fw[0];
    __syncthreads();
    if (tid < 128) {  // slot s = a lane of the warps above; 4 threads a slot, each a quarter of the warps
      const int s = tid >> 2, q = tid & 3;
      float z = 0.f;
      for (int w = q; w < nwu; w += 4) z += fpart[w * 32 + s];
      z += __shfl_xor_sync(0xffffffffu, z, 1);
      z += __shfl_xor_sync(0xffffffffu, z, 2);
      const int i = s >> 1, r = (s & 1) * RB + i;
      if (q == 0 && i < RB && r < B) {
        float hv = fmaxf(z / 255.f + sm.b1[0], 0.f);
        if (p.dropout) hv = mask1[r] != 0.f ? hv * mask1[r] : 0.f;
        sm.h1o[r] = hv;
        xstore(nx->h1x + static_cast<size_t>(r) * H1 + c0, hv, nx->T);
      }
    }
  }

  // The updates nothing on the critical path waits for (5c's late_updates, same tasks and order of
  // sums except W3's): a W3 task is one hidden unit n and a group of 4 classes, reading dz3 rows as
  // float4 (one load a batch row for 4 weights). Run during the next step's wait for h1.
  __device__ __forceinline__ void late_updates(const AdamHyper& h, xword* w2pub, uint32_t tag) {
    const int G4 = cp / 4, n3 = H2 * G4, n2 = njown * H1, nb = C + njown;
    for (int o = tid; o < n3 + n2 + nb; o += nt) {
      if (o < n3) {
        const int n = o / G4, m0 = 4 * (o % G4);
        float g[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 8
        for (int r = 0; r < B; ++r) {
          const float x = sm.h2[r * ld2 + n];
          const float4 d4 = *reinterpret_cast<const float4*>(dz3 + r * cp + m0);
          g[0] = fmaf(d4.x, x, g[0]), g[1] = fmaf(d4.y, x, g[1]), g[2] = fmaf(d4.z, x, g[2]), g[3] = fmaf(d4.w, x, g[3]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int m = m0 + i;
          if (m >= C) break;
          if (keep_grads && blockIdx.x == 0) p.G[p.w2 + m * H2 + n] = g[i];
          const int e = n * cp + m;
          opt_apply(sm.w3[e], g[i], sm.m3 + e, sm.v3 + e, adam, p.lr, h);
        }
      } else if (o < n3 + n2) {
        const int m = (o - n3) / H1, n = (o - n3) % H1, e = m * ld1 + n;
        const size_t gi = static_cast<size_t>(j0 + m) * H1 + n;
        float g = 0.f;
#pragma unroll 8
        for (int r = 0; r < B; ++r) g = fmaf(sm.dz2[r * ld2 + j0 + m], sm.h1[r * ld1 + n], g);
        if (keep_grads) p.G[p.w1 + gi] = g;
        opt_apply(sm.w2r[e], g, sm.m2r + e, sm.v2r + e, adam, p.lr, h);
        xstore(w2pub + gi, sm.w2r[e], tag);
      } else {
        const int j = o - n3 - n2;
        float g = 0.f;
        if (j < C) {
#pragma unroll 8
          for (int r = 0; r < B; ++r) g += dz3[r * cp + j];
          if (keep_grads && blockIdx.x == 0) p.G[p.b2 + j] = g;
          opt_apply(sm.b3[j], g, sm.mb3 + j, sm.vb3 + j, adam, p.lr, h);
        } else {
          const int jj = j - C;
#pragma unroll 8
          for (int r = 0; r < B; ++r) g += sm.dz2[r * ld2 + j0 + jj];
          if (keep_grads) p.G[p.b1 + j0 + jj] = g;
          opt_apply(sm.b2[jj], g, sm.mb2 + jj, sm.vb2 + jj, adam, p.lr, h);
        }
      }
    }
  }
  __device__ __forceinline__ void finish(const AdamHyper& hy_last) {
    if (p.count > 0) late_updates(hy_last, p.w2x + static_cast<size_t>(p.count & 1) * H2 * H1, static_cast<uint32_t>(p.count) + 1u);
    __syncthreads();
  }
};

// The kernel: 5c's setup and grid barrier, the first step's forward, then the steps.
template <int NC, bool kW1>
__global__ void __launch_bounds__(kPersistThreads, 1) p5_pipelined_epoch(PersistParams pin) {
  static_assert(NC == 1 || NC == 2 || NC == 4 || NC == 8, "NC: 1, 2, 4 or 8 first-layer units per block");
  static_assert(!kW1 || NC == 1, "W1's instance: one first-layer unit per block");
  extern __shared__ __align__(16) unsigned char smem[];
  PipeBlock<NC, kW1> blk(pin, smem);
  SegmentClock<kPipeSegments> clock;  // --breakdown: block 0's thread 0 (pipe_segment_name)
  const bool stamping = blk.p.breakdown != nullptr;
  blk.load_owned();
  cooperative_groups::this_grid().sync();
  if (blk.p.count > 0) {  // the first step's first layer (the forward half of the fused pass)
    const PersistStep st0 = blk.step(0);
    if (blk.fused) {
      blk.draw_h1_mask(st0.s);
      __pipeline_wait_prior(0);
      __syncthreads();
      blk.update_forward(nullptr, &st0);
    } else {
      blk.first_layer(st0);
    }
  }
  clock.start(stamping && blockIdx.x == 0 && blk.tid == 0);
  AdamHyper hy_prev{};
  for (int t = 0; t < blk.p.count; ++t) {
    const PersistStep st = blk.step(t);
    blk.fetch_next_indices(st);
    gather_rows(blk.sm.h1, blk.ld1, st.h1x, blk.B, blk.H1, st.T, [&] {  // X1
      blk.fetch_next_batch(st);
      if (t > 0) blk.late_updates(hy_prev, st.w2now, st.T);
      blk.draw_h2_mask(st.s);
      if (stamping) __syncthreads(), clock.stamp(0);  // (only when timing the parts: splits X1)
    });
    __syncthreads();
    clock.stamp(1);
    blk.second_layer(st);  // B
    clock.stamp(2);
    blk.store_next_labels(st);
    blk.gather_h2(st, [&] {  // X2
      if (blk.fused && st.more) blk.draw_h1_mask(st.s + 1);
    });
    clock.stamp(3);
    blk.last_layer_softmax(st);  // C
    clock.stamp(4);
    blk.batch_loss(st);
    __pipeline_wait_prior(0);  // the next batch (its barrier: the one that ends dz1)
    blk.dz1_own_units();
    clock.stamp(5);
    if (blk.fused) {
      if (st.more) {
        const PersistStep nx = blk.step(t + 1);
        blk.update_forward(&st, &nx);
      } else {
        blk.update_forward(&st, nullptr);
      }
    } else {
      blk.update_first_layer(st);
      if (st.more) blk.first_layer(blk.step(t + 1));
    }
    clock.stamp(6);
    hy_prev = st.hy;
  }
  blk.finish(hy_prev);
  clock.add_to(blk.p.breakdown);
  blk.write_back();
}

// ------------------------------------------------------------------ host side

template <int NC, bool kW1 = false>
inline const void* pipe_kernel_ptr() {
  return reinterpret_cast<const void*>(&p5_pipelined_epoch<NC, kW1>);
}
inline const void* pipe_kernel(const PersistPlan& pl) {
  if (pl.specialized) return pipe_kernel_ptr<1, true>();
  switch (pl.NC) {
    case 1: return pipe_kernel_ptr<1>();
    case 2: return pipe_kernel_ptr<2>();
    case 4: return pipe_kernel_ptr<4>();
    default: return pipe_kernel_ptr<8>();
  }
}

// 5c's plan (the split, its checks), then this kernel's shared memory and residency.
inline PersistPlan plan_pipelined(PersistParams& p, int requested_blocks, int device, bool specialize = true) {
  PersistPlan pl;
  try {
    pl = plan_persistent(p, requested_blocks, device, specialize);
  } catch (const Error& e) {  // the same limits, named after this launch mode
    std::string m = e.what();
    const std::string from = "--launch persistent", to = "--launch pipelined";
    if (m.compare(0, from.size(), from) == 0) m.replace(0, from.size(), to);
    throw Error(e.code, m);
  }
  int sms = 0, smem_optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  pl.smem = pipe_layout(p, pl.NC).total;
  if (pl.smem > static_cast<size_t>(smem_optin))
    throw Error(kExitUsage, "--launch pipelined: needs " + std::to_string(pl.smem) + " bytes of shared memory per block, the GPU offers " +
                                std::to_string(smem_optin) + " (smaller --batch or widths, more --blocks, or --launch graph)");
  const void* k = pipe_kernel(pl);
  CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(pl.smem)));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kPersistThreads, pl.smem));
  if (per_sm * sms < pl.blocks)
    throw Error(kExitUsage, "--launch pipelined: " + std::to_string(pl.blocks) + " blocks cannot all be resident (" +
                                std::to_string(per_sm) + " per SM x " + std::to_string(sms) + " SMs)");
  return pl;
}

inline void launch_pipelined(const PersistPlan& pl, PersistParams p, cudaStream_t st) {
  void* args[] = {&p};
  CUDA_CHECK(cudaLaunchCooperativeKernel(pipe_kernel(pl), dim3(pl.blocks), dim3(kPersistThreads), args, pl.smem, st));
  CHECK_LAUNCH();
}

}  // namespace mlp
}  // namespace nb
