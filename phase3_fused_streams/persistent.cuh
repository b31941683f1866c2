// phase3_fused_streams/persistent.cuh — phase 3's default rung: every epoch in ONE cooperative
// kernel, the data set held on chip (registers + shared memory), read from HBM once.
//
// Layout. Block b of G owns train points [nt·b/G, nt·(b+1)/G) and test points [ntest·b/G, ...).
// Its first kThreads·kRegPts train points live in registers (thread t: points t + k·kThreads,
// k < kRegPts, as fp32 x and y: 2·kRegPts registers), the rest of its train points and all its
// test points in dynamic shared memory as float4 {x0, y0, x1, y1} pairs.
//
// One epoch, per block: residual, loss and both gradient sums per thread in fp32 (each thread
// sums ~30-60 points), one transposing warp-shuffle tree for the four values (fp32), the warps'
// sums as float64 through shared memory; then warp k (k < 3, or < 4 on an evaluation epoch: the
// test loss at the parameters the epoch starts with) reduces value k of the block in float64
// (four warp sums a lane, then two shuffle levels) and publishes it.
// The default exchange (kFixed): the value is added, as a fixed-point integer split over two
// 64-bit words (fixed_publish), into words that belong to this epoch alone (zeroed before the
// launch, so no slot is ever reused); each word's top byte counts the blocks that have added to
// it, and each word has kCopies copies on 128-byte lines of their own (block b adds to copy
// b % kCopies): L2 executes the red.adds to one address one after another, and with every word
// on one line the last block's adds waited behind ~800 others (spread out: ~0.25 µs less wait an
// epoch, see the phase notes). Warp 0 of every block polls the epoch's gradient words (and the
// previous epoch's loss words) until every count is complete, adds the copies and turns the
// integer sums back into float64: integer addition is exact and commutative, so every block and
// every run gets the same bits whatever order the blocks arrived in. The kernel is compiled per exchange kind (kFix), so the default carries no branches for
// the others.
// The tagged exchange (kPoll, the previous default): the value as ONE 64-bit word, the double with
// its 12 low mantissa bits replaced by the epoch number mod 2048 (2^-40 relative); every block
// reads all G words of every value from L2 (lane i: blocks i, i+32, ...), re-reading those whose
// tag is not yet this epoch's; words alternate between two slots by epoch parity (a block writes
// epoch e+2's word only after it has read every block's epoch e+1 word, which each block wrote
// after reading epoch e's); each lane adds its words in block order, then a butterfly (xor) tree.
// Every thread then takes the step itself in float64 and rounds to fp32, exactly as the graph
// path and the reference do. Two __syncthreads and one L2 exchange per epoch; bit-identical runs
// by construction. Tried and dropped: see report/phase_notes/phase3_fused_streams.md.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <cooperative_groups.h>

#include "check.cuh"
#include "tagged_exchange.cuh"
#include "stats.h"

