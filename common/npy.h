// common/npy.h — write (and read back) NumPy .npy files (format 1.0, little-endian, C order), the
// hand-over format to the PyTorch twins: data points, initial weights, batch orders.
// Writes are atomic (temporary file + rename); failures throw nb::Error(kExitOutput, "<path>: ...").
// Reads check magic, dtype, order and length and throw nb::Error(kExitData, "<path>: ...").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nb {

void save_npy(const std::string& path, const float* data, const std::vector<size_t>& shape);     // '<f4'
void save_npy(const std::string& path, const int32_t* data, const std::vector<size_t>& shape);   // '<i4'

template <typename T>
struct NpyArray {
  std::vector<size_t> shape;
  std::vector<T> data;
};
NpyArray<float> load_npy_f32(const std::string& path);
NpyArray<int32_t> load_npy_i32(const std::string& path);

// The exact header bytes save_npy writes for a dtype ('<f4', '<i4') and shape: magic, version 1.0,
// length, dict, padding to a multiple of 64 and '\n' (the same bytes numpy 2.x's np.save writes).
std::string npy_header(const std::string& descr, const std::vector<size_t>& shape);

}  // namespace nb
