// tests/gpu/test_mlp_kernels.cu — every kernel of common/mlp/kernels.cuh against a float64 CPU
// reference, on fresh random inputs at awkward shapes (batch 1 and 33; widths 10, 100, 300, plus
// 784/128 for the 16-byte vector path), with every output poisoned (NaN) before the run so an
// unwritten element fails. Tolerances (relative, norm-wise): fp32 1e-5, fp16 GEMMs 1e-2 (against
// the reference on the unrounded fp32 operands, so operand rounding is included).
// Also: the host copy of Philox4x32-10 equals cuRAND's curand_Philox4x32_10 bit for bit, so the
// float64 reference can use the very dropout masks the GPU used.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mlp/kernels.cuh"
#include "check.cuh"
#include "gpu_test.cuh"
#include "reference.h"

namespace nbtest {
namespace {

using namespace nb::mlp;

std::vector<float> random_vec(size_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(test_rng());
  return v;
}

template <class T>
T to_t(float x);
template <>
float to_t<float>(float x) {
  return x;
}
template <>
__half to_t<__half>(float x) {
  return __float2half_rn(x);
}
template <class T>
std::vector<T> convert(const std::vector<float>& v) {
  std::vector<T> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = to_t<T>(v[i]);
  return o;
}


double rel(const std::vector<float>& a, const std::vector<double>& b) { return nb::rel_error(a.data(), b.data(), b.size()); }

std::vector<float> as_float(const std::vector<__half>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __half2float(v[i]);
  return o;
}

// The three MLP products at one shape: forward C[M,N] = A[M,K]·W^T with W [N,K]; backward data
// C[M,N] = A[M,K]·W with W [K,N]; backward weight C[M,N] = A^T·X with A stored [K,M], X [K,N].
enum class Kind { Fwd, Dgrad, Wgrad };
constexpr int kStep7 = 7;  // run_gemm's `terms` for step 7
constexpr int kStep8 = 8;  // run_gemm's `terms` for step 8 (fp16 forward products of at most 32 rows)
constexpr int kStep9 = 9;  // run_gemm's `terms` for step 9 (fp16 forward products on wgmma)
constexpr int kStep8Staged = 10;  // step 8 with W staged in shared memory (--fp16-stream staged)
constexpr int kStep8Cluster = 11;        // step 8, a tile's slices as one cluster (phase 5's --handover cluster)
constexpr int kStep8StagedCluster = 12;  // both
constexpr bool step8_staged(int terms) { return terms == kStep8Staged || terms == kStep8StagedCluster; }
constexpr bool step8_cluster(int terms) { return terms == kStep8Cluster || terms == kStep8StagedCluster; }

// terms = 0: the 32 x 64 tile (steps 1-4), planned with plan_splits (at most max_splits slices; past
// 16 with Epi = VecStoreEpi, a weight gradient takes the two-level fix-up). fp32, terms = 3: step 5
// (3xTF32), planned with plan_tf32x3 and launched through launch_gemm; terms = 1: step 5's kernel
// with the high parts only (plain TF32), which the fp32 tolerance must reject; terms = kStep7: step
// 7 (FMA warp tiles in step 5's tile), planned with plan_fma64. fp16, terms > 0:
// step 6 (mma.sync in step 5's tile), planned with plan_f16mma. With terms > 0 or more than 16
// slices the second launch must equal the first bit for bit (the split-K sums run in a fixed order).
// The float64 reference multiplies the operands as the GPU holds them (fp16 ones rounded).
// Products run_gemm ran with step 8's cluster hand-over (and again with the global one, bit-compared).
int* cluster_runs() {
  static int n = 0;
  return &n;
}

template <class T, class Epi = StoreEpi>
double run_gemm(Kind kind, int M, int N, int K, int sm_count, int* splits_used, int terms = 0, int max_splits = 16) {
  std::vector<float> a = random_vec(static_cast<size_t>(M) * K), b = random_vec(static_cast<size_t>(K) * N);
  if constexpr (std::is_same<T, __half>::value) {  // the operands' own values: fp16 rounded
    for (float& x : a) x = __half2float(to_t<T>(x));
    for (float& x : b) x = __half2float(to_t<T>(x));
  }
  // a: logical A[M,K] (stored row-major, or as [K,M] for Wgrad). b: logical B[K,N] storage per kind.
  std::vector<double> ref(static_cast<size_t>(M) * N, 0.0);
  auto A = [&](int m, int k) -> double {
    return kind == Kind::Wgrad ? a[static_cast<size_t>(k) * M + m] : a[static_cast<size_t>(m) * K + k];
  };
  auto Bv = [&](int k, int n) -> double {
    return kind == Kind::Fwd ? b[static_cast<size_t>(n) * K + k] : b[static_cast<size_t>(k) * N + n];
  };
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += A(m, k) * Bv(k, n);
      ref[static_cast<size_t>(m) * N + n] = s;
    }
  Dev<T> da(convert<T>(a)), db(convert<T>(b));
  Dev<float> dc(static_cast<size_t>(M) * N);
  dc.poison();
  Epi epi;
  epi.c = dc.p, epi.ldc = N;
  auto go = [&](auto p) {
    p.M = M, p.N = N, p.K = K, p.epi = epi;
    if (terms > 0) {
      if constexpr (std::is_same<T, float>::value) {
        if (terms == kStep7) plan_fma64(p, sm_count);
        else plan_tf32x3(p, sm_count);
      } else {
        if constexpr (StreamRowsViews<decltype(p)>::value) {
          if (terms == kStep8 || step8_staged(terms) || step8_cluster(terms)) {
            REQUIRE(stream_rows_ok(p));
            plan_stream_rows(p, sm_count, step8_staged(terms), step8_cluster(terms));
          } else if (terms == kStep9) {
            REQUIRE(wgmma_ok(p, device_cc()));
            plan_f16wgmma(p, sm_count);
          } else {
            plan_f16mma(p, sm_count);
          }
        } else {
          REQUIRE(terms != kStep9);  // step 9 takes the forward's operands (fp16 B [n][k]) only
          plan_f16mma(p, sm_count);
        }
      }
    } else {
      plan_splits(p, sm_count, 4, max_splits, max_splits > 16 ? 1 : 2);
    }
    Dev<float> ws(std::max<size_t>(ws_floats(p), 1));
    Dev<unsigned> ctr(std::max<size_t>(counter_slots(p), 1));
    CUDA_CHECK(cudaMemset(ctr.p, 0, ctr.n * sizeof(unsigned)));
    p.ws = ws.p, p.counters = ctr.p;
    *splits_used = p.splits;
    auto launch = [&] {
      if constexpr (std::is_same<T, float>::value) {
        if (terms == 1) launch_tf32x3<p4_gemm_fwd, decltype(p), 1>(p, nullptr, false);
        else launch_gemm<p4_gemm_fwd, T>(p, nullptr);
      } else {
        launch_gemm<p4_gemm_fwd, T>(p, nullptr);
      }
      CUDA_CHECK(cudaDeviceSynchronize());
    };
    launch();
    const std::vector<float> first = dc.get();
    // A second launch reuses the counters: they must have been reset by the last block.
    dc.poison();
    launch();
    const auto c = ctr.get();
    for (unsigned v : c) REQUIRE(v == 0u);
    if (terms > 0 || p.splits > kFixupGroup)
      REQUIRE(std::memcmp(first.data(), dc.get().data(), first.size() * sizeof(float)) == 0);
    // Step 8's cluster hand-over adds the slices in the global one's order: the same bits as the
    // global hand-over of the slices it launched (fewer than planned where the GPU cannot hold
    // every cluster at once).
    if constexpr (StreamRowsViews<decltype(p)>::value) {
      if (p.cluster) {
        ++*cluster_runs();
        p = stream_rows_launched<p4_gemm_fwd>(p);
        p.cluster = false;
        dc.poison();
        launch();
        REQUIRE(std::memcmp(first.data(), dc.get().data(), first.size() * sizeof(float)) == 0);
      }
    }
  };
  if (kind == Kind::Fwd) {
    GemmProblem<MatView<T, true>, MatView<T, false>, Epi> p;
    p.a = make_view<T, true>(da.p, K), p.b = make_view<T, false>(db.p, K);
    go(p);
  } else if (kind == Kind::Dgrad) {
    GemmProblem<MatView<T, true>, MatView<T, true>, Epi> p;
    p.a = make_view<T, true>(da.p, K), p.b = make_view<T, true>(db.p, N);
    go(p);
  } else {
    GemmProblem<MatView<T, false>, MatView<T, true>, Epi> p;
    p.a = make_view<T, false>(da.p, M), p.b = make_view<T, true>(db.p, N);
    go(p);
  }
  return rel(dc.get(), ref);
}

const char* kind_name(Kind k) { return k == Kind::Fwd ? "fwd" : k == Kind::Dgrad ? "dgrad" : "wgrad"; }

template <class T>
void gemm_sweep(double tol) {
  const int Ms[] = {1, 33};
  const int NKs[] = {10, 100, 300};
  int split_runs = 0;
  for (Kind kind : {Kind::Fwd, Kind::Dgrad, Kind::Wgrad})
    for (int M : Ms)
      for (int N : NKs)
        for (int K : NKs)
          for (int sm : {1, 132}) {  // sm 1: one split; 132: split-K where the shape allows it
            int splits = 0;
            const double e = run_gemm<T>(kind, M, N, K, sm, &splits);
            split_runs += splits > 1;
            INFO(kind_name(kind) << " M=" << M << " N=" << N << " K=" << K << " splits=" << splits);
            CHECK(e <= tol);
          }
  CHECK(split_runs > 0);  // the split-K fix-up was exercised
  // 16-byte vector path: leading dimensions that are multiples of 8.
  for (Kind kind : {Kind::Fwd, Kind::Dgrad, Kind::Wgrad}) {
    int splits = 0;
    const double e = run_gemm<T>(kind, 33, 128, 784, 132, &splits);
    INFO(kind_name(kind) << " 33x128x784 splits=" << splits);
    CHECK(e <= tol);
  }
  // Long K slices (fp16: the cp.async mainloop, 3 stages of 64, a last stage of 40): one split of
  // 32 k-tiles, and split-K; M, N not multiples of the tile. K = 270 on 132 SMs: 3 splits of 96
  // (a stage half past the slice's end, zero-filled) with a last slice of 78 (or 80); on 1 SM one
  // slice whose last stage holds 14 (or 16).
  for (Kind kind : {Kind::Fwd, Kind::Dgrad, Kind::Wgrad})
    for (int sm : {1, 132}) {
      int splits = 0;
      for (int K : {270, 272}) {  // 272: 16-byte rows for every operand
        const double e0 = run_gemm<T>(kind, 33, 104, K, sm, &splits);
        INFO(kind_name(kind) << " 33x104x" << K << " sm=" << sm << " splits=" << splits);
        CHECK(e0 <= tol);
        CHECK(splits == (sm == 1 ? 1 : 3));
      }
      const double e = run_gemm<T>(kind, 33, 104, 1000, sm, &splits);
      INFO(kind_name(kind) << " 33x104x1000 sm=" << sm << " splits=" << splits);
      CHECK(e <= tol);
      const double e2 = run_gemm<T>(kind, 104, 296, 1000, sm, &splits);
      INFO(kind_name(kind) << " 104x296x1000 sm=" << sm << " splits=" << splits);
      CHECK(e2 <= tol);
    }
}

}  // namespace