namespace p3 {

constexpr int kThreads = 512;       // one block per SM: 512 threads x <= 128 registers fill the register file
constexpr int kRegPts = 40;         // train points per thread held in registers (80 registers of data)
constexpr int kWarpsP = kThreads / 32;
static_assert(kWarpsP % 4 == 0 && kWarpsP <= 32, "the block tree reads four warp sums a lane");
constexpr int kMaxPerLane = 5;      // exchange: words per lane per value -> grid <= 160 blocks
constexpr int kMaxGrid = 32 * kMaxPerLane;
constexpr int kValues = 4;          // loss, Σr·x, Σr, test loss
constexpr unsigned long long kTagMask = 0xFFFull;
// How blocks meet each epoch. kPoll: every block polls the tagged words themselves (no barrier).
// kGridSync: publish, cooperative_groups grid.sync(), read the words once. kCounter: publish,
// __threadfence + one atomicAdd per block on a counter that grows by G each epoch, one thread
// spins on it (acquire load), then the words are read once.
// kFixed: every block adds its values, as fixed-point integers, into words of their own for each
// epoch (red.add: exact, so the order in which blocks arrive cannot change a bit), and one warp
// per block polls those few words (see fixed_word below).
enum Exchange : int { kPoll = 0, kGridSync = 1, kCounter = 2, kFixed = 3 };
inline size_t slot_words(int G) { return 2 * size_t(kValues) * size_t(G) + 1; }
// kFixed's words: per epoch and value, a high and a low word, each in kCopies copies (block b adds
// to copy b % kCopies), each copy on a 128-byte line of its own; zeroed before the launch.
constexpr int kFixedWords = 2 * kValues;
constexpr int kCopies = 2;
static_assert(kCopies >= 1 && (kCopies & (kCopies - 1)) == 0 && 8 * kCopies <= 32, "warp 0 reads 8 words x kCopies copies, one a lane");
constexpr int kLineWords = 16;  // 128 bytes
inline size_t fixed_words(int epochs) { return size_t(kFixedWords) * kCopies * kLineWords * size_t(epochs); }
// copy c of word `half` (0: high, 1: low) of value k in epoch e
__host__ __device__ inline size_t fixed_at(size_t e, int k, int half, int c) {
  return ((e * kFixedWords + 2 * k + half) * kCopies + c) * kLineWords;
}
// the blocks that add to copy c
__host__ __device__ inline unsigned copy_blocks(int G, int c) { return unsigned(G - c + kCopies - 1) / kCopies; }

struct PersistArgs {
  const float* x;       // train [0, nt), test [nt, nt + ntest) (the phase's storage order)
  const float* y;
  size_t nt, ntest;
  int epochs, eval_every;
  double lr, inv_nt, inv_ntest;
  float w0, b0;
  int exchange;               // kFixed (the default), kPoll, kGridSync or kCounter (see above)
  int poll_ns;                // kPoll: __nanosleep between polls of words not yet there (0: none)
  unsigned long long* slots;  // 2 × kValues × gridDim.x tagged words, 0xFF-poisoned before the launch,
                              // then one counter word (kCounter), zeroed before the launch
  unsigned long long* fixed;  // kFixed: fixed_words(epochs) words, zeroed before the launch
  double* loss;               // [epochs]: train loss at the start of each epoch
  double* test_out;           // [ceil(epochs / eval_every)]: test loss of evaluation epochs e = 0, E, 2E, ...
  float* params;              // {w, b} after the last epoch
  float* hist;                // 2 × (epochs + 1): parameters each epoch starts with (and the final ones)
  unsigned long long* split = nullptr;  // --epoch-split: kSplitWords stamps per block per epoch (see split_summary)
};
// --epoch-split: thread 0 of every block stamps, per epoch: clock64 at the epoch's start, when the
// block's sums are in shared memory, when its words are out; globaltimer then; clock64 and
// globaltimer when every word is in (kSplitWords per block per epoch, in a.split).
constexpr int kSplitWords = 6;

__host__ __device__ inline size_t part_lo(size_t n, int b, int G) { return n * size_t(b) / size_t(G); }
__host__ __device__ inline size_t train_smem_pts(size_t cnt) {
  return cnt > size_t(kThreads) * kRegPts ? cnt - size_t(kThreads) * kRegPts : 0;
}
// Dynamic shared memory of a grid of G blocks (train overflow + test, float4 pairs).
inline size_t smem_bytes(size_t nt, size_t ntest, int G) {
  const size_t tr = train_smem_pts((nt + G - 1) / G), te = (ntest + G - 1) / G;
  return ((tr + 1) / 2 + (te + 1) / 2) * 16;
}

// The exchange words' relaxed gpu-scope accesses (common/tagged_exchange.cuh); tag_word packs this
// phase's value and tag.
__device__ inline void st_relaxed(unsigned long long* p, unsigned long long v) { nb::st_relaxed_gpu(p, v); }
__device__ inline unsigned long long ld_relaxed(const unsigned long long* p) { return nb::ld_relaxed_gpu(p); }
__device__ inline unsigned long long tag_word(double v, int e) {
  return (static_cast<unsigned long long>(__double_as_longlong(v)) & ~kTagMask) | (unsigned(e) & 0x7FFu);
}
__device__ inline bool tag_ok(unsigned long long w, int e) { return (w & kTagMask) == (unsigned(e) & 0x7FFu); }
__device__ inline double tag_value(unsigned long long w) {
  return __longlong_as_double(static_cast<long long>(w & ~kTagMask));
}

// kFixed. A block's value s (float64) is published as the fixed-point number s · 2^q split over
// two words, hi = floor(s · 2^(q-32)) and lo = the next 32 bits, in [0, 2^32], each added with
// 2^56 on top: the top byte of a word counts the blocks that have added to it (G <= 160 < 256),
// the rest is the sum of their parts (|Σ hi| < 160 · 2^47 < 2^55 for |s · 2^(q-32)| < 2^47, Σ lo
// < 2^40). Integer addition is exact and commutative, so the sum is the same whatever order the
// blocks arrive in: bit-identical runs by construction, exact to 2^-q. q (the same in every
// block: fixed_point) is 32 for the gradient sums — their error then is far below the fp32 step
// they feed — and for the losses 38 bits under the exponent of their total two epochs (test loss:
// evaluations) before, so that a loss that shrinks to ~1e-15 (one point fitted almost exactly)
// keeps its precision; the losses are read one epoch late, off the step's critical path. A value
// that is not finite or too large (|s| · 2^(q-32) >= 2^47: a diverging run) adds 2^40 to lo
// instead, which no sum of good parts reaches: the reader turns it into a NaN, and the run stops
// as a diverged one does (exit 7).
constexpr unsigned long long kFixedOne = 1ull << 56;
__device__ inline double pow2(int k) { return __longlong_as_double(static_cast<long long>(1023 + k) << 52); }  // |k| < 1023
// The binary point of a loss's words: 38 bits under the exponent of a total of that loss the
// blocks have read (read off the float64 bits), never coarser than 2^-32.
__device__ inline int fixed_point(double prev) {
  const int ex = int((__double_as_longlong(prev) >> 52) & 0x7ff) - 1023;  // 1024: inf/NaN; -1023: 0, subnormal
  return prev > 0 && ex < 1024 ? min(1000, max(32, 38 - ex)) : 32;
}
__device__ inline void fixed_publish(unsigned long long* whi_at, unsigned long long* wlo_at, double s, int q) {
  long long hi = 0, lo = 1ll << 40;
  const double t = s * pow2(q - 32);
  if (fabs(t) < 0x1p31) {  // (the usual case: one conversion, then the same two words)
    const long long v = llrint(t * 0x1p32);
    hi = v >> 32;
    lo = v & 0xffffffffll;
  } else if (fabs(t) < 0x1p47) {
    const double h = floor(t);
    hi = static_cast<long long>(h);
    lo = llrint((t - h) * 0x1p32);  // t - h is exact: the fraction bits of t
  }
  const unsigned long long whi = kFixedOne + static_cast<unsigned long long>(hi);
  const unsigned long long wlo = kFixedOne + static_cast<unsigned long long>(lo);
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(whi_at), "l"(whi) : "memory");
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(wlo_at), "l"(wlo) : "memory");
}
// the blocks counted in a word (its parts' sum is within ±2^55)
__device__ inline unsigned fixed_count(unsigned long long w) { return unsigned((w + (1ull << 55)) >> 56); }

