// common/linreg_data.h — the linear-regression data set shared by phases 1–3 and the PyTorch twin.
//
// n points with original index p = 0..n-1: x_p = float(10.0 * p / n) (evenly spaced on [0, 10)),
// y_p = float(0.7 * x_p + 0.3 + kNoiseStd * z_p), z_p ~ N(0,1) from cuRAND's Philox4x32-10
// generator seeded with --seed (z drawn for all p in order, see linreg_data.cu).
// Split: every fifth point (p % 5 == 4) is a test point, so both splits cover [0, 10).
// Storage: the device buffers hold the train points first (p with p % 5 != 4, ascending), then
// the test points (ascending), so every kernel reads contiguous ranges.
// The twin gets the very same floats through save_linreg_npy() (numpy .npy, float32, shape
// (n, 2): column 0 = x, column 1 = y, in storage order); the split sizes follow from n by the
// formulas below, so the file needs nothing else.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nb {

constexpr double kLinregTrueW = 0.7, kLinregTrueB = 0.3, kLinregNoiseStd = 0.5;
constexpr double kLinregInitW = 0.83, kLinregInitB = 0.7645;

inline size_t linreg_test_count(size_t n) { return n / 5; }   // #{p < n : p % 5 == 4} = floor(n / 5)
inline size_t linreg_train_count(size_t n) { return n - linreg_test_count(n); }
// Original index of storage slot i.
inline size_t linreg_original_index(size_t i, size_t n) {
  size_t nt = linreg_train_count(n);
  return i < nt ? (i / 4) * 5 + i % 4 : (i - nt) * 5 + 4;
}

// Writes x,y (host arrays of n floats, storage order) as a float32 .npy of shape (n, 2), atomically.
void save_linreg_npy(const std::string& path, const float* x, const float* y, size_t n);

}  // namespace nb
