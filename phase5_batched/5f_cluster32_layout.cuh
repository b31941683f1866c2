// phase5_batched/5f_cluster32_layout.cuh — rung 5f's shape and shared memory: the split of W1's units over
// the cluster's blocks (C32Dims: units a block, padded batch, bank-conflict-free row strides), the byte
// offsets of a block's buffers (C32Layout), and both as compile-time constants for W1's instance.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "5f_cluster32.h"
#include "onchip_smem_carve.cuh"

namespace nb {
namespace mlp {

// ------------------------------------------------------------------ shapes and shared memory
// The shape as the kernel sees it (host and device compute it the same way).
struct C32Dims {
  int B, D, H1, H2, C, NB;
  int U1, U2;   // first- and second-layer units a block (ceil(H / NB); U1 <= kC32Units)
  int Bp;       // the batch padded to the instance's row tiles (32 or 64)
  int ng16;     // groups of 16 pixels (the forward product's K); ng32: groups of 32 (the gradient's M)
  int ng32;
  int xs;       // bytes per image row in shared memory: D or D + 16, xs / 16 odd (conflict-free words)
  int ldw;      // row stride of W1's own rows (floats): >= 32 * ng32, = 16 mod 32
  int ld1;      // row stride of h1 and W2's own rows: >= H1, = 16 mod 32 (float4 reads by 2 rows at once)
  int ld2;      // row stride of h2, dz2: H2 rounded up to 4
  int ld3;      // row stride of W3: >= H2, = 4 mod 32 (float4 reads by 8 classes at once)
  int ldz;      // row stride of dz1's transposed copies: Bp + 8 (conflict-free float2 reads)
};
__host__ __device__ constexpr int c32_up(int x, int m) { return (x + m - 1) / m * m; }
__host__ __device__ constexpr C32Dims c32_dims(int B, int D, int H1, int H2, int C, int NB, int Bp) {
  C32Dims d{};
  d.B = B, d.D = D, d.H1 = H1, d.H2 = H2, d.C = C, d.NB = NB;
  d.U1 = (H1 + NB - 1) / NB, d.U2 = (H2 + NB - 1) / NB;
  d.Bp = Bp;
  d.ng16 = (D + 15) / 16, d.ng32 = (D + 31) / 32;
  d.xs = (D / 16) % 2 == 1 ? D : D + 16;
  d.ldw = d.ng32 * 32 + 16;
  d.ld1 = c32_up(H1, 32) + 16;
  d.ld2 = c32_up(H2, 4);
  d.ld3 = c32_up(H2, 32) + 4;
  d.ldz = Bp + 8;
  return d;
}
// W1's shape and split, compiled into one instance of the kernel.
constexpr C32Dims kC32W1 = c32_dims(32, 784, 128, 64, 10, 16, 32);
// The strides' bank arithmetic (see C32Dims), checked on W1's shape where the compiler can.
static_assert(kC32W1.xs / 16 % 2 == 1 && kC32W1.xs >= kC32W1.D, "image rows: an odd number of 16-byte chunks");
static_assert(kC32W1.ldw % 32 == 16 && kC32W1.ld1 % 32 == 16, "W1 rows, h1 rows: 16 words mod 32");
static_assert(kC32W1.ld3 % 32 == 4 && kC32W1.ldz % 32 == 8 && kC32W1.ld2 % 4 == 0, "W3, dz1 and h2 row strides");
static_assert(kC32W1.U1 == 8 && kC32W1.U2 == 4 && kC32W1.U1 * kC32W1.NB == kC32W1.H1 && kC32W1.U2 * kC32W1.NB == kC32W1.H2,
              "W1's split: every block owns 8 first-layer and 4 second-layer units (the instance assumes it)");

// Byte offsets into the dynamic shared memory.
struct C32Layout {
  size_t bars, clk, hyp, x, x2, w1, b1, part, h1, h1o, dz1f, dz1h, dz1l, w2r, b2, w2c, h2, h2o, dz2, w3, b3, z3, rloss, lab, mask1, mask2;
  size_t m1, v1, mb1, vb1, m2r, v2r, mb2, vb2, m2c, v2c, m3, v3, mb3, vb3;  // Adam's state (last; SGD stops before)
  size_t total_sgd, total_adam, total;  // the bytes in use without and with Adam's state; this layout's
};
// two_x: a second image buffer, so that the next batch lands by cp.async during the step (W1's
// instance); without it the next batch waits in registers (the other instances: room for wider layers).
__host__ __device__ constexpr C32Layout c32_layout(const C32Dims& d, bool adam, bool two_x) {
  C32Layout L{};
  SmemCarve<16> carve;
  const auto take = [&](size_t bytes) { return carve.take(bytes); };
  const size_t f = sizeof(float), U = kC32Units, KC = 16 / (d.Bp / 16);
  L.bars = take(4 * sizeof(uint64_t));  // mbarriers: h1 and h2 of each step parity
  L.clk = take((kC32Segments + 1) * sizeof(unsigned long long));  // --breakdown's sums
  L.hyp = take(2 * 8 * f);  // Adam's constants of a step (by parity): AdamHyper and 1 / bc2_sqrt
  // (E reads whole 32-pixel groups but no word past D: xs = D needs no pad)
  L.x = take(static_cast<size_t>(d.Bp) * d.xs);
  L.x2 = two_x ? take(static_cast<size_t>(d.Bp) * d.xs) : L.x;
  L.w1 = take(U * d.ldw * f);
  L.b1 = take(U * f);
  L.part = take(KC * d.Bp * U * f);
  L.h1 = take(2 * static_cast<size_t>(d.Bp) * d.ld1 * f);  // by step parity
  L.h1o = take(static_cast<size_t>(d.Bp) * U * f);
  L.dz1f = take(U * d.ldz * f), L.dz1h = take(U * d.ldz * f), L.dz1l = take(U * d.ldz * f);
  L.w2r = take(static_cast<size_t>(d.U2) * d.ld1 * f);
  L.b2 = take(d.U2 * f);
  L.w2c = take(static_cast<size_t>(d.ld2) * U * f);
  L.h2 = take(2 * static_cast<size_t>(d.Bp) * d.ld2 * f);  // by step parity
  L.h2o = take(static_cast<size_t>(d.Bp) * d.U2 * f);
  L.dz2 = take(static_cast<size_t>(d.Bp) * d.ld2 * f);
  L.w3 = take(static_cast<size_t>(d.C) * d.ld3 * f);
  L.b3 = take(d.C * f);
  L.z3 = take(static_cast<size_t>(d.Bp) * kC32MaxClasses * f);  // dz3, row stride 12 (float2 reads)
  L.rloss = take(d.Bp * f);
  L.lab = take(2 * d.Bp * sizeof(int));  // by step parity
  L.mask1 = take(static_cast<size_t>(d.Bp) * U * f);
  L.mask2 = take(static_cast<size_t>(d.Bp) * d.U2 * f);
  L.total_sgd = carve.off;
  L.m1 = take(U * d.ldw * f), L.v1 = take(U * d.ldw * f);
  L.mb1 = take(U * f), L.vb1 = take(U * f);
  L.m2r = take(static_cast<size_t>(d.U2) * d.ld1 * f), L.v2r = take(static_cast<size_t>(d.U2) * d.ld1 * f);
  L.mb2 = take(d.U2 * f), L.vb2 = take(d.U2 * f);
  L.m2c = take(static_cast<size_t>(d.ld2) * U * f), L.v2c = take(static_cast<size_t>(d.ld2) * U * f);
  L.m3 = take(static_cast<size_t>(d.C) * d.ld3 * f), L.v3 = take(static_cast<size_t>(d.C) * d.ld3 * f);
  L.mb3 = take(d.C * f), L.vb3 = take(d.C * f);
  L.total_adam = carve.off;
  L.total = adam ? L.total_adam : L.total_sgd;
  return L;
}

// W1's shape and layout as compile-time constants (device code reads static constexpr ints, not a
// host object): the same member names as C32Dims and C32Layout, so one kernel source serves both.
struct C32DimsW1 {
  static constexpr int B = kC32W1.B;
  static constexpr int D = kC32W1.D;
  static constexpr int H1 = kC32W1.H1;
  static constexpr int H2 = kC32W1.H2;
  static constexpr int C = kC32W1.C;
  static constexpr int NB = kC32W1.NB;
  static constexpr int U1 = kC32W1.U1;
  static constexpr int U2 = kC32W1.U2;
  static constexpr int Bp = kC32W1.Bp;
  static constexpr int ng16 = kC32W1.ng16;
  static constexpr int ng32 = kC32W1.ng32;
  static constexpr int xs = kC32W1.xs;
  static constexpr int ldw = kC32W1.ldw;
  static constexpr int ld1 = kC32W1.ld1;
  static constexpr int ld2 = kC32W1.ld2;
  static constexpr int ld3 = kC32W1.ld3;
  static constexpr int ldz = kC32W1.ldz;
};
struct C32LayoutW1 {
  static constexpr C32Layout at = c32_layout(kC32W1, true, true);
  static constexpr size_t bars = at.bars;
  static constexpr size_t clk = at.clk;
  static constexpr size_t hyp = at.hyp;
  static constexpr size_t x = at.x;
  static constexpr size_t x2 = at.x2;
  static constexpr size_t w1 = at.w1;
  static constexpr size_t b1 = at.b1;
  static constexpr size_t part = at.part;
  static constexpr size_t h1 = at.h1;
  static constexpr size_t h1o = at.h1o;
  static constexpr size_t dz1f = at.dz1f;
  static constexpr size_t dz1h = at.dz1h;
  static constexpr size_t dz1l = at.dz1l;
  static constexpr size_t w2r = at.w2r;
  static constexpr size_t b2 = at.b2;
  static constexpr size_t w2c = at.w2c;
  static constexpr size_t h2 = at.h2;
  static constexpr size_t h2o = at.h2o;
  static constexpr size_t dz2 = at.dz2;
  static constexpr size_t w3 = at.w3;
  static constexpr size_t b3 = at.b3;
  static constexpr size_t z3 = at.z3;
  static constexpr size_t rloss = at.rloss;
  static constexpr size_t lab = at.lab;
  static constexpr size_t mask1 = at.mask1;
  static constexpr size_t mask2 = at.mask2;
  static constexpr size_t m1 = at.m1;
  static constexpr size_t v1 = at.v1;
  static constexpr size_t mb1 = at.mb1;
  static constexpr size_t vb1 = at.vb1;
  static constexpr size_t m2r = at.m2r;
  static constexpr size_t v2r = at.v2r;
  static constexpr size_t mb2 = at.mb2;
  static constexpr size_t vb2 = at.vb2;
  static constexpr size_t m2c = at.m2c;
  static constexpr size_t v2c = at.v2c;
  static constexpr size_t m3 = at.m3;
  static constexpr size_t v3 = at.v3;
  static constexpr size_t mb3 = at.mb3;
  static constexpr size_t vb3 = at.vb3;
  static constexpr size_t total_sgd = at.total_sgd, total_adam = at.total_adam;
};
static_assert(C32LayoutW1::total_adam <= kSm90SmemOptinBytes, "W1's layout (two image buffers, Adam) fits an H100's 227 KB a block");
static_assert(C32LayoutW1::bars % 8 == 0 && C32LayoutW1::x % 16 == 0 && C32LayoutW1::x2 % 16 == 0 && C32LayoutW1::w1 % 16 == 0,
              "mbarriers 8-byte, cp.async and float4 buffers 16-byte aligned");

}  // namespace mlp
}  // namespace nb
