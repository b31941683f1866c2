// tests/gpu/test_lt_bias_grad.cu — phase 5's cuBLASLt-path bias gradients (lt_bias_grad.cuh) against
// float64 column sums: batches of one row to past 8,192 (one slice, a partial last slice, many
// slices), widths off the 32-column blocks, fp32 and fp16 dZ, poisoned outputs, the same bits twice.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../../phase5_batched/lt_bias_grad.cuh"
#include "check.cuh"
#include "gpu_test.cuh"

using nbtest::Dev;

namespace {

double value(float x) { return x; }
double value(__half x) { return static_cast<double>(__half2float(x)); }
template <class T>
T make(float x);
template <>
float make<float>(float x) { return x; }
template <>
__half make<__half>(float x) { return __float2half_rn(x); }

template <class T>
void check_bias_grad(int rows, int cols) {
  INFO("rows=" << rows << " cols=" << cols << " fp16=" << std::is_same<T, __half>::value);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<T> dz(static_cast<size_t>(rows) * cols);
  std::vector<double> ref(cols, 0.0), mag(cols, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const T v = make<T>(u(nbtest::test_rng()));
      dz[static_cast<size_t>(r) * cols + c] = v;
      const double x = value(v);
      ref[c] += x, mag[c] += std::fabs(x);
    }
  Dev<T> ddz(dz);
  Dev<float> db(static_cast<size_t>(cols)), ws(std::max<size_t>(1, nb::mlp::lt_bias_grad_ws_floats(rows, cols)));
  db.poison(), ws.poison();
  nb::mlp::launch_lt_bias_grad<T>(ddz.p, rows, cols, db.p, ws.p, nullptr);
  const std::vector<float> got = db.get();
  // The longest chain of fp32 additions behind a sum: a warp's share of a slice (32 rows), the 8
  // warps' sums, the slices' sums; each addition errs by at most u = 2^-24 of what it has summed.
  const int chain = nb::mlp::kLtBgRows / 8 + 8 + nb::mlp::lt_bias_grad_slices(rows);
  int bad = 0;
  for (int c = 0; c < cols; ++c) {
    const double tol = chain * 0x1p-24 * mag[c] + 1e-30;
    if (!(std::fabs(got[c] - ref[c]) <= tol)) {
      if (++bad <= 3) MESSAGE("column " << c << ": " << got[c] << " against " << ref[c] << " (tolerance " << tol << ")");
    }
  }
  CHECK(bad == 0);
  // The tolerance sees a row left out (the slices' bounds off by one): in most columns that row's
  // value alone is past it.
  if (rows > 1) {
    int seen = 0;
    for (int c = 0; c < cols; ++c)
      seen += std::fabs(value(dz[static_cast<size_t>(rows - 1) * cols + c])) > chain * 0x1p-24 * mag[c];
    CHECK(2 * seen >= cols);
  }
  // Bit-reproducible: a second call gives the same bits.
  db.poison();
  nb::mlp::launch_lt_bias_grad<T>(ddz.p, rows, cols, db.p, ws.p, nullptr);
  const std::vector<float> again = db.get();
  CHECK(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("phase 5 cuBLASLt path: bias gradients against float64, every slicing") {
  NB_SKIP_WITHOUT_DEVICE();
  const int shapes[][2] = {{1, 10}, {7, 33}, {255, 64}, {256, 1}, {257, 100}, {4097, 130}, {8192, 128}, {8193, 10}};
  for (const auto& s : shapes) {
    check_bias_grad<float>(s[0], s[1]);
    check_bias_grad<__half>(s[0], s[1]);
  }
}
