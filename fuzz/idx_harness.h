// fuzz/idx_harness.h — one IDX read of arbitrary bytes, shared by the libFuzzer target
// (fuzz/fuzz_idx.cpp) and the regression replay (tests/host/test_regressions.cpp).
//
// The reader takes a path, so the input becomes a file. Its first byte picks how (low 2 bits):
//   0  the remaining bytes as they are (a plain IDX file, or a damaged gzip stream)
//   1  the remaining bytes gzip-compressed (so the IDX structure itself is fuzzed behind zlib)
//   2  as 1, then cut at a point chosen by the second byte (a truncated .gz)
//   3  as 1, then followed by the first few remaining bytes again (trailing garbage)
// Both read_idx_images() and read_idx_labels() are run on the file. The contract checked here:
//   - each either returns a well-formed result (images: rows = cols = 28, pixels = count*28*28;
//     labels: count entries, each 0..9) or throws nb::Error with code kExitData and a one-line
//     message that names the file; any other exception escapes (a finding);
//   - nothing else happens (sanitizers watch memory; libFuzzer's -malloc_limit_mb catches a
//     header that makes the reader allocate gigabytes before checking the payload).
// Violations call std::abort() so libFuzzer reports them with the input (or throw, see below).
#pragma once
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "errors.h"
#include "idx.h"

namespace nb_fuzz {

// libFuzzer wants an abort (it saves the input); the doctest replay wants an exception it can
// report, so it sets idx_throw_on_violation() = true.
inline bool& idx_throw_on_violation() {
  static bool on = false;
  return on;
}

[[noreturn]] inline void idx_violation(const char* what, const std::string& detail) {
  if (idx_throw_on_violation()) throw std::logic_error(std::string("idx contract violated: ") + what + ": " + detail);
  std::fprintf(stderr, "idx contract violated: %s: %s\n", what, detail.c_str());
  std::abort();
}

// gzip-compress (a real .gz stream with header and trailer, like the published MNIST files).
inline std::vector<uint8_t> gzip_bytes(const uint8_t* data, size_t size) {
  z_stream zs{};
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) idx_violation("deflateInit2", "");
  std::vector<uint8_t> out(deflateBound(&zs, static_cast<uLong>(size)) + 32);
  zs.next_in = const_cast<Bytef*>(data);
  zs.avail_in = static_cast<uInt>(size);
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) idx_violation("deflate", "");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// The file contents and name suffix for one fuzz input (see the table above).
inline std::vector<uint8_t> idx_file_bytes(const uint8_t* data, size_t size, std::string* suffix) {
  *suffix = "";
  if (size == 0) return {};
  const int mode = data[0] & 3;
  const uint8_t* rest = data + 1;
  const size_t n = size - 1;
  if (mode == 0) return std::vector<uint8_t>(rest, rest + n);
  *suffix = ".gz";
  std::vector<uint8_t> gz = gzip_bytes(rest, n);
  if (mode == 2) {
    size_t cut = n > 0 ? gz.size() * rest[0] / 256 : gz.size() / 2;
    gz.resize(cut);
  } else if (mode == 3) {
    gz.insert(gz.end(), rest, rest + (n < 8 ? n : 8));
    if (n == 0) gz.push_back(0);
  }
  return gz;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) idx_violation("cannot create the temporary file", path);
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) idx_violation("short write", path);
  if (std::fclose(f) != 0) idx_violation("close failed", path);
}

inline void check_idx_error(const nb::Error& e, const std::string& path) {
  std::string m = e.what();
  if (e.code != nb::kExitData) idx_violation("error code is not kExitData", m);
  if (m.find('\n') != std::string::npos) idx_violation("error message spans lines", m);
  if (m.find(path) == std::string::npos) idx_violation("error message does not name the file", m);
}

// Outcome of one read, for the regression test: how many of the two readers rejected the file.
struct IdxOutcome {
  int rejected = 0;
  std::string images_error, labels_error;
};

// Runs both readers on the file at `path` (already written) and checks the contract.
inline IdxOutcome read_both(const std::string& path) {
  IdxOutcome out;
  try {
    nb::IdxImages im = nb::read_idx_images(path);
    if (im.rows != 28 || im.cols != 28) idx_violation("images accepted with dimensions other than 28x28", path);
    if (im.pixels.size() != static_cast<size_t>(im.count) * im.rows * im.cols)
      idx_violation("pixel count disagrees with the header", path);
  } catch (const nb::Error& e) {
    check_idx_error(e, path);
    out.images_error = e.what();
    ++out.rejected;
  }
  try {
    nb::IdxLabels lb = nb::read_idx_labels(path);
    if (lb.labels.size() != lb.count) idx_violation("label count disagrees with the header", path);
    for (uint8_t l : lb.labels)
      if (l > 9) idx_violation("label > 9 accepted", path);
  } catch (const nb::Error& e) {
    check_idx_error(e, path);
    out.labels_error = e.what();
    ++out.rejected;
  }
  return out;
}

// Writes the input as a file under `stem` (+ suffix) and runs both readers on it.
inline IdxOutcome run_idx_once(const uint8_t* data, size_t size, const std::string& stem) {
  std::string suffix;
  std::vector<uint8_t> bytes = idx_file_bytes(data, size, &suffix);
  std::string path = stem + suffix;
  write_bytes(path, bytes);
  IdxOutcome out = read_both(path);
  std::remove(path.c_str());
  return out;
}

}  // namespace nb_fuzz