// kFixed, warp 0: lane g·kCopies + c waits for copy c of word g (`wd`; lanes with wd null: none)
// until its `cnt` blocks have added to it; the copies' parts are added (exact), and lane
// 2i·kCopies returns the value of the words 2i (high) and 2i + 1 (low) at binary point q (NaN: a
// bad block).
__device__ inline double fixed_read(const unsigned long long* wd, unsigned cnt, int q, int poll_ns) {
  const bool mine = wd != nullptr;
  unsigned long long got = mine ? ld_relaxed(wd) : 0ull;
  while (!__all_sync(0xffffffffu, !mine || fixed_count(got) == cnt)) {
    if (poll_ns) __nanosleep(poll_ns);
    if (mine && fixed_count(got) != cnt) got = ld_relaxed(wd);
  }
  long long part = mine ? static_cast<long long>(got - cnt * kFixedOne) : 0ll;
#pragma unroll
  for (int o = 1; o < kCopies; o <<= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
  const long long lo = __shfl_down_sync(0xffffffffu, part, kCopies);
  if (lo >= (1ll << 40)) return __longlong_as_double(0x7ff8000000000000ll);  // NaN
  return double(part) * pow2(32 - q) + double(lo) * pow2(-q);
}

__device__ inline unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ inline void term(float w, float b, float x, float y, float& l, float& gx, float& g) {
  const float r = fmaf(w, x, b) - y;
  l = fmaf(r, r, l);
  gx = fmaf(r, x, gx);
  g += r;
}
__device__ inline void lterm(float w, float b, float x, float y, float& l) {  // loss only (test points)
  const float r = fmaf(w, x, b) - y;
  l = fmaf(r, r, l);
}

// One launch = all `a.epochs` epochs. Launched cooperatively (all blocks co-resident) with
// kThreads threads and smem_bytes(nt, ntest, gridDim.x) bytes of dynamic shared memory. kSplit:
// the stamping twin of the kernel (--epoch-split), the same arithmetic and the same bits.
template <bool kSplit, bool kFix>  // kFix: a.exchange is kFixed (compiled without the other exchanges' branches)
__global__ void __launch_bounds__(kThreads, 1) persistent_epochs(PersistArgs a) {
  extern __shared__ float4 sdata[];
  __shared__ __align__(16) double red[kValues][kWarpsP];
  __shared__ double tot[kValues];
  // kFixed, the losses' binary points. Warp 0 reads the loss of epoch e - 1 during epoch e into
  // lossv[(e - 1) & 1] (the test loss of evaluation i into testv[i & 1]); the loss's publisher in
  // epoch e takes its binary point from lossv[e & 1], the total of epoch e - 2 (the test loss's
  // from evaluation i - 2), notes it in qlpub[e & 1] (qtpub[i & 1]) for warp 0, which reads the
  // words one epoch later. Alternating slots: no slot is read in the epoch that writes it.
  __shared__ double lossv[2], testv[2];
  __shared__ int qlpub[2], qtpub[2];
  const int G = gridDim.x, t = threadIdx.x, lane = t % 32, warp = t / 32;
  const size_t tlo = part_lo(a.nt, blockIdx.x, G), tcnt = part_lo(a.nt, blockIdx.x + 1, G) - tlo;
  const size_t elo = a.nt + part_lo(a.ntest, blockIdx.x, G);
  const size_t ecnt = a.nt + part_lo(a.ntest, blockIdx.x + 1, G) - elo;
  // (per-block counts fit 32 bits: a block holds at most a few 10^4 points)
  const unsigned reg_n = unsigned(tcnt - train_smem_pts(tcnt)), sm_n = unsigned(tcnt) - reg_n;
  const unsigned sm_pairs = sm_n / 2, te_pairs = unsigned(ecnt) / 2, te0 = (sm_n + 1) / 2, te_odd = unsigned(ecnt) & 1;

  // ---- the one read of the data from global memory
  float xr[kRegPts], yr[kRegPts];
  const unsigned kv_all = reg_n > unsigned(t) ? (reg_n - t + kThreads - 1) / kThreads : 0;
  const int kv = kv_all < unsigned(kRegPts) ? int(kv_all) : kRegPts;
#pragma unroll
  for (int k = 0; k < kRegPts; ++k) {
    const size_t i = tlo + t + size_t(k) * kThreads;
    xr[k] = k < kv ? __ldcs(a.x + i) : 0.f;
    yr[k] = k < kv ? __ldcs(a.y + i) : 0.f;
  }
  auto fill = [&](unsigned dst, size_t src, unsigned cnt) {
    for (unsigned j = t; j < (cnt + 1) / 2; j += kThreads) {
      const size_t i = src + 2 * size_t(j);
      const bool two = 2 * j + 1 < cnt;
      sdata[dst + j] = make_float4(__ldcs(a.x + i), __ldcs(a.y + i), two ? __ldcs(a.x + i + 1) : 0.f,
                                   two ? __ldcs(a.y + i + 1) : 0.f);
    }
  };
  fill(0, tlo + reg_n, sm_n);
  fill(te0, elo, unsigned(ecnt));
  if (t < 2) lossv[t] = testv[t] = 0.0;  // (kFixed: no totals yet: binary point 32)
  __syncthreads();

  float w = a.w0, b = a.b0;
  __shared__ unsigned long long stamp[4];  // kSplit: thread 0's stamps of this epoch (shared memory: no registers)
  // evaluation epochs e = 0, E, 2E, ... counted, not found by a modulo: a per-epoch integer
  // division is ~20 dependent instructions at the head of every epoch's critical path
  const bool evals = a.eval_every > 0 && a.ntest > 0;
  int next_ev = 0, ev_i = 0;
  bool prev_ev = false;  // the previous epoch evaluated the test loss
  for (int e = 0; e < a.epochs; ++e) {
    if constexpr (kSplit)
      if (t == 0) stamp[0] = clock64();
    const bool ev = evals && e == next_ev;
    if (ev) next_ev += a.eval_every;
    const int nv = ev ? 4 : 3;
    // ---- this thread's sums: registers, then shared memory (two accumulator sets)
    float l0 = 0.f, gx0 = 0.f, g0 = 0.f, l1 = 0.f, gx1 = 0.f, g1 = 0.f;
    if (kv == kRegPts) {
#pragma unroll
      for (int k = 0; k < kRegPts; k += 2) {
        term(w, b, xr[k], yr[k], l0, gx0, g0);
        term(w, b, xr[k + 1], yr[k + 1], l1, gx1, g1);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kRegPts; ++k)
        if (k < kv) term(w, b, xr[k], yr[k], l0, gx0, g0);
    }
#pragma unroll 4
    for (unsigned j = t; j < sm_pairs; j += kThreads) {
      const float4 p = sdata[j];
      term(w, b, p.x, p.y, l0, gx0, g0);
      term(w, b, p.z, p.w, l1, gx1, g1);
    }
    if ((sm_n & 1) && t == kThreads - 1) term(w, b, sdata[sm_pairs].x, sdata[sm_pairs].y, l1, gx1, g1);
    float v[kValues] = {l0 + l1, gx0 + gx1, g0 + g1, 0.f};
    if (ev) {
      float q0 = 0.f, q1 = 0.f;
#pragma unroll 4
      for (unsigned j = t; j < te_pairs; j += kThreads) {
        const float4 p = sdata[te0 + j];
        lterm(w, b, p.x, p.y, q0);
        lterm(w, b, p.z, p.w, q1);
      }
      if (te_odd && t == kThreads - 1) lterm(w, b, sdata[te0 + te_pairs].x, sdata[te0 + te_pairs].y, q1);
      v[3] = q0 + q1;
    }
    // ---- block: one transposing warp tree (fp32) for the four values: the first two levels
    // exchange half of the values each (lanes 0-15 keep values 0, 1; then lanes 0-7 value 0,
    // 8-15 value 1, ...), so 6 shuffles do the work of 20; lane 8k ends with the warp's value k.
    // The warps' sums in float64 through shared memory.
    {
      const bool up16 = lane & 16, up8 = lane & 8;
      const float u0 = (up16 ? v[2] : v[0]) + __shfl_xor_sync(0xffffffffu, up16 ? v[0] : v[2], 16);
      const float u1 = (up16 ? v[3] : v[1]) + __shfl_xor_sync(0xffffffffu, up16 ? v[1] : v[3], 16);
      float u = (up8 ? u1 : u0) + __shfl_xor_sync(0xffffffffu, up8 ? u0 : u1, 8);
      for (int o = 4; o > 0; o >>= 1) u += __shfl_xor_sync(0xffffffffu, u, o);
      if ((lane & 7) == 0) red[lane / 8][warp] = double(u);
    }
    __syncthreads();
    if constexpr (kSplit)
      if (t == 0) stamp[1] = clock64();
    // ---- warp k: value k of this block -> one tagged word; then value k of every block
    // (16 warp sums: the xor tree over lanes 0-15 leaves their sum in each of them)
    if (warp < nv) {
      const int k = warp;
      double s = 0.0;
      if (lane < kWarpsP / 4) {
        const double2 p = reinterpret_cast<const double2*>(red[k])[2 * lane];
        const double2 q2 = reinterpret_cast<const double2*>(red[k])[2 * lane + 1];
        s = (p.x + p.y) + (q2.x + q2.y);
      }
      for (int o = 16; o > 0; o >>= 1)
        if (4 * o < kWarpsP) s += __shfl_xor_sync(0xffffffffu, s, o);
      if constexpr (kFix) {
        if (lane == 0) {
          int q = 32;  // the gradient sums; a loss at the binary point of its total two back (see lossv)
          if (k == 0) q = qlpub[e & 1] = fixed_point(lossv[e & 1]);
          if (k == 3) q = qtpub[ev_i & 1] = fixed_point(testv[ev_i & 1]);
          const int c = blockIdx.x % kCopies;
          fixed_publish(a.fixed + fixed_at(e, k, 0, c), a.fixed + fixed_at(e, k, 1, c), s, q);
        }
      } else {
        unsigned long long* slot = a.slots + (size_t(e & 1) * kValues + k) * G;
        if (lane == 0) st_relaxed(slot + blockIdx.x, tag_word(s, e));
      }
    }
    if constexpr (kSplit)
      if (t == 0) {
        stamp[2] = clock64();
        stamp[3] = global_ns();
      }
    if (!kFix && a.exchange == kGridSync) {
      cooperative_groups::this_grid().sync();  // (every thread of the grid)
    } else if (!kFix && a.exchange == kCounter) {
      __syncthreads();  // this block's words are stored
      if (t == 0) {
        unsigned* counter = reinterpret_cast<unsigned*>(a.slots + 2 * size_t(kValues) * G);
        __threadfence();
        atomicAdd(counter, 1u);
        const unsigned want = unsigned(G) * unsigned(e + 1);
        unsigned seen;
        do {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
        } while (int(seen - want) < 0);
      }
      __syncthreads();
    }
    if constexpr (kFix) {
      if (warp == 0) {
        // words g = 0-3: this epoch's gradient sums (the step waits for them); 4-7: the previous
        // epoch's loss and test loss, off the critical path (their words are complete by now, or
        // nearly), so their wider binary points cost the step nothing. Lane g·kCopies + c: copy c.
        const int g = lane / kCopies, c = lane % kCopies;
        const int k = g < 2 ? 1 : g < 4 ? 2 : g < 6 ? 0 : 3, ep = g < 4 ? e : e - 1;
        const bool want = g < 4 || (g < 6 && e > 0) || (g < 8 && prev_ev);
        const int slot = k == 0 ? ep & 1 : (ev_i - 1) & 1;  // (words 4-7: epoch e - 1, the last evaluation)
        const double v = fixed_read(want ? a.fixed + fixed_at(ep, k, g & 1, c) : nullptr, copy_blocks(G, c),
                                    g < 4 ? 32 : k == 0 ? qlpub[slot] : qtpub[slot], a.poll_ns);
        if (want && lane % (2 * kCopies) == 0) tot[k] = v;
        if (want && lane == 4 * kCopies) lossv[slot] = v;
        if (want && lane == 6 * kCopies) testv[slot] = v;
      }
    } else if (warp < nv) {
      const int k = warp;
      const unsigned long long* slot = a.slots + (size_t(e & 1) * kValues + k) * G;
      unsigned long long got[kMaxPerLane];
#pragma unroll
      for (int i = 0; i < kMaxPerLane; ++i) {
        const int j = lane + 32 * i;
        got[i] = j < G ? ld_relaxed(slot + j) : 0ull;
      }
      for (;;) {
        bool done = true;
#pragma unroll
        for (int i = 0; i < kMaxPerLane; ++i) done = done && (lane + 32 * i >= G || tag_ok(got[i], e));
        if (__all_sync(0xffffffffu, done)) break;
        if (a.poll_ns) __nanosleep(a.poll_ns);
#pragma unroll
        for (int i = 0; i < kMaxPerLane; ++i) {
          const int j = lane + 32 * i;
          if (j < G && !tag_ok(got[i], e)) got[i] = ld_relaxed(slot + j);
        }
      }
      double sum = 0.0;
#pragma unroll
      for (int i = 0; i < kMaxPerLane; ++i)
        if (lane + 32 * i < G) sum += tag_value(got[i]);
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lane == 0) tot[k] = sum;
    }
    __syncthreads();
    if constexpr (kSplit)
      if (t == 0) {
        unsigned long long* o = a.split + (size_t(e) * G + blockIdx.x) * kSplitWords;
        o[0] = stamp[0];
        o[1] = stamp[1];
        o[2] = stamp[2];
        o[3] = stamp[3];
        o[4] = clock64();
        o[5] = global_ns();
      }
    // ---- the step, in every thread (the same float64 arithmetic everywhere: the same floats)
    const double s0 = tot[0], s1 = tot[1], s2 = tot[2];
    const float wn = static_cast<float>(double(w) - a.lr * (2.0 * s1 * a.inv_nt));
    const float bn = static_cast<float>(double(b) - a.lr * (2.0 * s2 * a.inv_nt));
    if (blockIdx.x == 0 && t == 0) {
      if constexpr (!kFix) {
        a.loss[e] = s0 * a.inv_nt;
        if (ev) a.test_out[ev_i] = tot[3] * a.inv_ntest;
      } else {  // the previous epoch's (read one epoch late)
        if (e > 0) a.loss[e - 1] = s0 * a.inv_nt;
        if (prev_ev) a.test_out[ev_i - 1] = tot[3] * a.inv_ntest;
      }
      a.hist[2 * e] = w;
      a.hist[2 * e + 1] = b;
    }
    ev_i += ev;
    prev_ev = ev;
    w = wn;
    b = bn;
  }
  if (kFix && blockIdx.x == 0 && warp == 0 && a.epochs > 0) {  // the last epoch's losses
    const int ep = a.epochs - 1, g = lane / kCopies, c = lane % kCopies, k = g < 2 ? 0 : 3;
    const bool want = g < 2 || (g < 4 && prev_ev);
    const double v = fixed_read(want ? a.fixed + fixed_at(ep, k, g & 1, c) : nullptr, copy_blocks(G, c),
                                k == 0 ? qlpub[ep & 1] : qtpub[(ev_i - 1) & 1], a.poll_ns);
    if (lane == 0) a.loss[ep] = v * a.inv_nt;
    if (lane == 2 * kCopies && prev_ev) a.test_out[ev_i - 1] = v * a.inv_ntest;
  }
  if (blockIdx.x == 0 && t == 0) {
    a.hist[2 * a.epochs] = a.params[0] = w;
    a.hist[2 * a.epochs + 1] = a.params[1] = b;
  }
}

