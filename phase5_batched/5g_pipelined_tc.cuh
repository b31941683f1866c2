// phase5_batched/5g_pipelined_tc.cuh — `--launch pipelined-tc`: rung 5e's kernel with its fused W1 pass
// (the W1 update of step t and the first layer of step t+1) on tensor cores.
//
// WHAT IT ADDS OVER 5e: 5e's fused pass is 2.76 us of its 10.0 us step (--breakdown at cabb95a), and
// ncu put ~400 of a warp's ~2,000 instructions a step in its two pixel loops, two thirds of them
// turning bytes into floats (PRMT + FADD per byte, twice per byte a step). Here the block's one
// first-layer unit becomes two products per 16-pixel tile on the tensor cores:
//   gradient  dW1[k] = sum_b dz1[b] x[b][k]: A = the batch transposed (ldmatrix.trans), B = dz1;
//   forward   z[b] = sum_k x[b][k] W1[k]: A = the next batch (ldmatrix), B = the updated weights.
// Pixel bytes are exact in fp16 (0x64bb is 1024 + b: one PRMT and one HSUB2 for two bytes), done once
// a batch while the block waits for h2. fp32-level sums from fp16 operands: dz1 and the weights are
// split into three fp16 planes (v = h0 + h1 2^-11 + h2 2^-22, up to 2^-33 |v|, after a power-of-two
// scale that puts the set's largest value in [2^13, 2^14)), and the three planes ride in three of the
// n8 tile's eight columns, which one unit would leave idle: the split costs no extra product, every
// byte x plane product is exact in the fp32 accumulator. Everything else is 5e's (same kernel body,
// pipelined_epoch_body, with three hooks replaced: first_forward, x2_work, end_step).
//
// THE DESIGN DECISION: a block with one output column still fills an n8 tile, with the planes of a
// precise split; tensor cores for the longest phase without changing who owns what.
//
// PREDICTION (before the first run; H100, W1): the fused pass from 2.76 to ~1.2 us (a warp's ~400
// instructions in it to ~150: 6-8 ldmatrix + MMA pairs, the plane splits, two Adam updates a lane),
// the conversion (~60 instructions a warp) inside the wait for h2: ~8.5 us a step, ~16 ms an epoch
// (5e 18.7). Not 10 ms: the waits (2.6 us), the last layer and dz2 (1.75) and the updates in X1 stay.
//
// MEASURED: not yet (no GPU run of this rung).
#pragma once
#include <cuda_fp16.h>

#include "5e_pipelined.cuh"
#include "5g_pipelined_tc.h"

