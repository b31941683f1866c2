// tests/host/test_linreg_data.cpp — the regression data set's storage layout (linreg_data.h) and
// its hand-over to the PyTorch twin (save_linreg_npy).
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "errors.h"
#include "linreg_data.h"
#include "npy.h"
#include "test_util.h"

TEST_CASE("linreg layout: train/test counts match a brute-force count of p % 5 == 4") {
  for (size_t n : {size_t(1), size_t(2), size_t(3), size_t(4), size_t(5), size_t(6), size_t(7), size_t(8), size_t(9),
                   size_t(10), size_t(14), size_t(999), size_t(1001), size_t(999983), size_t(5000000)}) {
    size_t test = 0;
    for (size_t p = 0; p < n; ++p) test += (p % 5 == 4);
    CHECK_MESSAGE(nb::linreg_test_count(n) == test, "n=", n);
    CHECK_MESSAGE(nb::linreg_train_count(n) == n - test, "n=", n);
  }
  CHECK(nb::linreg_test_count(1) == 0);
  CHECK(nb::linreg_test_count(4) == 0);
  CHECK(nb::linreg_test_count(5) == 1);
  CHECK(nb::linreg_test_count(7) == 1);
  CHECK(nb::linreg_test_count(999983) == 199996);
  CHECK(nb::linreg_train_count(999983) == 799987);
}

TEST_CASE("linreg layout: original_index is a bijection onto [0, n), train ascending then test ascending") {
  for (size_t n : {size_t(1), size_t(4), size_t(5), size_t(7), size_t(9), size_t(1001), size_t(999983)}) {
    const size_t nt = nb::linreg_train_count(n);
    std::vector<char> seen(n, 0);
    size_t bad_range = 0, dup = 0, bad_split = 0, not_ascending = 0;
    for (size_t i = 0; i < n; ++i) {
      size_t p = nb::linreg_original_index(i, n);
      if (p >= n) {
        ++bad_range;
        continue;
      }
      dup += seen[p]++ ? 1 : 0;
      bad_split += ((i < nt) != (p % 5 != 4)) ? 1 : 0;
      if (i > 0 && i != nt && nb::linreg_original_index(i - 1, n) >= p) ++not_ascending;
    }
    INFO("n=", n);
    CHECK(bad_range == 0);
    CHECK(dup == 0);
    CHECK(bad_split == 0);
    CHECK(not_ascending == 0);
  }
}

TEST_CASE("save_linreg_npy: float32 (n, 2), x then y per row, storage order, exact bits") {
  nbtest::TempDir tmp;
  const size_t n = 1001;
  std::vector<float> x(n), y(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(10.0 * double(nb::linreg_original_index(i, n)) / double(n));
    y[i] = 0.7f * x[i] + 0.3f + 1e-3f * float(i % 7);
  }
  nb::save_linreg_npy(tmp / "linreg.npy", x.data(), y.data(), n);
  nb::NpyArray<float> a = nb::load_npy_f32(tmp / "linreg.npy");
  CHECK(a.shape == std::vector<size_t>{n, 2});
  REQUIRE(a.data.size() == 2 * n);
  size_t mismatches = 0;
  for (size_t i = 0; i < n; ++i)
    mismatches += (std::memcmp(&a.data[2 * i], &x[i], 4) != 0) + (std::memcmp(&a.data[2 * i + 1], &y[i], 4) != 0);
  CHECK(mismatches == 0);
  CHECK_THROWS_AS(nb::save_linreg_npy(tmp / "empty.npy", x.data(), y.data(), 0), nb::Error);
}
