// common/mlp/gemm/4_kernels.cuh — the GEMM ladder, step 4: the kernels. Which mainloop an instance
// contains, one (tile, split) computed and handed to its epilogue, the launchers, the tags.
#pragma once
#include <utility>

#include "mlp/gemm/2_cp_async.cuh"
#include "mlp/gemm/3_split_k.cuh"

namespace nb {
namespace mlp {

// Which mainloop a kernel instance contains: the register loop only, the cp.async loop only, or
// both with the choice made per problem at run time (phase 5's gemm_pair_kernel, in
// phase5_batched/5a_graph_step.cuh). launch_gemm picks the instance, so a kernel carries only the
// code (and registers) of the loop it runs.
enum class Loop { Regs, Async, Either };

// An epilogue with direct_ok() (StoreEpi) may take the accumulators straight to global memory,
// without the round trip through the shared tile, when the product is not split and the tile is
// whole: the weight gradient (K = batch, one k-tile per block, 8 KB of fp32 out) is mostly that store.
template <class E, class = void>
struct DirectStore : std::false_type {};
template <class E>
struct DirectStore<E, std::void_t<decltype(std::declval<const E&>().direct_ok(0, 0, 0, 0))>> : std::true_type {};

// Products that may be planned past kFixupGroup slices (plan_splits_p5, phase 5): the weight
// gradients (K = batch; A is dZ read transposed, MatView<T, false>) with phase 5's epilogues. Their
// two-level fix-up is an instance of its own (kTwoLevel), so no other kernel carries its code.
template <class P>
struct TwoLevelSplit
    : std::integral_constant<bool, VecFixup<typename std::decay<decltype(P::epi)>::type>::value &&
                                       std::is_same<typename P::AView, MatView<typename P::Elem, false>>::value> {};

// Computes one (tile, split) of problem P into sm.c, runs the split-K fix-up and the epilogue.
// kSplit = false: an instance for unsplit problems only, without the fix-up's code (whose 16
// float4 loads in flight cost registers: 109 instead of 88 on the fp16 weight gradient).
// kTwoLevel: the two-level fix-up (more than kFixupGroup slices).
template <class T, Loop kLoop, class P, bool kSplit = true, bool kTwoLevel = false>
__device__ void gemm_tile(const P& p, int linear_block, GemmSmem<T>& sm) {
  using C = TileCfg<T>;
  constexpr int BK = C::kBK;
  const int tiles = p.tiles();
  const int split = linear_block / tiles, tile = linear_block % tiles;
  // Consecutive blocks take consecutive column tiles of the same rows: a tall output (the weight
  // gradient, 8192 x 8192 fp32) is then written row by row, whole DRAM pages at a time, not in
  // narrow column strips 32 KB apart.
  const int bn = tile % p.tiles_n(), bm = tile / p.tiles_n();
  const int m0 = bm * kBM, n0 = bn * kBN;
  const int kbeg = split * p.kchunk;
  const int kend = min(p.K, kbeg + p.kchunk);
  const int ntiles = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;

  Accum<T> acc;
  if constexpr (kLoop == Loop::Async) {
    mainloop_async(p, m0, n0, kbeg, kend, acc);
  } else if constexpr (kLoop == Loop::Either && AsyncEligible<P>::value) {
    if (uses_async(p)) mainloop_async(p, m0, n0, kbeg, kend, acc);
    else mainloop_regs(p, m0, n0, kbeg, kend, ntiles, acc, sm);
  } else {
    mainloop_regs(p, m0, n0, kbeg, kend, ntiles, acc, sm);
  }

  using Epi = typename std::decay<decltype(p.epi)>::type;
  if constexpr (DirectStore<Epi>::value) {
    if (p.splits == 1 && p.epi.direct_ok(m0, n0, p.M, p.N)) {
      acc.store(p.epi.c + static_cast<size_t>(m0) * p.epi.ldc + n0, p.epi.ldc);
      return;
    }
  }

  // Accumulators -> shared fp32 tile (the stage buffers are dead: both loops end behind a barrier).
  acc.store(sm.c, kLdc);
  __syncthreads();

  if constexpr (kSplit) {
    if constexpr (kTwoLevel) {
      if (!splitk_fixup_two_level<C::kThreads, VecFixup<Epi>::value>(sm.c, p.ws, p.counters, tile, tiles, split,
                                                                      p.splits))
        return;
    } else {
      if (p.splits > 1 && !splitk_fixup<C::kThreads, VecFixup<Epi>::value>(sm.c, p.ws, p.counters, tile, split, p.splits))
        return;
    }
  }
  p.epi(sm.c, m0, n0, p.M, p.N);
}

// The GemmSmem of a block: at the start of its dynamic shared memory (gemm_dyn_smem bytes).
template <class T>
__device__ __forceinline__ GemmSmem<T>& gemm_smem() {
  extern __shared__ __align__(128) unsigned char gemm_dyn[];
  return *reinterpret_cast<GemmSmem<T>*>(gemm_dyn);
}

// One problem per launch, its instance chosen at launch (kAsync = uses_async(p); kSplit = false
// only for unsplit register-loop problems). Tag only names the kernel (profiles show what each
// launch was for).
// Blocks an SM that each instance is compiled for (its register budget):
//   * with a plain store epilogue (DirectStore: phase 4, --gemm-compare), the unsplit register-loop
//     instance: 64 registers a thread (8 blocks an SM in fp16, 4 in fp32). Its blocks are short (one
//     or two k-tiles, then the store), so the SM needs many resident to keep the stores flowing.
//     (Phase 5's fused epilogues would spill under that bound.)
//   * every other fp16 instance: 5 blocks (at most 96 registers), the count the 42 KB of cp.async
//     stages allow, so that 640 blocks (a 32 x 8192 output in 5 splits) run in one wave. Without
//     the bound the gathered first layer's split instance took 100 registers, 4 blocks an SM, and
//     ran its 640 blocks at h = 8192 in two waves: 36.6 us against 24.5 (H100, records of 2275dbb
//     against 211693b).
template <class T, class P, bool kAsync, bool kSplit>
constexpr int gemm_min_blocks() {
  if (!kAsync && !kSplit && DirectStore<typename std::decay<decltype(P::epi)>::type>::value)
    return 65536 / (64 * TileCfg<T>::kThreads);
  return std::is_same<T, __half>::value ? 5 : 1;
}
template <class Tag, class T, class P, bool kAsync, bool kSplit, bool kTwoLevel = false>
__global__ void __launch_bounds__(TileCfg<T>::kThreads, (gemm_min_blocks<T, P, kAsync, kSplit>()))
    gemm_kernel(P p) {
  gemm_tile<T, kAsync ? Loop::Async : Loop::Regs, P, kSplit, kTwoLevel>(p, blockIdx.x, gemm_smem<T>());
}

// Step 5's launcher (5_tf32x3.cuh): fp32 problems planned with p.rung = GemmRung::TF32x3; step 6's
// (6_f16_mma.cuh): fp16 problems planned with p.rung = GemmRung::F16Mma.
template <class Tag, class P, int kTerms>
inline void launch_tf32x3(const P& p, cudaStream_t st, bool pdl);
template <class Tag, class P>
inline void launch_f16mma(const P& p, cudaStream_t st, bool pdl);
template <class Tag, class P>
inline void launch_fma64(const P& p, cudaStream_t st, bool pdl);  // step 7 (7_fma_warp_tiles.cuh)
template <class Tag, class P>
inline void launch_stream_rows(const P& p, cudaStream_t st, bool pdl);  // step 8 (8_stream_rows.cuh)
template <class Tag, class P>
inline void launch_f16wgmma(const P& p, cudaStream_t st, bool pdl);  // step 9 (9_f16_wgmma.cuh)
template <class Tag, class P>
inline void launch_i8digits(const P& p, cudaStream_t st, bool pdl);  // step 10 (10_i8_digits.cuh)

// pdl: launch with programmatic stream serialization (phase 5's step; see pdl_wait).
template <class Tag, class T, class P>
inline void launch_gemm(const P& p, cudaStream_t st, bool pdl = false) {
  if (p.M <= 0 || p.N <= 0) return;
  if constexpr (std::is_same<T, float>::value) {
    if (p.rung == GemmRung::TF32x3) {
      launch_tf32x3<Tag, P, 3>(p, st, pdl);
      return;
    }
    if (p.rung == GemmRung::Fma64) {
      launch_fma64<Tag, P>(p, st, pdl);
      return;
    }
    if (p.rung == GemmRung::I8Digits) {
      launch_i8digits<Tag, P>(p, st, pdl);
      return;
    }
  } else {
    if (p.rung == GemmRung::F16Mma) {
      launch_f16mma<Tag, P>(p, st, pdl);
      return;
    }
    if (p.rung == GemmRung::F16Stream || p.rung == GemmRung::F16StreamStaged) {
      launch_stream_rows<Tag, P>(p, st, pdl);
      return;
    }
    if (p.rung == GemmRung::F16Wgmma) {
      launch_f16wgmma<Tag, P>(p, st, pdl);
      return;
    }
  }
  constexpr int NT = TileCfg<T>::kThreads;
  if constexpr (TwoLevelSplit<P>::value) {
    if (p.splits > kFixupGroup) {
      if constexpr (AsyncEligible<P>::value) {
        if (uses_async(p)) {
          launch_kernel(gemm_kernel<Tag, T, P, true, true, true>, p.blocks(), NT, gemm_dyn_smem(p), st, pdl, p);
          return;
        }
      }
      launch_kernel(gemm_kernel<Tag, T, P, false, true, true>, p.blocks(), NT, gemm_dyn_smem(p), st, pdl, p);
      return;
    }
  }
  if constexpr (AsyncEligible<P>::value) {
    if (uses_async(p)) {
      launch_kernel(gemm_kernel<Tag, T, P, true, true>, p.blocks(), NT, gemm_dyn_smem(p), st, pdl, p);
      return;
    }
  }
  if (p.splits == 1) launch_kernel(gemm_kernel<Tag, T, P, false, false>, p.blocks(), NT, gemm_dyn_smem(p), st, pdl, p);
  else launch_kernel(gemm_kernel<Tag, T, P, false, true>, p.blocks(), NT, gemm_dyn_smem(p), st, pdl, p);
}

// Kernel-name tags of phase 4 (they show in our traces and in nsys).
struct p4_gemm_fwd {};
struct p4_gemm_bwd_data {};
struct p4_gemm_bwd_weight {};

}  // namespace mlp
}  // namespace nb