namespace nb {
namespace mlp {

// Shared memory past rung 5e's layout: the batch as halves, two buffers by step parity, rows of
// 16 (B <= 16) or 32 halves-rows D + 8 apart (the 8 rows an ldmatrix phase reads then start
// 4 (2m + 1) r words apart, D = 16 m: 8 distinct groups of 4 banks; rows past B stay 0). The fused
// pass's scratch (the weights' and dz1's planes, the gradient row) lives in 5c's `part` (the last
// layer's partial logits, dead from dz1 to the next step's last layer) where it fits: W1's layout
// is then 232,192 bytes of the 232,448 a block may have.
__host__ __device__ constexpr int tc_row_stride(int D) { return D + 8; }
__host__ __device__ constexpr int tc_rows(int B) { return (B + 15) / 16 * 16; }
struct TcLayout {
  size_t x16, wpl, dpl, gst, total;
};
__host__ __device__ inline TcLayout tc_layout(const PersistParams& p) {
  TcLayout L{};
  const PersistLayout P = persist_layout(p, 1);
  size_t off = (pipe_layout(p, 1).total + 15) / 16 * 16;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off = (off + bytes + 15) / 16 * 16;
    return at;
  };
  const size_t h = sizeof(__half), ld = static_cast<size_t>(tc_row_stride(p.D));
  L.x16 = take(2 * static_cast<size_t>(tc_rows(p.B)) * ld * h);  // [2][rows][ld]: the batch as halves
  const size_t wpl = (3 * ld * h + 15) / 16 * 16;                // [3][ld]: the new W1 row as planes
  const size_t dpl = static_cast<size_t>(kPersistThreads / 32) * 3 * kTcMaxBatch * h;  // [warp][3][32]: dz1's planes
  const size_t gst = static_cast<size_t>(p.D) * sizeof(float);  // [D]: W1's gradient row
  if (wpl + dpl + gst <= P.lab - P.part) {
    L.wpl = P.part, L.dpl = P.part + wpl, L.gst = P.part + wpl + dpl;
  } else {
    L.wpl = take(wpl), L.dpl = take(dpl), L.gst = take(gst);
  }
  L.total = off;
  return L;
}

namespace tc {
constexpr unsigned kFull = 0xffffffffu;
__device__ __forceinline__ uint32_t smem_u32(const void* q) { return static_cast<uint32_t>(__cvta_generic_to_shared(q)); }
// four 8x8 matrices of halves; lane i names row (i & 7) of matrix i >> 3
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const __half* q) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(q))
               : "memory");
}
__device__ __forceinline__ void ldsm4_t(uint32_t (&r)[4], const __half* q) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(q))
               : "memory");
}
// c += a b, m16n8k16, fp16 inputs, fp32 accumulator
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// A power of two s that brings m (>= 0) into [2^13, 2^14), clamped to 2^-60 .. 2^60, and 1 / s (both exact).
__device__ __forceinline__ void pow2_scale(float m, float& s, float& inv) {
  const int e = static_cast<int>((__float_as_uint(m) >> 23) & 0xffu);
  const int es = min(max(267 - e, 127 - 60), 127 + 60);
  s = __uint_as_float(static_cast<uint32_t>(es) << 23), inv = __uint_as_float(static_cast<uint32_t>(254 - es) << 23);
}
// v = h0 + h1 2^-11 + h2 2^-22 (each residual is exact in fp32; |v| < 2^15)
__device__ __forceinline__ void split3(float v, __half (&h)[3]) {
  h[0] = __float2half_rn(v);
  float r = v - __half2float(h[0]);
  h[1] = __float2half_rn(r * 0x1p11f);
  r = r - __half2float(h[1]) * 0x1p-11f;
  h[2] = __float2half_rn(r * 0x1p22f);
}
// A C fragment whose columns 0, 1, 2 hold the three planes' sums: lanes with (lane & 3) == 0 get
// rows g and g + 8 (g = lane >> 2) as plane 0 + (plane 1 2^-11 + plane 2 2^-22). Every lane shuffles.
__device__ __forceinline__ void plane_sums(const float (&c)[4], float& r0, float& r8) {
  const float q0 = __shfl_down_sync(kFull, c[0], 1), q2 = __shfl_down_sync(kFull, c[2], 1);
  r0 = c[0] + (c[1] * 0x1p-11f + q0 * 0x1p-22f);
  r8 = c[2] + (c[3] * 0x1p-11f + q2 * 0x1p-22f);
}
// four pixel bytes as four exact halves: 0x64bb is 1024 + b
__device__ __forceinline__ uint2 bytes_to_halves(uint32_t w) {
  const __half2 k1024 = __half2half2(__ushort_as_half(static_cast<unsigned short>(0x6400u)));
  const uint32_t lo = __byte_perm(w, 0x64646464u, 0x5140), hi = __byte_perm(w, 0x64646464u, 0x5342);
  const __half2 a = __hsub2(*reinterpret_cast<const __half2*>(&lo), k1024);
  const __half2 b = __hsub2(*reinterpret_cast<const __half2*>(&hi), k1024);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&a), *reinterpret_cast<const uint32_t*>(&b));
}
}  // namespace tc

template <bool kW1>
struct TcBlock : PipeBlock<1, kW1> {
  using Base = PipeBlock<1, kW1>;
  using Base::B, Base::D, Base::H1, Base::xs;
  using Base::nt, Base::nwarps, Base::p, Base::sm, Base::tid, Base::lane, Base::wid;
  using Base::c0, Base::adam, Base::keep_grads, Base::mask1, Base::fpart;
  __half *x16, *wpl, *dpl;
  float* gst;

