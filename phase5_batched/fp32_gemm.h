// phase5_batched/fp32_gemm.h — which GEMM rung computes the own graph step's fp32 products
// (--fp32-gemm): per product, step 5 of the ladder (3xTF32 on tensor cores, common/mlp/gemm/
// 5_tf32x3.cuh) where it pays, the 32 x 64 SIMT tile elsewhere (auto); or one of them for every
// product. The rule and its measured thresholds; the trainer's product planner applies it.
#pragma once
#include <string>

#include "mlp/kernels.cuh"

namespace nb {
namespace {

using namespace nb::mlp;

// Fma: the CUDA cores only: step 7 (FMA warp tiles in step 5's 64 x 64 tile, 7_fma_warp_tiles.cuh)
// for the products auto gives step 5, the 32 x 64 tile for the others (use_tf32x3 then says where
// the 64 x 64 tile goes; the trainer's planner picks step 5 or 7 for it).
// NoDigits: auto's plan with the first layer's forward on step 5, where auto puts it on step 10 (the
// gathered bytes times W0's three 8-bit digits on the integer tensor cores, 10_i8_digits.cuh).
enum class Fp32Gemm { Auto, Tile, TF32x3, Fma, NoDigits };
inline Fp32Gemm parse_fp32_gemm(const std::string& s) {
  return s == "tile" ? Fp32Gemm::Tile : s == "tf32x3" ? Fp32Gemm::TF32x3 : s == "fma" ? Fp32Gemm::Fma
         : s == "no-digits" ? Fp32Gemm::NoDigits : Fp32Gemm::Auto;
}
inline const char* fp32_gemm_name(Fp32Gemm g) {
  return g == Fp32Gemm::Tile ? "tile" : g == Fp32Gemm::TF32x3 ? "tf32x3" : g == Fp32Gemm::Fma ? "fma"
         : g == Fp32Gemm::NoDigits ? "no-digits" : "auto";
}
// Whether the first layer's forward goes to step 10 where auto's rule gives it the 64 x 64 tile (the
// caller checks i8digits_ok): auto's choice. W1's fp32 step, auto against no-digits, one H100 build
// (profiles/nvidia-h100-80gb-hbm3/logs/digits_bf146b3/ab-summary.txt), us: 63.83 / 66.51 at batch
// 1,024, 69.86 / 70.74 at 2,048, 89.84 / 92.95 at 4,096, 122.31 / 131.64 at 8,192 (2 rounds).
inline bool use_i8digits(Fp32Gemm choice) { return choice == Fp32Gemm::Auto; }
// auto's rule: 3xTF32 for products of at least kX3MinRows output rows, kX3MinMacs multiply-adds
// and kX3MinTiles of its 64 x 64 tiles, and, with fewer than kX3FewTiles tiles, at least
// kX3FewTilesMinMacs multiply-adds; the 32 x 64 SIMT tile elsewhere. (Below that the SIMT tile's
// smaller blocks fill more SMs, and a product with few 64 x 64 tiles, like W1's 64 x 128 weight
// gradient, needs many K slices to fill the GPU; their fix-up costs more than the tensor cores save.)
// The last condition comes from W1's step on one H200 (logs/plan_77c2cf1/x3/): the first layer's
// weight gradient (128 x 784 x batch, 26 tiles) on step 5 costs the step time at batch 512 and
// 1,024 and saves it from 2,048 up, while its forward (batch x 128 x 784) pays from 1,024 up (32
// tiles); with both on step 5, as before, 1,024 and 512 ran slower than with none.
constexpr int kX3MinRows = 64;
constexpr double kX3MinMacs = 32.0 * 1024 * 1024;
constexpr int kX3MinTiles = 16;
constexpr int kX3FewTiles = 32;
constexpr double kX3FewTilesMinMacs = 128.0 * 1024 * 1024;
inline bool use_tf32x3(Fp32Gemm choice, int M, int N, int K) {
  if (choice != Fp32Gemm::Auto && choice != Fp32Gemm::Fma && choice != Fp32Gemm::NoDigits) return choice == Fp32Gemm::TF32x3;
  const int tiles = ((M + kXBM - 1) / kXBM) * ((N + kXBN - 1) / kXBN);
  const double macs = static_cast<double>(M) * N * K;
  return M >= kX3MinRows && macs >= kX3MinMacs && tiles >= kX3MinTiles &&
         (tiles >= kX3FewTiles || macs >= kX3FewTilesMinMacs);
}

// The fp16 products (--fp16-gemm): per product, step 6 of the ladder (fp16 mma.sync in step 5's
// 64 x 64 tile, common/mlp/gemm/6_f16_mma.cuh) where it pays, the 32 x 64 WMMA tile of steps 1-4
// elsewhere (auto); or one of them for every product (tile, mma); or auto's plan with the first
// layer's two products on step 9 (wgmma, common/mlp/gemm/9_f16_wgmma.cuh), where the build and the
// device carry it (wgmma_ok).
// auto's rule: step 6 for products of more than one row tile, at least kF16MinTiles of its 64 x 64
// tiles and K >= kF16MinK (W2's forwards at h = 4,096 and 8,192, one row tile wide, stay off it: in
// one call, 1,000 steps, the WMMA tile took 224.5 / 580.0 ms against step 6's 233.8 / 657.0,
// logs/auto_938efe6/; the width sweep's records at those widths run under this rule),
// and for products of one row tile whose N and K are kF16FewRowsMinNK or more and N at most
// kF16FewRowsMaxN (W2's forward at batch 32, h = 512-2,048: step 6 splits K over blocks where the
// WMMA tile runs one long k-loop; W2's step with every product on step 6 against none, PDL on,
// 8033768: h = 512 56.3 against 58.5 us, 1,024 67.5 against 73.5, 2,048 115.7 against 115.9, 256
// 53.4 against 52.4; logs/f16mma_8033768/).
// (Measured inside W1's step, PDL off, H200: step 6 takes the first layer's forward at batch 8,192 in
// 40.3 us against the WMMA tile's 58.2, at 4,096 27.3 against 38.8, and the second layer's forward
// at 8,192 (128 tiles, K = 128) 7.0 against 11.2; it loses where the output has few tiles — the
// weight gradients (26 tiles or fewer at K = batch; their split-K blocks are long chains) — and
// where K = 64 leaves two k-tiles per block. At 2,048 the first layer's forward (64 tiles) is the
// one product the rule gets wrong: 20.3 against 19.1. profiles/nvidia-h200/logs/bias_7bb5a0a/.)
// And the first layer's weight gradient (B: the gathered bytes, which step 6 reads by ldmatrix) from
// batch kF16BytesBMinK: GEMM benchmark, H200, 5345e1d, 128 x 784 x K: at K = 2,048 20.4 us against
// the WMMA tile's 22.8, at 8,192 37.1 against 54.3 (logs/f16bytes_5345e1d/gemm-b*-fp16.log); and
// inside W1's step at batch 1,024 (below).
// And products of at least kF16ManyRowsM rows with kF16ManyRowsMinTiles tiles or more (K >= kF16MinK):
// W1's gathered forward at batch 1,024 and its hidden forward at 1,024 and 2,048. Each kernel's own
// time inside W1's fp16 step, PDL off, H200, 221cbbf, WMMA tile (auto) against step 6 (mma), us:
// batch 1,024 gathered forward 15.14 / 13.09, hidden forward 7.23 / 6.18, first layer's weight
// gradient 18.17 / 17.17; 2,048 hidden forward 8.19 / 6.31. The products it leaves on the WMMA tile
// lose on step 6 there: backward-data 4.66 / 6.48 and softmax-CE 5.49 / 6.82 at 1,024 (K = 64 and
// 10), the upper updates even (13.33 / 13.28). logs/f16rule_221cbbf/summary.txt. W1's fp16 step with
// this clause against without it (H100, 2 rounds alternating, profiles/nvidia-h100-80gb-hbm3/logs/
// f16plan_d9b3450/): 58.90 -> 50.36 us at batch 1,024, 62.78 -> 56.01 at 2,048, 66.32 -> 66.19 at 4,096.
constexpr int kF16MinTiles = 64;
constexpr int kF16BytesBMinK = 1024;
constexpr int kF16MinK = 128;
constexpr int kF16ManyRowsM = 1024, kF16ManyRowsMinTiles = 16;
constexpr int kF16FewRowsMinNK = 512, kF16FewRowsMaxN = 2048;
inline bool use_f16mma(const std::string& choice, int M, int N, int K, bool byte_b = false) {
  if (choice != "auto" && choice != "wgmma") return choice == "mma";
  const int tiles = ((M + kXBM - 1) / kXBM) * ((N + kXBN - 1) / kXBN);
  if (M > kXBM && tiles >= kF16MinTiles && K >= kF16MinK) return true;
  if (M >= kF16ManyRowsM && tiles >= kF16ManyRowsMinTiles && K >= kF16MinK) return true;
  if (byte_b && K >= kF16BytesBMinK) return true;
  return M <= kXBM && N >= kF16FewRowsMinNK && N <= kF16FewRowsMaxN && K >= kF16FewRowsMinNK;
}

// The forward products of at most 32 rows (--fp16-stream): step 8 of the ladder (8_stream_rows.cuh:
// the weights streamed into the MMAs' fragments, a 128-column block tile) for products whose
// weights have at least kF16StreamMinRows rows (the last layer, softmax-CE, a few rows over a long
// K: columns) (auto); on: every forward product step 8 can take; off: never (the plan above).
// The threshold: W2's step on the graph path with every such product on step 8 against none, one
// H200 call, 2 rounds alternating (profiles/nvidia-h200/logs/stream_rows/ab-s4.txt), us a step:
// h = 1,024 64.0 -> 62.0, 2,048 95.9 -> 94.9, 4,096 210.0 -> 196.3, 8,192 571.4 -> 559.0; narrower
// widths were not measured.
constexpr int kF16StreamMinRows = 1024;
inline bool use_stream_rows(const std::string& choice, int M, int N, int K, bool last) {
  if (choice == "off" || M > kSrBM) return false;
  return choice == "on" || (last ? K : N) >= kF16StreamMinRows;  // (auto, regs and staged)
}
// Which of those products have their W staged in shared memory (8_stream_rows.cuh's kStaged)
// rather than streamed through registers: auto, those of at least kF16StagedMinRows W rows (the
// 128-column tile's: softmax-CE keeps its narrow kernel); staged, all; regs (and on), none. The
// threshold: W2's step, staged against registers for every step 8 product, one H100 call, 2 rounds
// alternating (profiles/nvidia-h100-80gb-hbm3/logs/staged_1d73719/), us a step: h = 1,024 57.70 ->
// 59.21, 2,048 99.35 -> 98.10, 4,096 226.69 -> 218.24, 8,192 703.19 -> 686.47. (Alone, PDL off, the
// gathered first layer was slower staged at every width, 8.76 -> 9.73, 9.45 -> 10.16, 10.94 ->
// 11.71 us at 2,048 / 4,096 / 8,192; in the step, a rule that keeps it on registers took 97.89 /
// 220.73 / 684.88 us against this rule's 98.44 / 218.53 / 686.87 at 2,048 / 4,096 / 8,192, one H100
// call, 2 rounds alternating: profiles/nvidia-h100-80gb-hbm3/logs/sweep_d9fc1ae/w2/ab-summary.txt.)
constexpr int kF16StagedMinRows = 2048;
inline bool use_staged_rows(const std::string& choice, int N) {
  return choice == "staged" || (choice == "auto" && N >= kF16StagedMinRows);
}

}  // namespace
}  // namespace nb