// The kernel: plain, or its stamping twin (--epoch-split); for the fixed-point exchange or the others.
using EpochsKernel = void (*)(PersistArgs);
inline EpochsKernel epochs_kernel(bool split, bool fixed) {
  if (fixed) return split ? persistent_epochs<true, true> : persistent_epochs<false, true>;
  return split ? persistent_epochs<true, false> : persistent_epochs<false, false>;
}

// What fits on chip, from the device's properties and the compiled kernel's resources.
struct Fit {
  int grid = 0;              // blocks (co-resident, <= kMaxGrid)
  int blocks_per_sm = 0;
  size_t smem_optin = 0;     // dynamic shared memory a block may have
  size_t reg_points = 0;     // train points per block in registers
  int regs_per_thread = 0;
  bool cooperative = false;
  const char* why_not = nullptr;  // set when nothing can run on this device
};

// The device's limits for this kernel: co-resident blocks (occupancy at the largest dynamic
// shared memory a block may opt in to, which both the plain and the stamping kernel may take),
// that shared memory, the registers the kernel compiled to.
inline Fit query_fit(int device, int sm_count) {
  Fit f;
  int coop = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
  f.cooperative = coop != 0;
  int optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  f.smem_optin = size_t(optin);
  for (bool fixed : {true, false})
    for (bool split : {false, true}) {
      cudaFuncAttributes fa{};
      CUDA_CHECK(cudaFuncGetAttributes(&fa, epochs_kernel(split, fixed)));
      if (!split && fixed) f.regs_per_thread = fa.numRegs;  // (the default kernel's)
      f.smem_optin = std::min(f.smem_optin, size_t(optin) > fa.sharedSizeBytes ? size_t(optin) - fa.sharedSizeBytes : 0);
    }
  f.blocks_per_sm = 1 << 30;  // the fewest of the four kernels
  for (bool fixed : {true, false})
    for (bool split : {false, true}) {
      CUDA_CHECK(cudaFuncSetAttribute(epochs_kernel(split, fixed), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(f.smem_optin)));
      int per_sm = 0;
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, epochs_kernel(split, fixed), kThreads, f.smem_optin));
      f.blocks_per_sm = std::min(f.blocks_per_sm, per_sm);
    }
  f.grid = std::min(f.blocks_per_sm * sm_count, kMaxGrid);
  f.reg_points = size_t(kThreads) * kRegPts;
  if (!f.cooperative) f.why_not = "this GPU cannot launch cooperative kernels";
  else if (f.grid < 1) f.why_not = "the kernel cannot be resident on this GPU";
  return f;
}

