// phase5_batched/5e_pipelined.cuh — rung 5e, `--launch pipelined`: rung 5c's persistent kernel with fewer
// dependent phases a step.
// BUILDS ON 5c: the same split of the units (5c_persistent_split.cuh), the same two exchanges of tagged
// words, the same stages and fp32 arithmetic (PipeBlock derives from PersistBlock). WHAT IT CHANGES:
//   * the W1 update of step t and the first layer of step t+1 are ONE pass over the block's W1 rows
//     (update_forward): a lane pair that has just updated its four pixels' weights multiplies them into
//     the next batch's rows, a transposing warp reduction sums the pixels, one barrier later the next h1
//     is published (5c reads W1 twice, across two more barriers);
//   * the small layers' updates leave the waits: the pass's idle warps update W2's column of the own
//     first-layer unit (owned and published here; the rows' owners gather them with h1), the block's
//     slice of W3/b3 (gathered into every replica with h2) and b2 (5c: all of them while h1 travels);
//   * the dropout masks are drawn while the block waits, the batch indices a step ahead;
//   * blocks that own no second-layer unit do not read h1.
// The fused pass keeps a lane's forward sums for half the batch in registers: one first-layer unit a
// block and at most 32 rows (W1's split, pipe_fuses); other splits run 5c's update, first layer and late
// updates in the same places (plus the W3 slices and the masks).
// THE DESIGN DECISION: a step is a chain of latencies, so merge links of the chain and take work off it
// rather than make one link's arithmetic faster. The first step of a launch runs the fused pass's
// forward half alone, so n steps in one launch or in n launches give the same bits.
// MEASURED (H100, bench_mlp.sh at a7140e0): 18.76 ms an epoch, 9.8 us a step
// (phase5_batched__w1-pipelined.json; 5c 19.59 ms in the same run). The exchange and the blocks' skew,
// not the work, bound it (~7 us a step floor); the prediction, breakdown and ncu counts: the phase notes.
#pragma once
#include "5c_persistent.cuh"
#include "5e_pipelined.h"
#include "onchip_optimizer.cuh"
#include "onchip_smem_carve.cuh"

