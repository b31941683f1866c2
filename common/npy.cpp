// common/npy.cpp — see npy.h. NumPy's .npy format 1.0:
//   "\x93NUMPY" 0x01 0x00, uint16 little-endian header length, then an ASCII Python dict
//   "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }" padded with spaces and ended by
//   '\n' so that the data starts at a multiple of 64 bytes, then the raw little-endian C-order data.
// The header is written byte for byte as numpy 2.x's np.save writes it (including the spare
// spaces numpy reserves so the first dimension can grow), so `cmp` against numpy's file passes.
#include "npy.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "errors.h"
#include "record.h"  // write_file_atomic

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "npy.cpp writes host floats as little-endian");

namespace nb {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kAlign = 64;
constexpr size_t kGrowthDigits = 21;  // numpy's GROWTH_AXIS_MAX_DIGITS

std::string shape_repr(const std::vector<size_t>& shape) {
  if (shape.empty()) return "()";
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

size_t element_count(const std::vector<size_t>& shape, const std::string& path, int code) {
  size_t n = 1;
  for (size_t d : shape) {
    if (d != 0 && n > std::numeric_limits<size_t>::max() / d) throw Error(code, path + ": shape too large");
    n *= d;
  }
  return n;
}

}  // namespace

std::string npy_header(const std::string& descr, const std::vector<size_t>& shape) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_repr(shape) + ", }";
  if (!shape.empty()) dict += std::string(kGrowthDigits - std::to_string(shape[0]).size(), ' ');
  size_t pad = kAlign - ((10 + dict.size() + 1) % kAlign);
  // numpy pads a full extra 64 bytes when the header already ends on a boundary; so do we.
  dict += std::string(pad, ' ') + "\n";
  std::string h(kMagic, 6);
  h += '\x01';
  h += '\x00';
  h += static_cast<char>(dict.size() & 0xff);
  h += static_cast<char>((dict.size() >> 8) & 0xff);
  return h + dict;
}

namespace {

template <typename T>
void save_impl(const std::string& path, const T* data, const std::vector<size_t>& shape, const char* descr) {
  size_t n = element_count(shape, path, kExitOutput);
  if (n > 0 && data == nullptr) throw Error(kExitOutput, path + ": no data to write");
  std::string out = npy_header(descr, shape);
  if (out.size() - 10 > 0xffff) throw Error(kExitOutput, path + ": .npy header too long for format 1.0");
  size_t bytes = n * sizeof(T);
  size_t off = out.size();
  out.resize(off + bytes);
  if (bytes) std::memcpy(&out[off], data, bytes);
  write_file_atomic(path, out);
}

[[noreturn]] void data_error(const std::string& path, const std::string& what) {
  throw Error(kExitData, path + ": " + what);
}

// Parses the header dict; returns the data offset and fills descr/fortran/shape.
size_t parse_header(const std::string& path, const std::string& file, std::string* descr, bool* fortran,
                    std::vector<size_t>* shape) {
  if (file.size() < 10 || file.compare(0, 6, kMagic, 6) != 0) data_error(path, "not a .npy file (bad magic)");
  unsigned major = static_cast<unsigned char>(file[6]);
  size_t hlen, start;
  if (major == 1) {
    hlen = static_cast<unsigned char>(file[8]) | (static_cast<size_t>(static_cast<unsigned char>(file[9])) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) data_error(path, "truncated .npy header");
    hlen = 0;
    for (int i = 3; i >= 0; --i) hlen = (hlen << 8) | static_cast<unsigned char>(file[8 + i]);
    start = 12;
  } else {
    data_error(path, "unsupported .npy version " + std::to_string(major));
  }
  if (file.size() - start < hlen) data_error(path, "truncated .npy header");
  const std::string h = file.substr(start, hlen);

  auto value_after = [&](const char* key) -> size_t {
    size_t k = h.find(std::string("'") + key + "'");
    if (k == std::string::npos) k = h.find(std::string("\"") + key + "\"");
    if (k == std::string::npos) data_error(path, std::string(".npy header has no '") + key + "'");
    size_t colon = h.find(':', k);
    if (colon == std::string::npos) data_error(path, "malformed .npy header");
    size_t v = colon + 1;
    while (v < h.size() && h[v] == ' ') ++v;
    return v;
  };
  size_t v = value_after("descr");
  if (v >= h.size() || (h[v] != '\'' && h[v] != '"')) data_error(path, "malformed 'descr' in .npy header");
  size_t e = h.find(h[v], v + 1);
  if (e == std::string::npos) data_error(path, "malformed 'descr' in .npy header");
  *descr = h.substr(v + 1, e - v - 1);
  v = value_after("fortran_order");
  if (h.compare(v, 4, "True") == 0) *fortran = true;
  else if (h.compare(v, 5, "False") == 0) *fortran = false;
  else data_error(path, "malformed 'fortran_order' in .npy header");
  v = value_after("shape");
  if (v >= h.size() || h[v] != '(') data_error(path, "malformed 'shape' in .npy header");
  size_t close = h.find(')', v);
  if (close == std::string::npos) data_error(path, "malformed 'shape' in .npy header");
  shape->clear();
  size_t i = v + 1;
  while (i < close) {
    while (i < close && (h[i] == ' ' || h[i] == ',')) ++i;
    if (i >= close) break;
    if (!std::isdigit(static_cast<unsigned char>(h[i]))) data_error(path, "malformed 'shape' in .npy header");
    size_t d = 0;
    while (i < close && std::isdigit(static_cast<unsigned char>(h[i]))) {
      size_t digit = static_cast<size_t>(h[i] - '0');
      if (d > (std::numeric_limits<size_t>::max() - digit) / 10) data_error(path, "shape dimension too large");
      d = d * 10 + digit;
      ++i;
    }
    shape->push_back(d);
  }
  return start + hlen;
}

template <typename T>
NpyArray<T> load_impl(const std::string& path, const char* want_descr) {
  std::ifstream in(path, std::ios::binary);
  if (!in) data_error(path, std::string("cannot open: ") + std::strerror(errno));
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) data_error(path, "read error");
  std::string descr;
  bool fortran = false;
  NpyArray<T> a;
  size_t off = parse_header(path, file, &descr, &fortran, &a.shape);
  if (descr != want_descr) data_error(path, "dtype '" + descr + "', expected '" + want_descr + "'");
  if (fortran) data_error(path, "fortran_order True is not supported (expected C order)");
  size_t n = element_count(a.shape, path, kExitData);
  if (n > std::numeric_limits<size_t>::max() / sizeof(T)) data_error(path, "shape too large");
  size_t have = file.size() - off;
  if (have < n * sizeof(T))
    data_error(path, "truncated: " + std::to_string(have) + " data bytes, shape needs " + std::to_string(n * sizeof(T)));
  if (have > n * sizeof(T))
    data_error(path, std::to_string(have - n * sizeof(T)) + " trailing bytes after the data");
  a.data.resize(n);
  if (n) std::memcpy(a.data.data(), file.data() + off, n * sizeof(T));
  return a;
}

}  // namespace

void save_npy(const std::string& path, const float* data, const std::vector<size_t>& shape) {
  save_impl(path, data, shape, "<f4");
}
void save_npy(const std::string& path, const int32_t* data, const std::vector<size_t>& shape) {
  save_impl(path, data, shape, "<i4");
}
NpyArray<float> load_npy_f32(const std::string& path) { return load_impl<float>(path, "<f4"); }
NpyArray<int32_t> load_npy_i32(const std::string& path) { return load_impl<int32_t>(path, "<i4"); }

}  // namespace nb
