// common/mlp/kernels.cuh — the kernels of the straightforward MLP trainer, one per operation.
//
// The matrix products are one tiled GEMM, C[M,N] = A[M,K] · B[K,N] with fp32 accumulation, in two
// flavours chosen by the operand type T:
//   T = float : shared-memory tiled SIMT GEMM. Block tile 32x64, k-tile 32, 256 threads, each
//               thread owns a 2x4 micro-tile; tiles are double-buffered in shared memory and the
//               next tile is fetched into registers while the current one is multiplied.
//   T = half  : tensor-core GEMM (WMMA 16x16x16, fp16 operands, fp32 accumulators). Same block
//               tile, 4 warps each owning a 16x32 piece (two accumulator fragments). Long K
//               slices of plain fp16 matrices skip the registers: their tiles go global -> shared
//               memory by cp.async, 3 stages of 64 values of k (see "the cp.async mainloop").
// Step 5 (gemm/5_tf32x3.cuh) adds fp32-accurate tensor-core products for big fp32 products
// (3xTF32, 64 x 64 tiles), chosen per problem (GemmProblem::rung; phase 5 plans it).
// Each launch picks a kernel instance that contains only the mainloop it runs (and no split-K
// code when the product is not split); blocks walk the output tiles row by row.
// Operands are *views*: a view maps a logical element (row, col) to memory and loads V consecutive
// elements along its contiguous axis (16-byte vector loads when the leading dimension and the base
// pointer allow it, element by element with bounds checks otherwise). The three products of an MLP
// layer are the same kernel with different views:
//   forward        Z  = H · W^T      A = H [B,in] (row-major), B(k,n) = W[n][k]
//   backward data  dH = dZ · W       A = dZ [B,out],           B(k,n) = W[k][n]
//   backward weight dW = dZ^T · H    A(m,k) = dZ[k][m],        B = H [B,in]
// Any M, N, K works: loads outside the matrix give 0 (K not a multiple of the k-tile becomes a
// zero-padded tile) and the epilogue writes only elements inside C.
// Split-K: when the output has few tiles (a batch of 32 gives one tile row), the K range is cut
// into `splits` slices run by separate blocks; each writes its partial tile to a workspace, and the
// last block of a tile to finish (an atomic counter after a __threadfence) adds the partials in
// slice order and runs the epilogue. The sum order is fixed, so results are deterministic.
// The epilogue is a functor that receives the finished fp32 tile in shared memory; phase 4 only
// stores it (bias, activation, dropout, loss and optimizer are separate kernels: layers.cuh); phase 5
// plugs fused epilogues into the same mainloop.
//
// Every kernel is a template (or in an anonymous namespace) so that phases and tests can include
// these headers in several translation units.
//
// The code, in reading order (each file includes the one before it):
//   gemm/0_problem.cuh        tiles, operand views, the store epilogue, a problem and its split plan
//   gemm/1_register_loop.cuh  the register-staged mainloop; SIMT (fp32) and WMMA (fp16) accumulators
//   gemm/2_cp_async.cuh       fp16 tiles by cp.async, three stages
//   gemm/3_split_k.cuh        the split-K fix-up
//   gemm/4_kernels.cuh        the kernels and their launchers
//   gemm/5_tf32x3.cuh         fp32-accurate products on tensor cores (3xTF32, 64 x 64 tiles)
//   gemm/6_f16_mma.cuh        fp16 products on mma.sync in step 5's tile
//   gemm/7_fma_warp_tiles.cuh fp32 FMAs in warp tiles (8 x 4 a lane) in step 5's tile
//   gemm/8_stream_rows.cuh    fp16 products of at most 32 rows, the weights streamed into the fragments
//   gemm/9_f16_wgmma.cuh      the first layer's fp16 products on wgmma (sm_90a) in step 5's tile
//   gemm/10_i8_digits.cuh     the gathered forward's bytes times W's 8-bit digits on the integer tensor cores
//   layers.cuh                every other operation of the trainer (one kernel each)
#pragma once
#include "mlp/gemm/4_kernels.cuh"
#include "mlp/gemm/5_tf32x3.cuh"
#include "mlp/gemm/6_f16_mma.cuh"
#include "mlp/gemm/7_fma_warp_tiles.cuh"
#include "mlp/gemm/8_stream_rows.cuh"
#include "mlp/gemm/9_f16_wgmma.cuh"
#include "mlp/gemm/10_i8_digits.cuh"
#include "mlp/layers.cuh"