  __device__ __forceinline__ TcBlock(const PersistParams& pin, unsigned char* smem) : Base(pin, smem) {
    const TcLayout L = tc_layout(p);
    x16 = reinterpret_cast<__half*>(smem + L.x16), wpl = reinterpret_cast<__half*>(smem + L.wpl);
    dpl = reinterpret_cast<__half*>(smem + L.dpl), gst = reinterpret_cast<float*>(smem + L.gst);
  }
  __device__ __forceinline__ int ld16() const { return tc_row_stride(D); }
  __device__ __forceinline__ __half* xh(int par) const { return x16 + static_cast<size_t>(par) * tc_rows(B) * ld16(); }

  // 5e's, and both half buffers zeroed: rows past B (and the pad columns) stay 0 all launch
  __device__ __forceinline__ void load_owned() {
    Base::load_owned();
    const int n16 = 2 * tc_rows(B) * ld16() * static_cast<int>(sizeof(__half)) / 16;
    for (int e = tid; e < n16; e += nt) reinterpret_cast<uint4*>(x16)[e] = make_uint4(0u, 0u, 0u, 0u);
  }
  // The 16-byte chunks of a batch this thread copied (copy_image_async's split: rows wid + q nwarps,
  // chunks lane + 32 i) as halves, once its copies have landed: no other thread's bytes are read,
  // so no barrier is needed before it; the caller's barrier publishes the halves.
  __device__ __forceinline__ void convert_own(const uint8_t* src, __half* dst) const {
    __pipeline_wait_prior(0);
    for (int q = 0; q < kRowsPerWarp; ++q) {
      const int r = wid + q * nwarps;
      if (r >= B) break;
      for (int c = lane; c < D / 16; c += 32) {
        const uint4 v = *reinterpret_cast<const uint4*>(src + static_cast<size_t>(r) * xs + 16 * c);
        const uint2 h0 = tc::bytes_to_halves(v.x), h1 = tc::bytes_to_halves(v.y);
        const uint2 h2 = tc::bytes_to_halves(v.z), h3 = tc::bytes_to_halves(v.w);
        uint4* d = reinterpret_cast<uint4*>(dst + static_cast<size_t>(r) * ld16() + 16 * c);
        d[0] = make_uint4(h0.x, h0.y, h1.x, h1.y), d[1] = make_uint4(h2.x, h2.y, h3.x, h3.y);
      }
    }
  }

  // ---- the three hooks of pipelined_epoch_body
  __device__ __forceinline__ void first_forward(const PersistStep& st0) {
    this->draw_h1_mask(st0.s);
    convert_own(st0.xb, xh(st0.par));
    __syncthreads();
    update_forward(nullptr, &st0);
  }
  // during the wait for h2: the next h1 mask (5e's) and the next batch as halves
  __device__ __forceinline__ void x2_work(const PersistStep& st) {
    Base::x2_work(st);
    if (st.more) convert_own(sm.xl + (st.par ^ 1) * this->batch_bytes(), xh(st.par ^ 1));
  }
  __device__ __forceinline__ void end_step(const PersistStep& st, int t) {
    if (st.more) {
      const PersistStep nx = this->step(t + 1);
      update_forward(&st, &nx);
    } else {
      update_forward(&st, nullptr);
    }
  }