TEST_CASE("mlp: fp32 SIMT GEMM, all three layouts, awkward shapes, split-K") {
  NB_SKIP_WITHOUT_DEVICE();
  gemm_sweep<float>(1e-5);
}

// Step 5, 3xTF32, within tf32x3_tol (gpu_test.cuh); its byte quotients and its split's rounding
// (tf32_rna) bit for bit against the division and the cvt. Shapes: M, N, K off the 64 x 64 x 32 tile, K = 1, batch-long K (the
// weight gradient at batch 8,191) split and unsplit, the three layouts; the one-term kernel (plain
// TF32, about 2^-12 per operand) must fail the same bound.

__global__ void tf32_rounding_kernel(const float* x, uint32_t* cvt, uint32_t* ours, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t c;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(c) : "f"(x[i]));
  cvt[i] = c;
  ours[i] = tf32_rna(x[i]);
}

__global__ void byte_quotients_kernel(float* div, float* fast) {
  const unsigned b = threadIdx.x;
  div[b] = static_cast<float>(b) / 255.0f;
  fast[b] = byte_over_255(b);
}

// Host-side: step 5's split-K plan never launches more blocks than one wave holds (kXBlocksPerSm an
// SM): a block past the wave runs after the others and doubles the product's time. W1's and W2's
// products at batch 32 .. 8,192 and a few odd shapes, on an H100's, an H200's and a small GPU's SMs.
// The plain store with phase 5's fix-up form: a weight gradient of it may be split past 16 slices.
struct VecStoreEpi : StoreEpi {
  static constexpr bool kVecFixup = true;
};

