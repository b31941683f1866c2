// tests/gpu/test_linreg_data.cu — the regression data set generated on the device.
//
// Every value is recomputed on the host, bit for bit: x from the original index, y from x and
// the very normals cuRAND draws (regenerated here with the same generator and seed). Then the
// layout (train first, test second, each ascending), determinism per seed, the difference
// between seeds, and the noise statistics at an awkward size.
#define NB_WANT_CURAND
#include <curand.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "check.cuh"
#include "gpu_test.cuh"
#include "linreg_data.cuh"

namespace nbtest {

namespace {

struct Data {
  std::vector<float> x, y;
};

Data generate(size_t n, uint64_t seed) {
  float *dx = nullptr, *dy = nullptr;
  CUDA_CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&dy, n * sizeof(float)));
  nb::generate_linreg(dx, dy, n, seed);
  Data d{std::vector<float>(n), std::vector<float>(n)};
  CUDA_CHECK(cudaMemcpy(d.x.data(), dx, n * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(d.y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(dx));
  CUDA_CHECK(cudaFree(dy));
  return d;
}

// The normals generate_linreg draws: same generator, seed and (even) count.
std::vector<float> normals(size_t n, uint64_t seed) {
  const size_t m = n + (n & 1);
  float* dz = nullptr;
  CUDA_CHECK(cudaMalloc(&dz, m * sizeof(float)));
  curandGenerator_t g = nullptr;
  CURAND_CHECK(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(g, seed));
  CURAND_CHECK(curandGenerateNormal(g, dz, m, 0.0f, 1.0f));
  CURAND_CHECK(curandDestroyGenerator(g));
  std::vector<float> z(m);
  CUDA_CHECK(cudaMemcpy(z.data(), dz, m * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(dz));
  return z;
}

float host_x(size_t p, size_t n) { return static_cast<float>(10.0 * static_cast<double>(p) / static_cast<double>(n)); }

float host_y(float x, float z) {
  const double a = nb::kLinregTrueW * static_cast<double>(x);
  const double b = a + nb::kLinregTrueB;
  const double c = nb::kLinregNoiseStd * static_cast<double>(z);
  return static_cast<float>(b + c);
}

}  // namespace

TEST_CASE("generate_linreg: every x and y recomputed on the host, bit for bit, in the storage layout") {
  NB_SKIP_WITHOUT_DEVICE();
  for (size_t n : {size_t(1), size_t(2), size_t(7), size_t(999983)}) {
    CAPTURE(n);
    const uint64_t seed = 42;
    const Data d = generate(n, seed);
    const std::vector<float> z = normals(n, seed);
    size_t x_mismatch = 0, y_mismatch = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t p = nb::linreg_original_index(i, n);
      REQUIRE(p < n);
      const float xe = host_x(p, n);
      if (std::memcmp(&xe, &d.x[i], sizeof(float)) != 0) ++x_mismatch;
      const float ye = host_y(xe, z[p]);
      if (std::memcmp(&ye, &d.y[i], sizeof(float)) != 0) ++y_mismatch;
    }
    CHECK(x_mismatch == 0);
    CHECK(y_mismatch == 0);
    CHECK(d.x[0] == 0.0f);
  }
}

TEST_CASE("linreg storage layout: train points (p % 5 != 4) first, then test points, each ascending") {
  NB_SKIP_WITHOUT_DEVICE();
  const size_t n = 999983;
  const Data d = generate(n, 3);
  const size_t nt = nb::linreg_train_count(n);
  CHECK(nt + nb::linreg_test_count(n) == n);
  std::vector<char> seen(n, 0);
  size_t bad_split = 0, not_ascending = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t p = nb::linreg_original_index(i, n);
    seen[p] = 1;
    if ((i < nt) != (p % 5 != 4)) ++bad_split;
    if (i > 0 && i != nt && !(d.x[i] >= d.x[i - 1])) ++not_ascending;
  }
  CHECK(bad_split == 0);
  CHECK(not_ascending == 0);
  size_t covered = 0;
  for (char s : seen) covered += s;
  CHECK(covered == n);  // a permutation of 0..n-1
  CHECK(d.x[nt] == host_x(4, n));  // the first test point is p = 4
}

TEST_CASE("generate_linreg is deterministic per seed, different across seeds, with N(0, 0.5) noise") {
  NB_SKIP_WITHOUT_DEVICE();
  const size_t n = 999983;
  const Data a = generate(n, 42), b = generate(n, 42), c = generate(n, 43);
  CHECK(std::memcmp(a.x.data(), b.x.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(a.y.data(), b.y.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(a.x.data(), c.x.data(), n * sizeof(float)) == 0);  // x does not depend on the seed
  size_t same = 0;
  for (size_t i = 0; i < n; ++i) same += (a.y[i] == c.y[i]);
  CHECK(same < n / 100);

  double sum = 0, sum2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double r = double(a.y[i]) - nb::kLinregTrueW * double(a.x[i]) - nb::kLinregTrueB;
    sum += r;
    sum2 += r * r;
  }
  const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  MESSAGE("residual mean " << mean << ", std " << sd << " at n = " << n);
  // standard errors: 0.5/sqrt(n) = 5e-4 for the mean, 0.5/sqrt(2n) = 3.5e-4 for the std
  CHECK(std::abs(mean) < 0.0025);
  CHECK(std::abs(sd - nb::kLinregNoiseStd) < 0.002);
}

}  // namespace nbtest