// One cooperative launch of all a.epochs epochs on G blocks (a.split: the stamping kernel).
inline void launch_epochs(const PersistArgs& a, int G, cudaStream_t s) {
  PersistArgs arg = a;
  void* args[] = {&arg};
  CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(epochs_kernel(a.split != nullptr, a.exchange == kFixed)), dim3(G),
                                         dim3(kThreads), args, smem_bytes(a.nt, a.ntest, G), s));
}

inline bool fits(const Fit& f, size_t nt, size_t ntest, int G, const char** why) {
  if (G < 1 || G > f.grid) {
    if (why) *why = "grid larger than the co-resident blocks";
    return false;
  }
  if (smem_bytes(nt, ntest, G) > f.smem_optin) {
    if (why) *why = "the points do not fit in registers + shared memory";
    return false;
  }
  return !f.why_not;
}

// Blocks for nt train points: ~10 points per thread (fewer blocks: a cheaper exchange at small n),
// all co-resident blocks once the data needs them.
inline int auto_grid(const Fit& f, size_t nt, size_t ntest) {
  const size_t per = size_t(kThreads) * (kRegPts / 4);
  int G = static_cast<int>(std::min<size_t>(size_t(std::max(f.grid, 1)), std::max<size_t>(1, (nt + per - 1) / per)));
  if (!fits(f, nt, ntest, G, nullptr)) G = std::max(f.grid, 1);
  return G;
}