TEST_CASE("mlp: split-K past 16 slices (two-level fix-up), long-K weight gradients, bit-stable") {
  // K = batch: the last group of slices holds one slice (8191, 4097, 2049 rows of K) or a full 16.
  struct Shape { int M, N, K; };
  const Shape shapes[] = {{10, 64, 8191}, {64, 128, 8192}, {37, 100, 4097}, {1, 10, 2049}};
  for (const Shape& sh : shapes)
    for (int sm : {132, 16}) {
      int splits = 0;
      const double e = run_gemm<float, VecStoreEpi>(Kind::Wgrad, sh.M, sh.N, sh.K, sm, &splits, 0, 16 * kFixupGroup);
      const double tol = 2 * 0x1p-24 * std::sqrt(static_cast<double>(sh.K)) + 8 * 0x1p-24;
      INFO("M=" << sh.M << " N=" << sh.N << " K=" << sh.K << " sm=" << sm << " splits=" << splits << " tol=" << tol);
      CHECK(e <= tol);
      if (sm == 132) CHECK(splits > kFixupGroup);  // the two-level path ran
    }
  // Which products have the two-level instance: phase 5's weight gradients only.
  static_assert(!TwoLevelSplit<GemmProblem<MatView<float, false>, MatView<float, true>, StoreEpi>>::value,
                "phase 4's products keep the one-level fix-up");
  static_assert(TwoLevelSplit<GemmProblem<MatView<float, false>, MatView<float, true>, VecStoreEpi>>::value,
                "a weight gradient with the vectorised fix-up may take two levels");
  static_assert(!TwoLevelSplit<GemmProblem<MatView<float, true>, MatView<float, false>, VecStoreEpi>>::value,
                "a forward product keeps one level");
}

TEST_CASE("mlp: step 5's split-K plan fills at most one wave, slices of at least four k-tiles") {
  const int sms[] = {132, 114, 46};
  const int dims[] = {10, 64, 100, 128, 300, 784, 1000, 4096};
  const int batches[] = {32, 64, 1024, 2048, 4096, 4097, 8192};
  int split = 0;
  for (int sm : sms)
    for (int b : batches)
      for (int m : dims)
        for (int n : dims) {
          GemmProblem<MatView<float, false>, MatView<float, true>, StoreEpi> p;  // a weight gradient: K = batch
          p.M = m, p.N = n, p.K = b;
          plan_tf32x3(p, sm);
          const int ktiles = (b + kXBK - 1) / kXBK;
          INFO("SMs " << sm << " M " << m << " N " << n << " K " << b << ": " << p.splits << " slices");
          CHECK(p.splits >= 1);
          CHECK(p.splits * p.kchunk >= b);                   // every k covered ...
          CHECK((p.splits - 1) * p.kchunk < b);              // ... and no empty slice
          if (p.splits > 1) {
            ++split;
            CHECK(x3_tiles(p) * p.splits <= kXBlocksPerSm * sm);
            CHECK(p.kchunk >= 4 * kXBK);
            CHECK(p.splits <= 16);
            CHECK(x3_tiles(p) < sm);
          } else {
            CHECK((x3_tiles(p) >= sm || ktiles < 8));
          }
        }
  CHECK(split > 100);  // the sweep exercises the split plans
}

TEST_CASE("mlp: 3xTF32 tensor-core GEMM (step 5) within the fp32 tolerance, awkward shapes, split-K bit-stable") {
  NB_SKIP_WITHOUT_DEVICE();
  {  // the gathered images' bytes: step 5's division-free byte / 255 is the division, bit for bit
    Dev<float> d(256), f(256);
    byte_quotients_kernel<<<1, 256>>>(d.p, f.p);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto dv = d.get(), fv = f.get();
    REQUIRE(std::memcmp(dv.data(), fv.data(), 256 * sizeof(float)) == 0);
  }
  {  // step 5's split rounds with two integer instructions: the cvt's bits, ties and subnormals included
    std::vector<float> x;
    std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
    while (x.size() < (1u << 20)) {
      uint32_t b = bits(test_rng());
      if (((b >> 23) & 0xFF) >= 0xFE) continue;  // below 2^127 in magnitude (no Inf or NaN)
      const int kind = static_cast<int>(x.size() % 4);
      if (kind == 1) b = (b & ~0x1FFFu) | 0x1000u;  // a tie
      if (kind == 2) b &= 0x807FFFFFu;              // a subnormal (or zero)
      float f;
      std::memcpy(&f, &b, 4);
      x.push_back(f);
    }
    Dev<float> dx(x);
    Dev<uint32_t> c(x.size()), o(x.size());
    tf32_rounding_kernel<<<static_cast<int>((x.size() + 255) / 256), 256>>>(dx.p, c.p, o.p, static_cast<int>(x.size()));
    CUDA_CHECK(cudaGetLastError());
    const auto cv = c.get(), ov = o.get();
    size_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) differ += cv[i] != ov[i];
    REQUIRE(differ == 0);
  }
  struct Shape { int M, N, K; };
  const Shape shapes[] = {{1, 10, 1}, {33, 100, 10}, {65, 300, 1}, {100, 10, 300}, {129, 100, 1000},
                          {257, 300, 100}, {100, 130, 8191}, {300, 784, 129}};
  int split_runs = 0;
  for (Kind kind : {Kind::Fwd, Kind::Dgrad, Kind::Wgrad})
    for (const Shape& s : shapes)
      for (int sm : {1, 132}) {
        int splits = 0;
        const double e = run_gemm<float>(kind, s.M, s.N, s.K, sm, &splits, 3);
        split_runs += splits > 1;
        INFO(kind_name(kind) << " M=" << s.M << " N=" << s.N << " K=" << s.K << " sm=" << sm << " splits=" << splits);
        CHECK(e <= tf32x3_tol(s.K));
      }
  CHECK(split_runs > 0);
  for (Kind kind : {Kind::Fwd, Kind::Wgrad}) {
    int splits = 0;
    const double e = run_gemm<float>(kind, 129, 100, 1000, 132, &splits, 1);
    INFO(kind_name(kind) << " one-term TF32: rel.err " << e << " against tol " << tf32x3_tol(1000));
    CHECK(e > tf32x3_tol(1000));
  }
}

// Step 7, FMA warp tiles in step 5's tile, within the same fp32 bound: the three layouts (B along k
// and along n take different lane columns), M, N, K off the 64 x 64 x 32 tile and off the k-groups'
// 16, K = 1, batch-long K split and unsplit; the second launch bit for bit.
TEST_CASE("mlp: fp32 FMA warp-tile GEMM (step 7) within the fp32 tolerance, awkward shapes, split-K bit-stable") {
  NB_SKIP_WITHOUT_DEVICE();
  struct Shape { int M, N, K; };
  const Shape shapes[] = {{1, 10, 1}, {33, 100, 10}, {65, 300, 1}, {100, 10, 300}, {129, 100, 1000},
                          {257, 300, 100}, {100, 130, 8191}, {300, 784, 129}, {70, 66, 17}};
  int split_runs = 0;
  for (Kind kind : {Kind::Fwd, Kind::Dgrad, Kind::Wgrad})
    for (const Shape& s : shapes)
      for (int sm : {1, 132}) {
        int splits = 0;
        const double e = run_gemm<float>(kind, s.M, s.N, s.K, sm, &splits, kStep7);
        split_runs += splits > 1;
        INFO(kind_name(kind) << " M=" << s.M << " N=" << s.N << " K=" << s.K << " sm=" << sm << " splits=" << splits);
        CHECK(e <= tf32x3_tol(s.K));
      }
  CHECK(split_runs > 0);
  // Few tiles, long K: past 16 slices, the two-level fix-up (W1's second weight gradient at 8,192;
  // groups of 16 slices, the last one short at K = 8,191 and 4,097), bit-stable.
  const Shape long_k[] = {{64, 128, 8192}, {10, 64, 8191}, {37, 100, 4097}, {100, 65, 3000}};
  for (const Shape& s : long_k) {
    int splits = 0;
    const double e = run_gemm<float>(Kind::Wgrad, s.M, s.N, s.K, 132, &splits, kStep7);
    INFO("wgrad M=" << s.M << " N=" << s.N << " K=" << s.K << " splits=" << splits);
    CHECK(splits > kFixupGroup);
    CHECK(e <= tf32x3_tol(s.K));
  }
}