namespace nb {
namespace mlp {

// Shared memory past rung 5c's layout (bytes from the start of the dynamic buffer).
struct PipeLayout {
  size_t mask1, mask2, fpart, m2c, v2c, total;
};
__host__ __device__ inline PipeLayout pipe_layout(const PersistParams& p, int NC) {
  PipeLayout L{};
  SmemCarve<16> carve(persist_layout(p, NC).total);  // past 5c's layout
  const auto take = [&](size_t bytes) { return carve.take(bytes); };
  const size_t f = sizeof(float);
  L.mask1 = take(static_cast<size_t>(p.B) * NC * f);                  // next step's h1 mask (0 or 1/(1-p))
  L.mask2 = take(static_cast<size_t>(p.B) * (p.nj > 0 ? p.nj : 1) * f);  // this step's h2 mask
  L.fpart = take(static_cast<size_t>(kPersistThreads) * f);           // the fused pass's warp sums
  L.m2c = take(static_cast<size_t>(p.H2) * NC * f);                   // Adam's state of the own W2 column (fused())
  L.v2c = take(static_cast<size_t>(p.H2) * NC * f);
  L.total = carve.off;
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
  float *mask1, *mask2, *fpart;
  float *m2c, *v2c;  // fused(): the block owns W2's column of its first-layer unit (sm.w2c) and updates it
  bool fused_;  // the fused W1 update + next first layer (NC == 1, B <= 32); W1's instance: always
  __device__ __forceinline__ bool fused() const {
    if constexpr (kW1) return true;
    else if constexpr (NC != 1) return false;  // (the fused pass is not compiled for these)
    else return fused_;
  }
  int Q, q0, nq;  // W3 and b3 as Q = C H2 + C elements (W3 row-major, then b3); this block owns q0 .. q0 + nq

  __device__ __forceinline__ PipeBlock(const PersistParams& pin, unsigned char* smem) : Base(pin, smem) {
    const PipeLayout L = pipe_layout(p, NC);
    mask1 = reinterpret_cast<float*>(smem + L.mask1), mask2 = reinterpret_cast<float*>(smem + L.mask2);
    fpart = reinterpret_cast<float*>(smem + L.fpart);
    m2c = reinterpret_cast<float*>(smem + L.m2c), v2c = reinterpret_cast<float*>(smem + L.v2c);
    fused_ = pipe_fuses(NC, B);
    Q = C * H2 + C;
    const int per = (Q + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
    q0 = blockIdx.x * per, nq = max(0, min(per, Q - q0));
  }

  // ---- before the first step: 5c's, and the W3/b3 words this block will publish cleared (both
  // parities: tags count the launch's steps, and the launch's grid barrier follows)
  __device__ __forceinline__ void load_owned() {
    Base::load_owned();
    for (int o = tid; o < 2 * nq; o += nt) xstore(p.w3_words + (o & 1) * Q + q0 + (o >> 1), 0.f, 0u);
    if (fused())  // the own W2 column and its Adam state (5c gathers the column from the rows' owners)
      for (int j = tid; j < H2; j += nt) {
        const size_t g = p.w1 + static_cast<size_t>(j) * H1 + c0;
        const bool own = ncown > 0;
        sm.w2c[j] = own ? p.params[g] : 0.f;
        m2c[j] = own && adam ? p.adam_m[g] : 0.f, v2c[j] = own && adam ? p.adam_v[g] : 0.f;
      }
  }
  // the batch indices of step t (< count) into registers, two steps before their use
  __device__ __forceinline__ void fetch_indices(int t) {
    if (t < p.count)
      for (int q = 0; q < kRowsPerWarp; ++q) {
        const int r = wid + q * nwarps;
        if (r < B) this->nimg[q] = __ldg(p.perm + static_cast<size_t>(p.i0 + t) * B + r);
      }
  }
  // the position of W3/b3 element q in the replica
  __device__ __forceinline__ float& replica(int q) const { return q < C * H2 ? sm.w3[(q % H2) * cp + q / H2] : sm.b3[q - C * H2]; }

  // ---- dropout masks, drawn while the block waits: the multiplier of each own unit (0: dropped)
  __device__ __forceinline__ void draw_h1_mask(int64_t s) {
    if (p.dropout)
      for (int o = nt - 1 - tid; o < B * ncown; o += nt) {  // the last threads: the updates start at 0
        const int r = o / ncown, c = o % ncown;
        mask1[r * NC + c] =
            dropout_bits_dev(p.key, 0u, static_cast<uint64_t>(s), static_cast<uint32_t>(r * H1 + c0 + c)) >= p.threshold
                ? p.scale
                : 0.f;
      }
  }
  __device__ __forceinline__ void draw_h2_mask(int64_t s) {
    if (p.dropout)
      for (int o = nt - 1 - tid; o < B * njown; o += nt) {
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
          xstore(st.h2_words + static_cast<size_t>(m) * H2 + j0 + n, h, st.T);
        });
  }

  // ---- fused(): step `up`'s updates of the small layers, by the warps the fused pass gives no pixels
  // (W1: warps 13 to 15, less the lane that updates b1), in the pass's shadow instead of the next wait
  // for h1 (where they held up the second layer's owners: 5c's late updates). Tasks:
  //   * W2's column of the own first-layer unit, which this block owns (sm.w2c, Adam's state in
  //     m2c/v2c): dW2[j][c0] = sum_r dz2[r][j] h1[r][c0] (5c's order of the sums: the same bits as
  //     its row owners'), after dz1 has used the column; published for step `nx` (null: none), whose
  //     second-layer owners gather their rows from the columns while h1 travels (gather_h1);
  //   * the block's slice of W3 and b3 (update_w3_element), published for `nx`'s gather with h2;
  //   * b2 of the own second-layer units.
  __device__ __forceinline__ void update_small_layers(const PersistStep& up, const PersistStep* nx) {
    const int nwu = min(nwarps, (D / 2 + 31) / 32);  // warps with pixels (2 D / 4 lanes)
    const int hw0 = min(nwu, nwarps - 1);             // helpers: warps hw0 .. the last, less b1's lane
    if (wid < hw0 || tid == nt - 32) return;
    const int h = tid - 32 * hw0 - (tid > nt - 32 ? 1 : 0), nh = 32 * (nwarps - hw0) - 1;
    const int n2 = ncown > 0 ? H2 : 0;
    xword* w3pub = nx ? p.w3_words + static_cast<size_t>(nx->par) * Q : nullptr;
    for (int o = h; o < n2 + nq + njown; o += nh) {  // (W1: 71 tasks, 95 helpers: one task each)
      if (o < n2) {
        const int j = o;
        float g = 0.f;
#pragma unroll 8
        for (int r = 0; r < B; ++r) g = fmaf(sm.dz2[r * ld2 + j], sm.h1o[r * NC], g);
        const size_t gi = static_cast<size_t>(j) * H1 + c0;
        if (keep_grads) p.grads_out[p.w1 + gi] = g;
        opt_apply(sm.w2c[j], g, m2c + j, v2c + j, adam, p.lr, up.hy);
        if (nx) xstore(nx->w2now + gi, sm.w2c[j], nx->T);
      } else if (o < n2 + nq) {
        update_w3_element(o - n2, up.hy, w3pub, nx ? nx->T : 0u);
      } else {
        this->update_b2(o - n2 - nq, up.hy);
      }
    }
  }
  // ---- X1 (the blocks that own second-layer units): all of h1 and, fused() after the first step,
  // the own W2 rows from the columns' owners (published in the previous step's fused pass)
  template <class Between>
  __device__ __forceinline__ void gather_h1(const PersistStep& st, Between between) {
    const bool rows = fused() && st.t > 0;
    const int n2 = njown * H1;
    const xword* src = st.w2now + static_cast<size_t>(j0) * H1;
    const xword r0 = rows && tid < n2 ? xload(src + tid) : 0;
    gather_rows(sm.h1, ld1, st.h1_words, B, H1, st.T, between);
    if (rows)
      for (int e = tid; e < n2; e += nt) sm.w2r[(e / H1) * ld1 + e % H1] = xvalue(src + e, e == tid ? r0 : xload(src + e), st.T);
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
    if (up) this->update_b1(up->hy), update_small_layers(*up, nx);
    const int KW = D / 4, RB = persist_half_rows(B);
    float fw[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) fw[i] = 0.f;
    for (int o0 = tid - lane; o0 < 2 * KW; o0 += nt) {  // warp-uniform bound: every lane shuffles
      const int o = o0 + lane, kw = o >> 1, h = o & 1;
      const bool on = o < 2 * KW;
      float wn[2] = {0.f, 0.f};  // this lane's two pixels' weights, updated
      if (up) {
        float g[4][NC], tot[2][NC];
        this->pixel_grads(up->xb, kw, h, on, g);
        this->pair_totals(g, h, tot);
        float gc[2];  // pixels 4kw + 2h + j
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          gc[j] = tot[j][0];
          if (gc[j] != 0.f) gc[j] /= 255.f;  // (0 / 255 would take the division's slow path)
        }
        if (on) {
          const int k = 4 * kw + 2 * h;  // the lane's two pixels: k, k + 1
          if (keep_grads) p.grads_out[p.w0 + static_cast<size_t>(c0) * D + k] = gc[0], p.grads_out[p.w0 + static_cast<size_t>(c0) * D + k + 1] = gc[1];
          const float2 w2 = *reinterpret_cast<const float2*>(sm.w1 + k);
          wn[0] = w2.x, wn[1] = w2.y;
          opt_apply2(wn, gc, sm.m1 + k, sm.m1 + k + 1, sm.v1 + k, sm.v1 + k + 1, adam, p.lr, up->hy);
          *reinterpret_cast<float2*>(sm.w1 + k) = make_float2(wn[0], wn[1]);
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
    constexpr int kSlotThreads = 4, kSumThreads = 32 * kSlotThreads;  // 32 slots (lanes), 4 threads each
    if (tid < kSumThreads) {  // slot s = a lane of the warps above; 4 threads a slot, each a quarter of the warps
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
        xstore(nx->h1_words + static_cast<size_t>(r) * H1 + c0, hv, nx->T);
      }
    }
  }

  // Splits without the fused pass (fused() makes these in update_small_layers): the previous step's
  // updates that nothing on the critical path waits for, run while h1 travels:
  // the own W2 rows (5c's tasks and order of sums; published for the column slices) and b2, needed
  // by this step's second layer; and the block's slice of W3 and b3 (update_w3_slice below), needed
  // by this step's last layer through the gather with h2. They read the previous step's h1, h2, dz2
  // and dz3, which this step's gathers and softmax overwrite only after them.
  __device__ __forceinline__ void late_updates_w2(const AdamHyper& h, xword* w2pub, uint32_t tag) {
    const int n2 = njown * H1;
    for (int o = tid; o < n2 + njown; o += nt) {
      if (o < n2) this->update_w2(o, h, w2pub, tag);
      else this->update_b2(o - n2, h);
    }
  }
  // The block's slice of W3 and b3 (nq of the Q elements, a few), updated from the previous step's
  // h2 and dz3 and published for every block's replica (gathered with h2). The tasks start half a
  // block away from the W2 rows' (thread 0 up) and the masks' (the last threads).
  __device__ __forceinline__ void update_w3_slice(const AdamHyper& h, xword* w3pub, uint32_t tag) {
    for (int o = (tid + nt / 2) % nt; o < nq; o += nt) update_w3_element(o, h, w3pub, tag);
  }
  // element o of the slice (published unless w3pub is null)
  __device__ __forceinline__ void update_w3_element(int o, const AdamHyper& h, xword* w3pub, uint32_t tag) {
    const int q = q0 + o;
    float g = 0.f;
    if (q < C * H2) {
      const int m = q / H2, n = q % H2;
#pragma unroll 8
      for (int r = 0; r < B; ++r) g = fmaf(sm.z3[r * C + m], sm.h2[r * ld2 + n], g);
      const int e = n * cp + m;
      opt_apply(sm.w3[e], g, sm.m3 + e, sm.v3 + e, adam, p.lr, h);
      if (w3pub) xstore(w3pub + q, sm.w3[e], tag);
    } else {
      const int j = q - C * H2;
#pragma unroll 8
      for (int r = 0; r < B; ++r) g += sm.z3[r * C + j];
      opt_apply(sm.b3[j], g, sm.mb3 + j, sm.vb3 + j, adam, p.lr, h);
      if (w3pub) xstore(w3pub + q, sm.b3[j], tag);
    }
    if (keep_grads) p.grads_out[q < C * H2 ? p.w2 + q : p.b2 + (q - C * H2)] = g;
  }

  // ---- X2: 5c's gather_h2, and (after the first step) the W3/b3 words its owners published during
  // this step's wait for h1, loaded in the same first round, into the replica
  template <class Between>
  __device__ __forceinline__ void gather_h2(const PersistStep& st, Between between) {
    const xword* w3src = p.w3_words + static_cast<size_t>(st.par) * Q;
    const bool w3 = st.t > 0 && tid < Q;
    const xword w30 = w3 ? xload(w3src + tid) : 0;
    const auto w3words = [&] {
      if (w3) {
        replica(tid) = xvalue(w3src + tid, w30, st.T);
        for (int q = tid + nt; q < Q; q += nt) replica(q) = xvalue(w3src + q, xload(w3src + q), st.T);
      }
    };
    if (fused()) {  // the own W2 column is in shared memory already
      gather_rows(sm.h2, ld2, st.h2_words, B, H2, st.T, between);
      w3words();
      __syncthreads();
    } else {
      Base::gather_h2(st, between, w3words);
    }
  }

  // ---- write back: the own rows (5c's) and the own W3/b3 slice (the replicas are not all current)
  __device__ __forceinline__ void write_back() {
    this->write_back_first_layer();
    if (fused()) {  // the own W2 column (the rows' copies miss the last step's update)
      for (int j = tid; j < H2 && ncown > 0; j += nt) {
        const size_t g = p.w1 + static_cast<size_t>(j) * H1 + c0;
        p.params[g] = sm.w2c[j];
        if (adam) p.adam_m[g] = m2c[j], p.adam_v[g] = v2c[j];
      }
    } else {
      this->write_back_w2_rows();
    }
    this->write_back_b2();
    for (int o = tid; o < nq; o += nt) {
      const int q = q0 + o;
      const bool w = q < C * H2;
      const size_t g = w ? p.w2 + q : p.b2 + (q - C * H2);
      const int e = (q % H2) * cp + q / H2, jb = q - C * H2;
      p.params[g] = replica(q);
      if (adam) p.adam_m[g] = w ? sm.m3[e] : sm.mb3[jb], p.adam_v[g] = w ? sm.v3[e] : sm.vb3[jb];
    }
  }

  // after the last step: its deferred updates (nothing reads the W2 words they publish)
  __device__ __forceinline__ void finish(const AdamHyper& hy_last) {
    if (p.count > 0 && !fused()) {  // (fused(): the last step's fused pass made them)
      late_updates_w2(hy_last, p.w2_words + static_cast<size_t>(p.count & 1) * H2 * H1, static_cast<uint32_t>(p.count) + 1u);
      update_w3_slice(hy_last, p.w3_words + static_cast<size_t>(p.count & 1) * Q, static_cast<uint32_t>(p.count) + 1u);
    }
    __syncthreads();
  }
};

// The kernel: 5c's setup and grid barrier, the first step's forward, then the steps.
template <int NC, bool kW1>
__global__ void __launch_bounds__(kPersistThreads, 1) p5_pipelined_epoch(PersistParams pin) {
  extern __shared__ __align__(16) unsigned char smem[];
  PipeBlock<NC, kW1> blk(pin, smem);
  SegmentClock<kPipeSegments> clock;  // --breakdown: block 0's thread 0 (pipe_segment_name)
  const bool stamping = blk.p.breakdown != nullptr;
  blk.load_owned();
  cooperative_groups::this_grid().sync();
  if (blk.p.count > 0) {  // the first step's first layer (the forward half of the fused pass)
    const PersistStep st0 = blk.step(0);
    if (blk.fused()) {
      blk.draw_h1_mask(st0.s);
      __pipeline_wait_prior(0);
      __syncthreads();
      blk.update_forward(nullptr, &st0);
    } else {
      blk.first_layer(st0);
    }
  }
  blk.fetch_indices(1);
  clock.start(stamping && blockIdx.x == 0 && blk.tid == 0);
  AdamHyper hy_prev{};
  for (int t = 0; t < blk.p.count; ++t) {
    const PersistStep st = blk.step(t);
    const auto x1_work = [&] {  // what a block does while h1 travels
      blk.fetch_next_batch(st);  // (indices loaded a step ago)
      blk.fetch_indices(t + 2);
      if (t > 0 && !blk.fused()) {  // (fused(): made in the previous step's fused pass)
        blk.late_updates_w2(hy_prev, st.w2now, st.T);
        blk.update_w3_slice(hy_prev, blk.p.w3_words + static_cast<size_t>(st.par) * blk.Q, st.T);
      }
      blk.draw_h2_mask(st.s);
      if (stamping) __syncthreads(), clock.stamp(0);  // (only when timing the parts: splits X1)
    };
    // X1: only the blocks that own second-layer units read h1 (the others never use it)
    if (blk.njown > 0) blk.gather_h1(st, x1_work);
    else x1_work();
    __syncthreads();
    clock.stamp(1);
    blk.second_layer(st);  // B
    clock.stamp(2);
    blk.store_next_labels(st);
    blk.gather_h2(st, [&] {  // X2
      if (blk.fused() && st.more) blk.draw_h1_mask(st.s + 1);
    });
    clock.stamp(3);
    blk.partial_logits();  // C1, C2 (5c's)
    blk.softmax_dz2(st);
    clock.stamp(4);
    blk.batch_loss(st);
    __pipeline_wait_prior(0);  // the next batch (its barrier: the one that ends dz1)
    blk.dz1_own_units();
    clock.stamp(5);
    if (blk.fused()) {
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

template <int NC, bool kW1>
struct PipeKernel {
  static const void* ptr() { return reinterpret_cast<const void*>(&p5_pipelined_epoch<NC, kW1>); }
};
inline const void* pipe_kernel(const PersistPlan& pl) { return persist_instance<PipeKernel>(pl); }

// 5c's split and its checks, then this kernel's shared memory (5c's layout and the extras) and residency.
inline PersistPlan plan_pipelined(PersistParams& p, int requested_blocks, int device, bool specialize = true) {
  const std::string mode = "--launch pipelined";
  PersistPlan pl = persist_split(p, requested_blocks, device, specialize, mode);
  pl.smem = pipe_layout(p, pl.NC).total;
  persist_fit(pl, pipe_kernel(pl), device, mode);
  return pl;
}

inline void launch_pipelined(const PersistPlan& pl, const PersistParams& p, cudaStream_t st) {
  persist_launch(pipe_kernel(pl), pl, p, st);
}

}  // namespace mlp
}  // namespace nb