  // ---- W1 update of step `up` (null: none) and first layer of step `nx` (null: none), one pass.
  // Warp w owns the 16-pixel tiles w, w + 16, w + 32, w + 48 of the row (those < D / 16): it computes
  // their gradient (an m16n8k16 per tile and 16 batch rows), updates their weights (two a lane),
  // splits them into planes and multiplies them into the next batch (an m16n8k16 per tile and 16
  // rows); no other warp reads what it writes until the warps' partial sums meet after one block
  // barrier. Needs dz1 (up) and the halves of both batches in shared memory (the callers' barriers).
  __device__ __forceinline__ void update_forward(const PersistStep* up, const PersistStep* nx) {
    const int NT = D / 16, MT = (B + 15) / 16, ld = ld16();
    const int g = lane >> 2, t4 = lane & 3;
    int kp[2];  // the lane's two pixels: entries lane and lane + 32 of the warp's tiles' pixels
    bool on[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int e = lane + 32 * i, j = wid + nwarps * (e >> 4);
      on[i] = j < NT, kp[i] = 16 * j + (e & 15);
    }
    float wn[2] = {0.f, 0.f};  // their weights, updated
    if (up) {
      this->update_b1(up->hy);
      // dz1 as planes, this warp's copy (lane = batch row), scaled so that the largest is in [2^13, 2^14)
      // (non-negative floats order as their bits: one warp max of the bits)
      const float d = lane < B ? sm.dz1[lane] : 0.f;
      float s, inv;
      tc::pow2_scale(__uint_as_float(__reduce_max_sync(tc::kFull, __float_as_uint(fabsf(d)))), s, inv);
      __half hp[3];
      tc::split3(d * s, hp);
      __half* dp = dpl + wid * 3 * kTcMaxBatch;
      dp[lane] = hp[0], dp[kTcMaxBatch + lane] = hp[1], dp[2 * kTcMaxBatch + lane] = hp[2];
      __syncwarp();
      uint32_t bg[2][2];  // B fragments of the two k16 steps (batch rows 0-15, 16-31): column g = plane g
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        const __half* col = dp + g * kTcMaxBatch + 16 * kk + 2 * t4;
        bg[kk][0] = g < 3 ? *reinterpret_cast<const uint32_t*>(col) : 0u;
        bg[kk][1] = g < 3 ? *reinterpret_cast<const uint32_t*>(col + 8) : 0u;
      }
      const __half* xt = xh(up->par);
#pragma unroll
      for (int i = 0; i < kTcTilesPerWarp; ++i) {
        const int j = wid + nwarps * i;
        if (j < NT) {  // (warp-uniform)
          float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int kk = 0; kk < 2; ++kk)
            if (kk < MT) {
              uint32_t a[4];  // rows = pixels 16 j.., columns = batch rows 16 kk..: the batch transposed
              tc::ldsm4_t(a, xt + (16 * kk + (lane & 7) + 8 * ((lane >> 4) & 1)) * ld + 16 * j + 8 * ((lane >> 3) & 1));
              tc::mma(c, a, bg[kk][0], bg[kk][1]);
            }
          float r0, r8;
          tc::plane_sums(c, r0, r8);
          if (t4 == 0) gst[16 * j + g] = r0 * inv, gst[16 * j + g + 8] = r8 * inv;
        }
      }
      __syncwarp();
      // Adam on the lane's two pixels (5e's opt_apply2 and its order of operations)
      float gc[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        gc[i] = on[i] ? gst[kp[i]] : 0.f;
        if (gc[i] != 0.f) gc[i] /= 255.f;  // (0 / 255 would take the division's slow path)
        wn[i] = on[i] ? sm.w1[kp[i]] : 0.f;
        if (keep_grads && on[i]) p.G[p.w0 + static_cast<size_t>(c0) * D + kp[i]] = gc[i];
      }
      if (on[1]) {  // (then on[0] too)
        opt_apply2(wn, gc, sm.m1 + kp[0], sm.m1 + kp[1], sm.v1 + kp[0], sm.v1 + kp[1], adam, p.lr, up->hy);
        sm.w1[kp[0]] = wn[0], sm.w1[kp[1]] = wn[1];
      } else if (on[0]) {
        opt_apply(wn[0], gc[0], sm.m1 + kp[0], sm.v1 + kp[0], adam, p.lr, up->hy);
        sm.w1[kp[0]] = wn[0];
      }
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) wn[i] = on[i] ? sm.w1[kp[i]] : 0.f;
    }
    if (!nx) {
      __syncthreads();
      return;
    }
    // the new weights as planes (of w / 16: a fixed scale, |w| < 2^19 within fp16's range)