// Steps 6 and 7 plan alike (plan_tc64_splits_two_level): past 16 slices only for few tiles, which
// needs K over 2,048 (slices of at least four k-tiles), in one wave; every other plan is step 5's, so
// the products phase 5's fp16 rule puts on step 6 (many tiles, or K of at most 2,048) keep the plans
// they had. Returns how many shapes went past 16 slices.
template <class P, class Plan>
int check_two_level_plans(Plan plan) {
  const int dims[] = {10, 64, 100, 128, 300, 784, 1000, 2048};
  const int ks[] = {32, 1024, 2048, 2049, 4097, 8192};  // a weight gradient's K: the batch
  int two_level = 0;
  for (int sm : {132, 114, 16})
    for (int k : ks)
      for (int m : dims)
        for (int n : dims) {
          P p, q;
          p.M = q.M = m, p.N = q.N = n, p.K = q.K = k;
          plan(p, sm);
          plan_tc64_splits(q, sm);
          INFO("SMs " << sm << " M " << m << " N " << n << " K " << k << ": " << p.splits << " slices");
          CHECK(p.splits * p.kchunk >= k);
          CHECK((p.splits - 1) * p.kchunk < k);
          CHECK(p.splits <= kFixupGroup * kFixupGroup);
          if (p.splits > 1) {
            CHECK(x3_tiles(p) * p.splits <= kXBlocksPerSm * sm);
            CHECK(p.kchunk >= 4 * kXBK);
          }
          if (p.splits > kFixupGroup) {
            ++two_level;
            CHECK(x3_tiles(p) * kFixupGroup < kXBlocksPerSm * sm);
            CHECK(k > 2048);
          } else {
            CHECK(p.splits == q.splits);
            CHECK(p.kchunk == q.kchunk);
          }
        }
  return two_level;
}
TEST_CASE("mlp: steps 6 and 7's split-K plans: past 16 slices only for few tiles and K over 2,048, one wave; else step 5's") {
  CHECK(check_two_level_plans<GemmProblem<MatView<float, false>, MatView<float, true>, StoreEpi>>(
            [](auto& p, int sm) { plan_fma64(p, sm); }) > 10);
  CHECK(check_two_level_plans<GemmProblem<MatView<__half, false>, MatView<__half, true>, StoreEpi>>(
            [](auto& p, int sm) { plan_f16mma(p, sm); }) > 10);
}

TEST_CASE("mlp: fp16 mma.sync GEMM (step 6) against float64 on its own operands, awkward shapes, split-K bit-stable") {
  NB_SKIP_WITHOUT_DEVICE();
  struct Shape { int M, N, K; };
  const Shape shapes[] = {{1, 10, 1}, {33, 100, 10}, {65, 300, 1}, {100, 10, 300}, {129, 100, 1000},
                          {257, 300, 100}, {100, 130, 8191}, {300, 784, 129}, {64, 128, 8192}};
  int split_runs = 0, two_level = 0;  // (few tiles over K = 8,191 or 8,192: past 16 slices, two levels)
  for (Kind kind : {Kind::Fwd, Kind::Dgrad, Kind::Wgrad})
    for (const Shape& s : shapes)
      for (int sm : {1, 132}) {
        int splits = 0;
        const double e = run_gemm<__half>(kind, s.M, s.N, s.K, sm, &splits, 1);
        split_runs += splits > 1;
        two_level += splits > kFixupGroup;
        INFO(kind_name(kind) << " M=" << s.M << " N=" << s.N << " K=" << s.K << " sm=" << sm << " splits=" << splits
                             << " rel.err " << e << " tol " << f16mma_tol(s.K));
        CHECK(e <= f16mma_tol(s.K));
      }
  CHECK(split_runs > 0);
  CHECK(two_level > 0);
}

