// phase5_batched/5c_persistent_split.cuh — who owns what in the persistent rungs (5c, 5e): the split of
// the hidden units over the grid's blocks and its checks (host), the shared-memory layout that holds a
// block's share (host and device compute it the same way), the shape as the kernel sees it (W1's compiled
// in), and the cooperative launch. 5c_persistent.cuh's card describes the ownership.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "check.cuh"
#include "errors.h"
#include "5c_persistent.h"
#include "onchip_smem_carve.cuh"

namespace nb {
namespace mlp {

// The batch of step i+1 is fetched in three parts spread over step i, so that no warp stalls on a
// dependent global load: (1) its image indices into registers (at the start of step i), (2) the
// images by cp.async into shared memory and the labels into registers (while waiting for h1),
// (3) the labels into shared memory (after the second layer). Warp w handles rows w + q * warps,
// q < kRowsPerWarp.
constexpr int kRowsPerWarp = 4;  // so a batch has at most 4 * 16 = 64 rows

// Shared-memory layout (bytes from the start of the dynamic buffer), the same on host and device.
struct PersistLayout {
  size_t xl, w1, m1, v1, b1, mb1, vb1, h1, h1o, dz1, w2r, m2r, v2r, b2, mb2, vb2, w2c, h2, dz2, w3, m3, v3, b3,
      mb3, vb3, z3, rloss, part, lab, total;
  int ks = 1;   // K slices of the first layer (warps per group of 32 batch rows)
  int xs = 4;   // bytes per image row in shared memory (see image_stride)
};

// Images sit in shared memory row by row. D % 16 == 0 (MNIST's 784): dense rows, filled by
// 16-byte cp.async; the first layer's lanes (one row each) then meet a 4-way bank conflict (196
// words a row: rows 8 apart share a bank). Otherwise the stride is an odd number of words (no
// conflict) and the copies are 4 bytes each. Measured on W1 (H100): an odd stride (788 bytes)
// with 4-byte copies cost ~1 ms an epoch more (29.8-31.4 vs 28.5-29.7 ms): issuing four times as
// many copies costs more than the conflict. D % 4 == 0.
__host__ __device__ constexpr int image_stride(int D) { return D % 16 == 0 ? D : 4 * ((D / 4) | 1); }
// The W1 update splits the batch rows in two halves of this many rows (a multiple of 4).
__host__ __device__ constexpr int persist_half_rows(int B) { return ((B + 1) / 2 + 3) / 4 * 4; }

// Row strides of the shared-memory matrices whose rows are read by different lanes at once: odd,
// so that up to 32 rows fall into 32 different banks (a stride of 64 or 128 floats put every row
// in the same bank: a 10- to 16-way conflict, measured at ~2-4 us a step before the padding).
__host__ __device__ constexpr int odd_stride(int n) { return n | 1; }
// W3 (and its Adam state) is stored transposed, [H2][cp]: the last layer and dz2 read the C
// weights of one hidden unit together, as cp / 4 float4 loads. cp / 4 is odd, so the 8 lanes of a
// quarter-warp reading 8 consecutive units hit 8 disjoint groups of 4 banks. Padding columns are 0.
constexpr int kMaxClasses = 12;      // the persistent kernel's limit on the last layer's width
constexpr int kMaxClassStride = 12;  // class_stride(kMaxClasses)
__host__ __device__ constexpr int class_stride(int C) { return 4 * (((C + 3) / 4) | 1); }

// The first layer's K slices: warps per group of 32 batch rows.
__host__ __device__ constexpr int persist_slices(int B) {
  return (B + 31) / 32 >= kPersistThreads / 32 ? 1 : (kPersistThreads / 32) / ((B + 31) / 32);
}

__host__ __device__ inline PersistLayout persist_layout(const PersistParams& p, int NC) {
  PersistLayout L{};
  SmemCarve<16> carve;
  const auto take = [&](size_t bytes) { return carve.take(bytes); };
  const size_t f = sizeof(float);
  const int groups = (p.B + 31) / 32, warps = kPersistThreads / 32;
  L.ks = persist_slices(p.B);
  L.xs = image_stride(p.D);
  L.xl = take(2 * static_cast<size_t>(p.B) * L.xs);  // the batch, double-buffered by step parity
  L.w1 = take(static_cast<size_t>(p.D) * NC * f);
  L.b1 = take(NC * f), L.mb1 = take(NC * f), L.vb1 = take(NC * f);
  const size_t l1 = odd_stride(p.H1), l2 = odd_stride(p.H2);
  L.h1 = take(static_cast<size_t>(p.B) * l1 * f);
  L.h1o = take(static_cast<size_t>(p.B) * NC * f);
  L.dz1 = take(static_cast<size_t>(2 * persist_half_rows(p.B)) * NC * f);  // rows past B stay 0
  L.w2r = take(static_cast<size_t>(p.nj) * l1 * f);
  L.b2 = take(p.nj * f), L.mb2 = take(p.nj * f), L.vb2 = take(p.nj * f);
  L.w2c = take(static_cast<size_t>(p.H2) * NC * f);
  L.h2 = take(static_cast<size_t>(p.B) * l2 * f);
  L.dz2 = take(static_cast<size_t>(p.B) * l2 * f);
  const size_t l3 = class_stride(p.C);
  L.w3 = take(static_cast<size_t>(p.H2) * l3 * f);
  L.b3 = take(p.C * f), L.mb3 = take(p.C * f), L.vb3 = take(p.C * f);
  L.z3 = take(static_cast<size_t>(p.B) * p.C * f);
  L.rloss = take(p.B * f);
  // scratch: the first layer's K slices, or the last layer's slices of H2 (warps / groups of them)
  const size_t part = std::max(static_cast<size_t>(L.ks) * p.B * NC, static_cast<size_t>(warps / groups) * p.B * odd_stride(p.C));
  L.part = take(part * f);
  L.lab = take(2 * p.B * sizeof(int));
  // Adam's state of the weight matrices last: every offset depends on the shape only (constants in
  // W1's instance), and SGD does not pay for it (it never touches these)
  L.total = carve.off;
  L.m1 = take(static_cast<size_t>(p.D) * NC * f), L.v1 = take(static_cast<size_t>(p.D) * NC * f);
  L.m2r = take(static_cast<size_t>(p.nj) * l1 * f), L.v2r = take(static_cast<size_t>(p.nj) * l1 * f);
  L.m3 = take(static_cast<size_t>(p.H2) * l3 * f), L.v3 = take(static_cast<size_t>(p.H2) * l3 * f);
  if (p.adam) L.total = carve.off;
  return L;
}

// W1's shape (MNIST, 784-128-64-10, batch 32), compiled into one instance of the kernel: every
// index, division, loop bound and shared-memory offset that depends on the shape becomes a
// constant. The generic instances read the shape from the parameters (at run time, a step spent
// ~6k of its ~61k warp instructions a block on that index arithmetic, with integer divisions on
// the critical path; measured in ncu's source counters). Same code, same order of operations:
// both instances give bit-identical results on W1 (tests/gpu/test_mlp_persistent.cu).
struct PersistShape {
  int B, D, H1, H2, C;
};
constexpr PersistShape kPersistW1{32, 784, 128, 64, 10};

// The shared-memory carve-up: one pointer per array of PersistLayout (whose offsets the host
// computes identically). NC = the block's first-layer units, padded to the instance's width.
struct PersistSmem {
  uint8_t* xl;                  // [2][B][xs]: this step's batch and the next one (cp.async)
  float *w1, *m1, *v1;          // [D][NC]: W1[c0 + c][k] at w1[k * NC + c], and its Adam state
  float *b1, *mb1, *vb1;        // [NC]
  float* h1;                    // [B][ld1]: all first-layer units
  float* h1o;                   // [B][NC]: own units
  float* dz1;                   // [2 * persist_half_rows(B)][NC]: rows past B stay 0
  float *w2r, *m2r, *v2r;       // [nj][ld1]: own rows of W2
  float *b2, *mb2, *vb2;        // [nj]
  float* w2c;                   // [H2][NC]: W2[j][c0 + c], the column slice for dz1
  float *h2, *dz2;              // [B][ld2]
  float *w3, *m3, *v3;          // [H2][cp] replica: W3[m][n] at w3[n * cp + m]
  float *b3, *mb3, *vb3;        // [C]
  float* z3;                    // [B][C]: logits, then dz3
  float* rloss;                 // [B]: each row's loss
  float* part;                  // scratch: partial sums of the first and the last layer
  int* lab;                     // [2][B]
  __device__ __forceinline__ PersistSmem(unsigned char* s, const PersistLayout& L)
      : xl(s + L.xl), w1(f(s, L.w1)), m1(f(s, L.m1)), v1(f(s, L.v1)), b1(f(s, L.b1)), mb1(f(s, L.mb1)),
        vb1(f(s, L.vb1)), h1(f(s, L.h1)), h1o(f(s, L.h1o)), dz1(f(s, L.dz1)), w2r(f(s, L.w2r)), m2r(f(s, L.m2r)),
        v2r(f(s, L.v2r)), b2(f(s, L.b2)), mb2(f(s, L.mb2)), vb2(f(s, L.vb2)), w2c(f(s, L.w2c)), h2(f(s, L.h2)),
        dz2(f(s, L.dz2)), w3(f(s, L.w3)), m3(f(s, L.m3)), v3(f(s, L.v3)), b3(f(s, L.b3)), mb3(f(s, L.mb3)),
        vb3(f(s, L.vb3)), z3(f(s, L.z3)), rloss(f(s, L.rloss)), part(f(s, L.part)),
        lab(reinterpret_cast<int*>(s + L.lab)) {}
  __device__ static __forceinline__ float* f(unsigned char* s, size_t o) { return reinterpret_cast<float*>(s + o); }
};

// The shape as the stages see it: read from the parameters in the generic instances, constants in
// W1's (kPersistW1), so that every loop bound, index and offset that depends on it folds while
// each stage is compiled (before it is inlined into the kernel).
template <bool kW1>
struct PersistDims {
  int B, D, H1, H2, C, nc, nj;
  int xs;        // bytes per image row in shared memory (image_stride)
  int ks;        // K slices of the first layer (persist_slices)
  int ld1, ld2;  // row strides of h1, w2r / h2, dz2
  int cp;        // row stride of w3, m3, v3
  int ldp;       // row stride of the partial logits in part
  __device__ __forceinline__ explicit PersistDims(const PersistParams& p)
      : B(p.B), D(p.D), H1(p.H1), H2(p.H2), C(p.C), nc(p.nc), nj(p.nj), xs(image_stride(p.D)), ks(persist_slices(p.B)),
        ld1(odd_stride(p.H1)), ld2(odd_stride(p.H2)), cp(class_stride(p.C)), ldp(odd_stride(p.C)) {}
};
template <>
struct PersistDims<true> {
  static constexpr int B = kPersistW1.B, D = kPersistW1.D, H1 = kPersistW1.H1, H2 = kPersistW1.H2, C = kPersistW1.C;
  static constexpr int nc = 1, nj = (H2 + H1 - 1) / H1;
  static constexpr int xs = image_stride(D), ks = persist_slices(B), ld1 = odd_stride(H1), ld2 = odd_stride(H2),
                       cp = class_stride(C), ldp = odd_stride(C);
  __device__ __forceinline__ explicit PersistDims(const PersistParams&) {}
};

// ------------------------------------------------------------------ host: the split and the launch
inline int persist_nc_template(int nc) { return nc <= 1 ? 1 : nc <= 2 ? 2 : nc <= 4 ? 4 : 8; }

// The instance of a kernel template that a plan runs: W1's compiled-in shape, or the generic one for
// the padded unit count. Kernel<NC, kW1>::ptr() names the instance (5c's below; 5e has its own).
template <template <int, bool> class Kernel>
inline const void* persist_instance(const PersistPlan& pl) {
  if (pl.specialized) return Kernel<1, true>::ptr();
  switch (pl.NC) {
    case 1: return Kernel<1, false>::ptr();
    case 2: return Kernel<2, false>::ptr();
    case 4: return Kernel<4, false>::ptr();
    default: return Kernel<8, false>::ptr();
  }
}
// The split of the epoch over blocks and the checks that need no kernel, shared by the one-launch
// rungs that use this ownership (5c, 5e; `mode` names the launch mode in the messages). Sets p.nc,
// p.nj and pl.smem (this layout's; 5e adds to it).
// requested_blocks 0: one block per first-layer unit, at most one per SM (the fastest of the
// block counts measured for W1: see phase5_batched/main.cu).
// specialize: use W1's instance where the shape and the split match it (false: always the generic
// instance, to measure what compiling the shape in buys).
inline PersistPlan persist_split(PersistParams& p, int requested_blocks, int device, bool specialize, const std::string& mode) {
  int sms = 0, coop = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
  if (!coop) throw Error(kExitUsage, mode + ": this GPU cannot launch cooperative kernels (use --launch graph)");
  PersistPlan pl;
  if (p.B > kRowsPerWarp * (kPersistThreads / 32))
    throw Error(kExitUsage, mode + ": --batch at most " + std::to_string(kRowsPerWarp * (kPersistThreads / 32)) +
                                " (use --launch graph)");
  if (p.C > kMaxClasses)
    throw Error(kExitUsage, mode + ": at most " + std::to_string(kMaxClasses) + " classes (the last layer has " +
                                std::to_string(p.C) + "; use --launch graph)");
  if (p.D % 4 != 0)
    throw Error(kExitUsage, mode + ": the input width must be a multiple of 4 (it is " + std::to_string(p.D) +
                                "; use --launch graph)");
  int want = requested_blocks > 0 ? requested_blocks : std::min(sms, p.H1);
  want = std::max(1, std::min(want, p.H1));
  pl.nc = (p.H1 + want - 1) / want;
  if (pl.nc > 8)
    throw Error(kExitUsage, mode + ": " + std::to_string(want) + " blocks would give each " +
                                std::to_string(pl.nc) + " first-layer units (at most 8; use more --blocks or --launch graph)");
  pl.blocks = (p.H1 + pl.nc - 1) / pl.nc;  // every block owns at least one first-layer unit
  pl.NC = persist_nc_template(pl.nc);
  pl.nj = (p.H2 + pl.blocks - 1) / pl.blocks;
  p.nc = pl.nc, p.nj = pl.nj;
  pl.smem = persist_layout(p, pl.NC).total;
  const PersistShape& w = kPersistW1;
  pl.specialized = specialize && pl.NC == 1 && pl.nc == 1 && p.B == w.B && p.D == w.D && p.H1 == w.H1 && p.H2 == w.H2 &&
                   p.C == w.C && pl.nj == (w.H2 + w.H1 - 1) / w.H1;
  return pl;
}

// Kernel k's shared memory (pl.smem) and the co-residency of pl.blocks of it; refuses what cannot run.
inline void persist_fit(const PersistPlan& pl, const void* k, int device, const std::string& mode) {
  int sms = 0, smem_optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (pl.smem > static_cast<size_t>(smem_optin))
    throw Error(kExitUsage, mode + ": needs " + std::to_string(pl.smem) + " bytes of shared memory per block, the GPU offers " +
                                std::to_string(smem_optin) + " (smaller --batch or widths, more --blocks, or --launch graph)");
  CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(pl.smem)));
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kPersistThreads, pl.smem));
  if (per_sm * sms < pl.blocks)
    throw Error(kExitUsage, mode + ": " + std::to_string(pl.blocks) + " blocks cannot all be resident (" +
                                std::to_string(per_sm) + " per SM x " + std::to_string(sms) + " SMs)");
}

// One cooperative launch of kernel k (an instance persist_instance chose) for a plan.
inline void persist_launch(const void* k, const PersistPlan& pl, PersistParams p, cudaStream_t st) {
  void* args[] = {&p};
  CUDA_CHECK(cudaLaunchCooperativeKernel(k, dim3(pl.blocks), dim3(kPersistThreads), args, pl.smem, st));
  CHECK_LAUNCH();
}

}  // namespace mlp
}  // namespace nb