// The largest n (total points, train + test as linreg_data.h splits them) whose data fits on chip.
inline size_t largest_fit_n(const Fit& f, size_t (*train_count)(size_t)) {
  if (f.why_not) return 0;
  auto ok = [&](size_t n) { const size_t nt = train_count(n); return fits(f, nt, n - nt, f.grid, nullptr); };
  size_t lo = 1, hi = 1;
  if (!ok(lo)) return 0;
  while (ok(hi)) hi *= 2;
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    (ok(mid) ? lo : hi) = mid;
  }
  return lo;
}

// --epoch-split: where an epoch's time goes, from the stamps of thread 0 of every block (epochs
// 1 .. E-2: the first waits for the data load, the last has no next start). Per block and epoch, in
// µs (clock64 cycles at that block's measured rate): sums = the arithmetic, the fp32 warp trees and
// the first __syncthreads; publish = the float64 block tree and the word out;
// wait = until every word is in, their tree, the second __syncthreads; step = the step to the
// next epoch's start. Medians over blocks and epochs; slowest_sums: median over epochs of the
// slowest block's sums; publish_skew: median over epochs of last minus first word out (globaltimer);
// seen_after_last: median over blocks and epochs of "all words seen" minus the last word out (the
// globaltimer ticks in steps of 0.256 µs on an H100: those two are multiples of it; the rest come
// from clock64, exact).
struct SplitSummary {
  double sums_us = 0, publish_us = 0, wait_us = 0, step_us = 0, slowest_sums_us = 0, publish_skew_us = 0,
         seen_after_last_us = 0, clock_ghz = 0;
  int epochs_used = 0;
};
inline SplitSummary split_summary(const std::vector<unsigned long long>& w, int E, int G) {
  auto median_of = [](const std::vector<double>& v) { return nb::summarize(v).median; };  // (common/stats.h)
  SplitSummary r;
  if (E < 4 || G < 1 || w.size() < size_t(E) * G * kSplitWords) return r;
  auto at = [&](int e, int b, int i) { return double(w[(size_t(e) * G + b) * kSplitWords + i]); };
  std::vector<double> ghz(G);
  for (int b = 0; b < G; ++b) {
    const double ns = at(E - 1, b, 5) - at(0, b, 5);
    ghz[b] = ns > 0 ? (at(E - 1, b, 4) - at(0, b, 4)) / ns : 1.0;
  }
  std::vector<double> sums, pub, wait, step, slowest, skew, seen;
  for (int e = 1; e + 1 < E; ++e) {
    double last = 0, first = 1e300, slow = 0;
    for (int b = 0; b < G; ++b) {
      last = std::max(last, at(e, b, 3));
      first = std::min(first, at(e, b, 3));
    }
    for (int b = 0; b < G; ++b) {
      const double us = 1e-3 / ghz[b];
      const double s = (at(e, b, 1) - at(e, b, 0)) * us;
      sums.push_back(s);
      slow = std::max(slow, s);
      pub.push_back((at(e, b, 2) - at(e, b, 1)) * us);
      wait.push_back((at(e, b, 4) - at(e, b, 2)) * us);
      step.push_back((at(e + 1, b, 0) - at(e, b, 4)) * us);
      seen.push_back((at(e, b, 5) - last) * 1e-3);
    }
    slowest.push_back(slow);
    skew.push_back((last - first) * 1e-3);
  }
  r.sums_us = median_of(sums);
  r.publish_us = median_of(pub);
  r.wait_us = median_of(wait);
  r.step_us = median_of(step);
  r.slowest_sums_us = median_of(slowest);
  r.publish_skew_us = median_of(skew);
  r.seen_after_last_us = median_of(seen);
  r.clock_ghz = median_of(ghz);
  r.epochs_used = E - 2;
  return r;
}

}  // namespace p3