// Step 9 (wgmma) on dense fp16 operands: the forward's, A [M][K] times W [N][K] (W's rows 16-byte
// aligned: K a multiple of 8). M and N off the 64 x 64 tile and its 32-column warpgroup halves; K
// off the 32-value k-tile (8, 40, 136, 1,000: a k-tile half or three quarters past K, zero-filled)
// and long (8,200 split over the SMs, two levels of accumulation); K off 8 (37, 100, 1,001) with
// padded rows. One SM's plan (one slice) and an H200's (split-K: the fix-up, the second launch bit
// for bit). Rows that are not 16-byte aligned are refused by wgmma_ok (the plan keeps step 6 there).
TEST_CASE("mlp: GEMM step 9 (wgmma) against float64 on fp16 operands, awkward shapes, split-K bit-stable") {
  NB_SKIP_WITHOUT_DEVICE();
  if (!wgmma_built(device_cc())) {
    MESSAGE("skipped: GEMM step 9 needs compute capability 9.0 and sm_90a device code; this build/device has " << device_cc());
    return;
  }
  struct Shape { int M, N, K; };
  const Shape shapes[] = {{1, 10, 8},      {33, 100, 40},   {65, 300, 1000}, {129, 130, 8200},
                          {257, 64, 784},  {300, 784, 136}, {64, 128, 8192}, {100, 33, 16}};
  int split_runs = 0;
  for (const Shape& s : shapes)
    for (int sm : {1, 132}) {
      int splits = 0;
      const double e = run_gemm<__half>(Kind::Fwd, s.M, s.N, s.K, sm, &splits, kStep9);
      split_runs += splits > 1;
      INFO("M=" << s.M << " N=" << s.N << " K=" << s.K << " sm=" << sm << " splits=" << splits << " rel.err " << e
                << " tol " << f16mma_tol(s.K));
      CHECK(e <= f16mma_tol(s.K));
    }
  CHECK(split_runs > 0);
  // K off 8 with both operands' rows padded to a multiple of 8 values (16-byte aligned rows): the last
  // k-tile's copies carry 2 ... 14 bytes of a row, zero-filled past K; the padding holds NaN, so a
  // copy that read past K would fail the check.
  for (int K : {37, 100, 1001})
    for (int sm : {1, 132}) {
      const int M = 70, N = 90, ld = (K + 7) / 8 * 8;
      std::vector<float> a = random_vec(static_cast<size_t>(M) * ld), w = random_vec(static_cast<size_t>(N) * ld);
      for (auto* v : {&a, &w})
        for (size_t i = 0; i < v->size(); ++i)
          (*v)[i] = static_cast<int>(i % ld) < K ? __half2float(__float2half_rn((*v)[i])) : std::nanf("");
      std::vector<double> ref(static_cast<size_t>(M) * N, 0.0);
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          double acc = 0;
          for (int k = 0; k < K; ++k)
            acc += static_cast<double>(a[static_cast<size_t>(m) * ld + k]) * w[static_cast<size_t>(n) * ld + k];
          ref[static_cast<size_t>(m) * N + n] = acc;
        }
      Dev<__half> da(convert<__half>(a)), dw(convert<__half>(w));
      Dev<float> dc(static_cast<size_t>(M) * N);
      dc.poison();
      GemmProblem<MatView<__half, true>, MatView<__half, false>, StoreEpi> p;
      p.M = M, p.N = N, p.K = K;
      p.a = make_view<__half, true>(da.p, ld), p.b = make_view<__half, false>(dw.p, ld);
      p.epi.c = dc.p, p.epi.ldc = N;
      REQUIRE(wgmma_ok(p, device_cc()));
      plan_f16wgmma(p, sm);
      Dev<float> ws(std::max<size_t>(ws_floats(p), 1));
      Dev<unsigned> ctr(std::max<size_t>(counter_slots(p), 1));
      ctr.zero();
      p.ws = ws.p, p.counters = ctr.p;
      launch_gemm<p4_gemm_fwd, __half>(p, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const double e = rel(dc.get(), ref);
      INFO("padded rows: M=" << M << " N=" << N << " K=" << K << " ld=" << ld << " sm=" << sm << " splits=" << p.splits
                             << " rel.err " << e);
      CHECK(e <= f16mma_tol(K));
    }
  // W's rows at an odd multiple of 2 bytes: no 16-byte copies, refused.
  GemmProblem<MatView<__half, true>, MatView<__half, false>, StoreEpi> p;
  Dev<__half> w(static_cast<size_t>(10) * 100);
  p.b = make_view<__half, false>(w.p, 100);
  CHECK_FALSE(wgmma_ok(p, device_cc()));
  p.b = make_view<__half, false>(w.p, 104);
  CHECK(wgmma_ok(p, device_cc()));
}

TEST_CASE("mlp: GEMM step 8 (a few rows, the weights streamed) against float64, awkward shapes, split-K bit-stable") {
  NB_SKIP_WITHOUT_DEVICE();
  struct Shape { int M, N, K; };
  // Rows 1 ... 32; N not a multiple of the 128-column tile nor of its 64-column halves (10, 100,
  // 200, 1,000, 3,000) and a whole one; K a multiple of 8 (16-byte rows) but not of the 128-value
  // stage or the 32-value k-step (8, 40, 1,000, 4,104), and long (8,192).
  // N <= 16 takes the narrow kernel (1, 10, 8; 32, 10, 8,192; 5, 16, 1,000; 32, 13, 4,104); 17 the tile.
  const Shape shapes[] = {{1, 10, 8},     {7, 100, 40},    {32, 200, 1000}, {17, 1000, 4104},
                          {32, 3000, 1000}, {32, 128, 8192}, {3, 2048, 2048}, {32, 1000, 8},
                          {32, 10, 8192},   {5, 16, 1000},   {32, 13, 4104},  {32, 17, 2048}};
  // Each shape also with W staged in shared memory (kStep8Staged: one block an SM, four stages; the
  // narrow shapes keep the narrow kernel), and each with a tile's 2-8 slices as one cluster handing
  // over through its shared memory (run_gemm bit-compares it with the global hand-over).
  int split_runs = 0;
  const int cluster_before = *cluster_runs();
  for (int terms : {kStep8, kStep8Staged, kStep8Cluster, kStep8StagedCluster})
    for (const Shape& s : shapes)
      for (int sm : {1, 16, 132}) {
        int splits = 0;
        const double e = run_gemm<__half>(Kind::Fwd, s.M, s.N, s.K, sm, &splits, terms);
        split_runs += splits > 1;
        INFO((step8_staged(terms) ? "staged " : "") << (step8_cluster(terms) ? "cluster " : "") << "M=" << s.M
                                                    << " N=" << s.N << " K=" << s.K << " sm=" << sm << " splits="
                                                    << splits << " rel.err " << e << " tol " << f16mma_tol(s.K));
        CHECK(e <= f16mma_tol(s.K));
      }
  CHECK(split_runs > 0);
  CHECK(*cluster_runs() > cluster_before);
}

TEST_CASE("mlp: GEMM step 8's split plan: one wave of two blocks an SM, slices of whole stages, at most 16") {
  for (int sm : {132, 114, 16, 1})
    for (int n : {10, 128, 1000, 2048, 4096, 8192})
      for (int k : {8, 256, 1000, 2048, 4096, 8192}) {
        GemmProblem<MatView<__half, true>, MatView<__half, false>, StoreEpi> p;
        p.M = 32, p.N = n, p.K = k;
        plan_stream_rows(p, sm);
        INFO("SMs " << sm << " N " << n << " K " << k << ": " << p.splits << " slices of " << p.kchunk);
        CHECK(p.rung == GemmRung::F16Stream);
        CHECK(p.kchunk % kSrChunk == 0);
        CHECK(p.splits * p.kchunk >= k);
        CHECK((p.splits - 1) * p.kchunk < k);
        CHECK(p.splits <= kFixupGroup);
        if (p.splits > 1) {
          CHECK(sr_tiles(p) * p.splits <= kSrBlocksPerSm * sm);
          CHECK(p.kchunk >= (sr_narrow(p) ? 1 : kSrMinChunks) * kSrChunk);
        }
      }
  // Staged (one block an SM): one wave of one block an SM; a narrow product keeps the narrow plan.
  for (int sm : {132, 114, 16, 1})
    for (int n : {10, 128, 1000, 8192})
      for (int k : {8, 1000, 8192}) {
        GemmProblem<MatView<__half, true>, MatView<__half, false>, StoreEpi> p;
        p.M = 32, p.N = n, p.K = k;
        plan_stream_rows(p, sm, true);
        INFO("staged: SMs " << sm << " N " << n << " K " << k << ": " << p.splits << " slices of " << p.kchunk);
        CHECK(p.rung == (sr_narrow(p) ? GemmRung::F16Stream : GemmRung::F16StreamStaged));
        CHECK(p.splits * p.kchunk >= k);
        if (p.splits > 1 && !sr_narrow(p)) CHECK(sr_tiles(p) * p.splits <= sm);
      }
  // W2's hidden forwards on an H200 (132 SMs): the slices the card names.
  const int expect[][3] = {{8192, 4, 2048}, {4096, 8, 512}, {2048, 8, 256}};
  for (const auto& e : expect) {
    GemmProblem<MatView<__half, true>, MatView<__half, false>, StoreEpi> p;
    p.M = 32, p.N = e[0], p.K = e[0];
    plan_stream_rows(p, 132);
    CHECK(p.splits == e[1]);
    CHECK(p.kchunk == e[2]);
  }
  // Softmax-CE (10 columns, narrow: slices of single stages allowed) at h = 8,192 / 4,096 / 2,048,
  // and a product one column too wide for the narrow kernel (the 128-column tile's plan).
  const int expect_narrow[][4] = {{10, 8192, 16, 512}, {10, 4096, 16, 256}, {10, 2048, 16, 128}, {17, 2048, 8, 256}};
  for (const auto& e : expect_narrow) {
    GemmProblem<MatView<__half, true>, MatView<__half, false>, StoreEpi> p;
    p.M = 32, p.N = e[0], p.K = e[1];
    plan_stream_rows(p, 132);
    CHECK(sr_narrow(p) == (e[0] <= kSrNarrowN));
    CHECK(p.splits == e[2]);
    CHECK(p.kchunk == e[3]);
  }
}