#pragma unroll
    for (int i = 0; i < 2; ++i)
      if (on[i]) {
        __half hp[3];
        tc::split3(wn[i] * kTcWeightScale, hp);
        wpl[kp[i]] = hp[0], wpl[ld + kp[i]] = hp[1], wpl[2 * ld + kp[i]] = hp[2];
      }
    __syncwarp();
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    const __half* xn = xh(nx->par);
#pragma unroll
    for (int i = 0; i < kTcTilesPerWarp; ++i) {
      const int j = wid + nwarps * i;
      if (j < NT) {
        const __half* col = wpl + g * ld + 16 * j + 2 * t4;
        const uint32_t b0 = g < 3 ? *reinterpret_cast<const uint32_t*>(col) : 0u;
        const uint32_t b1 = g < 3 ? *reinterpret_cast<const uint32_t*>(col + 8) : 0u;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
          if (mt < MT) {
            uint32_t a[4];  // rows = batch rows 16 mt.., columns = pixels 16 j..
            tc::ldsm4(a, xn + (16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld + 16 * j + 8 * ((lane >> 4) & 1));
            tc::mma(acc[mt], a, b0, b1);
          }
      }
    }
    const int nwu = min(nwarps, NT);  // warps that own tiles
    const float unscale = 1.f / kTcWeightScale;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
      if (mt < MT) {
        float r0, r8;
        tc::plane_sums(acc[mt], r0, r8);
        if (t4 == 0 && wid < nwu) fpart[wid * 32 + 16 * mt + g] = r0 * unscale, fpart[wid * 32 + 16 * mt + g + 8] = r8 * unscale;
      }
    __syncthreads();
    if (tid < 128) {  // row r: 4 threads, each a quarter of the warps in a fixed order, then 2 shuffles
      const int r = tid >> 2, q = tid & 3;
      float z = 0.f;
      for (int w = q; w < nwu; w += 4) z += r < B ? fpart[w * 32 + r] : 0.f;
      z += __shfl_xor_sync(tc::kFull, z, 1);
      z += __shfl_xor_sync(tc::kFull, z, 2);
      if (q == 0 && r < B) {
        float hv = fmaxf(z / 255.f + sm.b1[0], 0.f);
        if (p.dropout) hv = mask1[r] != 0.f ? hv * mask1[r] : 0.f;
        sm.h1o[r] = hv;
        xstore(nx->h1x + static_cast<size_t>(r) * H1 + c0, hv, nx->T);
      }
    }
  }
};

template <bool kW1>
__global__ void __launch_bounds__(kPersistThreads, 1) p5_pipelined_tc_epoch(PersistParams pin) {
  extern __shared__ __align__(16) unsigned char smem[];
  TcBlock<kW1> blk(pin, smem);
  pipelined_epoch_body(blk);
}

// ------------------------------------------------------------------ host side

inline const void* tc_kernel(const PersistPlan& pl) {
  return pl.specialized ? reinterpret_cast<const void*>(&p5_pipelined_tc_epoch<true>)
                        : reinterpret_cast<const void*>(&p5_pipelined_tc_epoch<false>);
}

// 5c's split and checks, this rung's limits, then its shared memory and residency.
inline PersistPlan plan_pipelined_tc(PersistParams& p, int requested_blocks, int device, bool specialize = true) {
  const std::string mode = "--launch pipelined-tc";
  if (p.B > kTcMaxBatch)
    throw Error(kExitUsage, mode + ": --batch at most " + std::to_string(kTcMaxBatch) + " (use --launch pipelined)");
  if (p.D % 16 != 0 || p.D > kTcMaxWidth)
    throw Error(kExitUsage, mode + ": the input width must be a multiple of 16 and at most " + std::to_string(kTcMaxWidth) +
                                " (it is " + std::to_string(p.D) + "; use --launch pipelined)");
  PersistPlan pl = persist_split(p, requested_blocks, device, specialize, mode);
  if (pl.nc != 1)
    throw Error(kExitUsage, mode + ": needs one first-layer unit a block (" + std::to_string(p.H1) + " units over " +
                                std::to_string(pl.blocks) + " blocks; use --launch pipelined)");
  pl.smem = tc_layout(p).total;
  persist_fit(pl, tc_kernel(pl), device, mode);
  return pl;
}

inline void launch_pipelined_tc(const PersistPlan& pl, const PersistParams& p, cudaStream_t st) {
  persist_launch(tc_kernel(pl), pl, p, st);
}

}  // namespace mlp
}  // namespace nb