TEST_CASE("mlp: fp16 WMMA GEMM, all three layouts, awkward shapes, split-K") {
  NB_SKIP_WITHOUT_DEVICE();
  gemm_sweep<__half>(1e-2);
}

// Programmatic dependent launch (phase 5's step kernels): a chain of three products, each one's
// fp32 output rounded to T by a conversion kernel (which waits like the GEMM does) and fed to the
// next as its A operand; every launch carries the PDL attribute, so each kernel starts while the
// one before it is still running. A kernel that read its A, or wrote, before pdl_wait() would
// meet the poisoned intermediates. The chain must equal the plain launches bit for bit (and the
// float64 reference within the GEMM tolerance). K = 1000: the fp16 products take the cp.async
// loop (B prefetched before the wait) with split-K; shared workspace and counters.
template <class T>
__global__ void pdl_convert_kernel(const float* c, T* h, int n) {
  nb::pdl_wait();
  nb::pdl_launch_dependents();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) h[i] = from_f<T>(c[i]);
}

// run(pdl) launches a chain with or without PDL and returns its result: three chained runs must
// give the plain run's bits. Returns the plain run's result.
template <class Run>
std::vector<float> chained_equals_plain(Run run) {
  const std::vector<float> plain = run(false);
  for (int rep = 0; rep < 3; ++rep) {
    const std::vector<float> chained = run(true);
    INFO("repetition " << rep);
    CHECK(std::memcmp(chained.data(), plain.data(), plain.size() * sizeof(float)) == 0);
  }
  return plain;
}

template <class T>
void pdl_chain(double tol) {
  const int M = 33, D[4] = {1000, 520, 1000, 104};
  std::vector<std::vector<float>> w(3);
  std::vector<Dev<T>*> dw;
  for (int l = 0; l < 3; ++l) {
    w[l] = random_vec(static_cast<size_t>(D[l + 1]) * D[l]);
    dw.push_back(new Dev<T>(convert<T>(w[l])));
  }
  const std::vector<float> x = random_vec(static_cast<size_t>(M) * D[0]);
  Dev<T> dx(convert<T>(x)), h1(static_cast<size_t>(M) * D[1]), h2(static_cast<size_t>(M) * D[2]);
  Dev<float> c1(h1.n), c2(h2.n), c3(static_cast<size_t>(M) * D[3]);
  using P = GemmProblem<MatView<T, true>, MatView<T, false>, StoreEpi>;
  P p[3];
  const T* in[3] = {dx.p, h1.p, h2.p};
  float* out[3] = {c1.p, c2.p, c3.p};
  size_t wsn = 1;
  int max_splits = 1;
  for (int l = 0; l < 3; ++l) {
    p[l].M = M, p[l].N = D[l + 1], p[l].K = D[l];
    p[l].a = make_view<T, true>(in[l], D[l]), p[l].b = make_view<T, false>(dw[l]->p, D[l]);
    p[l].epi.c = out[l], p[l].epi.ldc = D[l + 1];
    plan_splits(p[l], 132);
    wsn = std::max(wsn, ws_floats(p[l]));
    max_splits = std::max(max_splits, p[l].splits);
  }
  CHECK(max_splits > 1);
  Dev<float> ws(wsn);
  Dev<unsigned> ctr(64);
  ctr.zero();
  for (auto& q : p) q.ws = ws.p, q.counters = ctr.p;
  cudaStream_t st{};
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  auto run = [&](bool pdl) {
    for (Dev<float>* b : {&c1, &c2, &c3}) CUDA_CHECK(cudaMemsetAsync(b->p, 0xFF, b->n * sizeof(float), st));
    for (Dev<T>* b : {&h1, &h2}) CUDA_CHECK(cudaMemsetAsync(b->p, 0xFF, b->n * sizeof(T), st));
    for (int l = 0; l < 3; ++l) {
      launch_gemm<p4_gemm_fwd, T>(p[l], st, pdl);
      if (l < 2) {
        const int n = M * D[l + 1];
        launch_kernel(pdl_convert_kernel<T>, (n + 255) / 256, 256, 0, st, pdl, static_cast<const float*>(out[l]),
                      l == 0 ? h1.p : h2.p, n);
      }
    }
    CUDA_CHECK(cudaStreamSynchronize(st));
    return c3.get();
  };
  const std::vector<float> plain = chained_equals_plain(run);
  CUDA_CHECK(cudaStreamDestroy(st));
  // float64 reference of the same chain, intermediates rounded to T as the conversion kernel does.
  auto round_t = [](double v) { return static_cast<double>(static_cast<float>(to_t<T>(static_cast<float>(v)))); };
  std::vector<double> a(x.begin(), x.end());
  for (auto& v : a) v = round_t(v);
  for (int l = 0; l < 3; ++l) {
    std::vector<double> z(static_cast<size_t>(M) * D[l + 1], 0.0);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < D[l + 1]; ++n) {
        double s = 0;
        for (int k = 0; k < D[l]; ++k)
          s += a[static_cast<size_t>(m) * D[l] + k] * round_t(w[l][static_cast<size_t>(n) * D[l] + k]);
        z[static_cast<size_t>(m) * D[l + 1] + n] = s;
      }
    if (l < 2)
      for (auto& v : z) v = round_t(v);
    a = z;
  }
  CHECK(rel(plain, a) <= tol);
  for (auto* d : dw) delete d;
}

// Writes w = src late: lets the kernel after it start at once, spins ~20 us, then writes (the
// previous step's last update before phase 5's first forward product, made slow).
template <class T>
__global__ void late_writer_kernel(const T* __restrict__ src, T* __restrict__ w, int n, long long spin) {
  nb::pdl_wait();
  nb::pdl_launch_dependents();
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) w[i] = src[i];
}

// A product whose B the kernel just before writes (GemmProblem::b_fresh), on each loop that may
// fetch B before the PDL wait: under PDL it must read the new B, as plain launches do.
template <class T>
void pdl_fresh_b(int rung) {  // rung 0: the tile (fp16: the cp.async loop), 1: step 5 / step 6
  const int M = 200, N = 300, K = 1000;
  const std::vector<float> x = random_vec(static_cast<size_t>(M) * K), w_old = random_vec(static_cast<size_t>(N) * K),
                           w_new = random_vec(static_cast<size_t>(N) * K);
  Dev<T> dx(convert<T>(x)), dw(static_cast<size_t>(N) * K), dsrc(convert<T>(w_new));
  const std::vector<T> old_t = convert<T>(w_old);
  Dev<float> dc(static_cast<size_t>(M) * N);
  GemmProblem<MatView<T, true>, MatView<T, false>, StoreEpi> p;
  p.M = M, p.N = N, p.K = K;
  p.a = make_view<T, true>(dx.p, K), p.b = make_view<T, false>(dw.p, K);
  p.epi.c = dc.p, p.epi.ldc = N;
  p.b_fresh = true;
  plan_splits(p, 132, 4, 4);  // at most 4 slices: 8 k-tiles each, enough for fp16's cp.async loop
  if (rung == 1) {
    if constexpr (std::is_same<T, float>::value) plan_tf32x3(p, 132);
    else plan_f16mma(p, 132);
  } else if constexpr (std::is_same<T, __half>::value) {
    REQUIRE(uses_async(p));  // the loop that fetches B before the wait
  }
  Dev<float> ws(std::max<size_t>(ws_floats(p), 1));
  Dev<unsigned> ctr(std::max<size_t>(counter_slots(p), 1));
  ctr.zero();
  p.ws = ws.p, p.counters = ctr.p;
  cudaStream_t st{};
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  auto run = [&](bool pdl) {
    CUDA_CHECK(cudaMemcpyAsync(dw.p, old_t.data(), old_t.size() * sizeof(T), cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaMemsetAsync(dc.p, 0xFF, dc.n * sizeof(float), st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    const int n = N * K;
    launch_kernel(late_writer_kernel<T>, 8, 256, 0, st, pdl, static_cast<const T*>(dsrc.p), dw.p, n, 40000LL);
    launch_gemm<p4_gemm_fwd, T>(p, st, pdl);
    CUDA_CHECK(cudaStreamSynchronize(st));
    return dc.get();
  };
  chained_equals_plain(run);
  CUDA_CHECK(cudaStreamDestroy(st));
}

TEST_CASE("mlp: under PDL a product fetches a B written by the kernel just before after the wait (b_fresh)") {
  NB_SKIP_WITHOUT_DEVICE();
  SUBCASE("fp32 step 5") { pdl_fresh_b<float>(1); }
  SUBCASE("fp16 cp.async tile") { pdl_fresh_b<__half>(0); }
  SUBCASE("fp16 step 6") { pdl_fresh_b<__half>(1); }
}

TEST_CASE("mlp: GEMMs chained by programmatic dependent launch equal the plain launches bit for bit") {
  NB_SKIP_WITHOUT_DEVICE();
  SUBCASE("fp32") { pdl_chain<float>(1e-5); }
  SUBCASE("fp16") { pdl_chain<__half>(1e-2); }
}

TEST_CASE("mlp: host Philox4x32-10 equals cuRAND's, so reference masks equal device masks") {
  NB_SKIP_WITHOUT_DEVICE();
  const int n = 4099;
  const uint64_t key = dropout_key(test_rng()());
  const uint64_t step = (uint64_t{7} << 32) + 12345;
  Dev<float> dummy(static_cast<size_t>(n));
  Dev<uint8_t> keep(static_cast<size_t>(n));
  dummy.poison();
  // dropout_kernel with threshold 2^31 keeps exactly the elements whose bits are >= 2^31.
  std::vector<float> ones(n, 1.f);
  Dev<float> h(ones);
  const uint32_t thr = 0x80000000u;
  dropout_kernel<float><<<ew_blocks(n), 256>>>(h.p, keep.p, n, key, 3, step, thr, 2.f);
  CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto k = keep.get();
  const auto hv = h.get();
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    const bool host_keep = dropout_bits_host(key, 3, step, static_cast<uint32_t>(i)) >= thr;
    REQUIRE(static_cast<bool>(k[i]) == host_keep);
    REQUIRE(hv[i] == (host_keep ? 2.f : 0.f));
    kept += host_keep;
  }
  CHECK(kept > n * 45 / 100);
  CHECK(kept < n * 55 / 100);
}

TEST_CASE("mlp: bias + activation, softmax-CE, mean, ReLU/dropout backward, bias gradient") {
  NB_SKIP_WITHOUT_DEVICE();
  for (int rows : {1, 33})
    for (int cols : {10, 100, 300}) {
      INFO("rows=" << rows << " cols=" << cols);
      const size_t n = static_cast<size_t>(rows) * cols;
      const auto z = random_vec(n), b = random_vec(cols);
      Dev<float> dz(z), dbias(b), out(n);
      for (bool relu : {true, false}) {
        out.poison();
        bias_act_kernel<float><<<ew_blocks(n), 256>>>(dz.p, dbias.p, out.p, rows, cols, relu);
        CHECK_LAUNCH();
        std::vector<double> ref(n);
        for (size_t i = 0; i < n; ++i) {
          const double v = static_cast<double>(z[i]) + b[i % cols];
          ref[i] = relu ? std::max(v, 0.0) : v;
        }
        CHECK(rel(out.get(), ref) <= 1e-5);
      }
      // Softmax cross-entropy on logits z with random labels.
      std::vector<int> y(rows);
      for (auto& v : y) v = static_cast<int>(test_rng()() % cols);
      Dev<int> dy(y);
      Dev<float> row_loss(static_cast<size_t>(rows)), grad(n), mean(2);
      row_loss.poison(), grad.poison(), mean.poison();
      softmax_ce_kernel<float><<<(rows + 127) / 128, 128>>>(dz.p, dy.p, rows, cols, row_loss.p, grad.p);
      CHECK_LAUNCH();
      CUDA_CHECK(cudaMemset(mean.p + 1, 0, sizeof(float)));
      mean_kernel<<<1, 256>>>(row_loss.p, rows, mean.p, reinterpret_cast<int*>(mean.p + 1));
      CHECK_LAUNCH();
      std::vector<double> rl(rows), rg(n);
      double rmean = 0;
      for (int r = 0; r < rows; ++r) {
        double mx = -1e300, se = 0;
        for (int j = 0; j < cols; ++j) mx = std::max(mx, static_cast<double>(z[r * cols + j]));
        for (int j = 0; j < cols; ++j) se += std::exp(z[r * cols + j] - mx);
        const double lse = mx + std::log(se);
        rl[r] = lse - z[r * cols + y[r]];
        rmean += rl[r] / rows;
        for (int j = 0; j < cols; ++j) rg[r * cols + j] = (std::exp(z[r * cols + j] - lse) - (j == y[r])) / rows;
      }
      CHECK(rel(row_loss.get(), rl) <= 1e-5);
      CHECK(rel(grad.get(), rg) <= 1e-5);
      const auto mv = mean.get();
      CHECK(std::fabs(mv[0] - rmean) <= 1e-5 * std::fabs(rmean));
      int flag = 0;
      std::memcpy(&flag, &mv[1], sizeof flag);
      CHECK(flag == 0);
      // ReLU/dropout backward: h has zeros (ReLU) and the keep mask drops some more.
      const auto dh = random_vec(n), hpre = random_vec(n);
      std::vector<float> h(n);
      std::vector<uint8_t> keep(n);
      for (size_t i = 0; i < n; ++i) keep[i] = (test_rng()() % 5) != 0, h[i] = keep[i] ? std::max(hpre[i], 0.f) * 1.25f : 0.f;
      Dev<float> ddh(dh), dh2(h), dzo(n);
      Dev<uint8_t> dkeep(keep);
      dzo.poison();
      relu_dropout_bwd_kernel<float><<<ew_blocks(n), 256>>>(ddh.p, dh2.p, dkeep.p, 1.25f, dzo.p, static_cast<int>(n));
      CHECK_LAUNCH();
      std::vector<double> rz(n);
      for (size_t i = 0; i < n; ++i) rz[i] = (keep[i] && h[i] > 0) ? dh[i] * 1.25 : 0.0;
      CHECK(rel(dzo.get(), rz) <= 1e-5);
      // Bias gradient: column sums.
      Dev<float> gb(static_cast<size_t>(cols));
      gb.poison();
      bias_grad_kernel<float><<<(cols + 127) / 128, 128>>>(dz.p, rows, cols, gb.p);
      CHECK_LAUNCH();
      std::vector<double> rb(cols, 0.0);
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < cols; ++j) rb[j] += z[r * cols + j];
      CHECK(rel(gb.get(), rb) <= 1e-5);
    }
}

TEST_CASE("mlp: mean kernel raises the flag on a non-finite loss") {
  NB_SKIP_WITHOUT_DEVICE();
  std::vector<float> x = random_vec(33);
  x[17] = NAN;
  Dev<float> dx(x), out(2);
  CUDA_CHECK(cudaMemset(out.p, 0, 2 * sizeof(float)));
  mean_kernel<<<1, 256>>>(dx.p, 33, out.p, reinterpret_cast<int*>(out.p + 1));
  CHECK_LAUNCH();
  const auto o = out.get();
  int flag = 0;
  std::memcpy(&flag, &o[1], sizeof flag);
  CHECK(flag == 1);
  CHECK(std::isnan(o[0]));
}

TEST_CASE("mlp: Adam and SGD kernels against the float64 optimizer, fp16 copy") {
  NB_SKIP_WITHOUT_DEVICE();
  for (size_t n : {size_t{10}, size_t{300}, size_t{33 * 100}}) {
    INFO("n=" << n);
    // Small |p| (~ the step): the change p' - p is then not swamped by the rounding of p' itself.
    const auto p = random_vec(n, -1e-3f, 1e-3f), g = random_vec(n, -1e-2f, 1e-2f);
    auto m = random_vec(n, -1e-3f, 1e-3f), v = random_vec(n, 0.f, 1e-4f);
    const int64_t t = 1 + static_cast<int64_t>(test_rng()() % 50);
    Dev<float> dp(p), dg(g), dm(m), dv(v);
    Dev<__half> p16(n);
    p16.poison();
    adam_kernel<<<ew_blocks(n), 256>>>(dp.p, dg.p, dm.p, dv.p, p16.p, n, adam_hyper(1e-3, t));
    CHECK_LAUNCH();
    // Reference: PyTorch's formula in double.
    std::vector<double> rp(n), rm(n), rv(n);
    const double bc1 = 1 - std::pow(0.9, static_cast<double>(t)), bc2 = 1 - std::pow(0.999, static_cast<double>(t));
    for (size_t i = 0; i < n; ++i) {
      rm[i] = 0.9 * m[i] + 0.1 * g[i];
      rv[i] = 0.999 * v[i] + 0.001 * static_cast<double>(g[i]) * g[i];
      rp[i] = p[i] - 1e-3 / bc1 * rm[i] / (std::sqrt(rv[i]) / std::sqrt(bc2) + 1e-8);
    }
    const auto gp = dp.get();
    CHECK(rel(gp, rp) <= 1e-5);
    CHECK(rel(dm.get(), rm) <= 1e-5);
    CHECK(rel(dv.get(), rv) <= 1e-5);
    // The update itself (p' - p).
    std::vector<float> du(n);
    std::vector<double> ru(n);
    for (size_t i = 0; i < n; ++i) du[i] = gp[i] - p[i], ru[i] = rp[i] - p[i];
    CHECK(rel(du, ru) <= 1e-5);
    const auto h = as_float(p16.get());
    std::vector<double> gpd(gp.begin(), gp.end());
    CHECK(rel(h, gpd) <= 1e-3);  // fp16 rounding: 2^-11 relative

    Dev<float> sp(p);
    sgd_kernel<<<ew_blocks(n), 256>>>(sp.p, dg.p, nullptr, n, 0.003f);
    CHECK_LAUNCH();
    std::vector<double> rs(n);
    for (size_t i = 0; i < n; ++i) rs[i] = p[i] - 0.003 * g[i];
    CHECK(rel(sp.get(), rs) <= 1e-5);
  }
}

TEST_CASE("mlp: the Feistel batch order is a permutation, different per epoch and seed") {
  // Host-only (phase 5 evaluates the same function on the device: see test_mlp_fused.cu).
  for (uint32_t n : {1u, 2u, 33u, 1000u, 60000u}) {
    for (uint64_t e = 0; e < 2; ++e) {
      const Perm p = make_perm(42, e, n);
      std::vector<char> seen(n, 0);
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t j = perm_apply(p, i);
        REQUIRE(j < n);
        REQUIRE(!seen[j]);
        seen[j] = 1;
      }
    }
  }
  const Perm a = make_perm(42, 0, 60000), b = make_perm(42, 1, 60000), c = make_perm(43, 0, 60000);
  int same_ab = 0, same_ac = 0;
  for (uint32_t i = 0; i < 1000; ++i) same_ab += perm_apply(a, i) == perm_apply(b, i), same_ac += perm_apply(a, i) == perm_apply(c, i);
  CHECK(same_ab < 10);
  CHECK(same_ac < 10);
}

}  // namespace nbtest
