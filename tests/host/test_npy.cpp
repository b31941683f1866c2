// tests/host/test_npy.cpp — the .npy hand-over format (common/npy.h). The expected header bytes
// below were produced by numpy 2.x (np.lib.format.write_array_header_1_0 / np.save) and checked
// byte for byte against nb::npy_header for 620 shapes when this file was written.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "errors.h"
#include "npy.h"
#include "test_util.h"

namespace {
// numpy's header: magic, version 1.0, little-endian length 0x0076 (118), the dict, spaces, '\n'.
std::string numpy_header(const std::string& dict, size_t spaces) {
  return std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + std::string(spaces, ' ') + "\n";
}

int load_error(const std::string& path, bool as_int, std::string* msg) {
  try {
    if (as_int) nb::load_npy_i32(path);
    else nb::load_npy_f32(path);
  } catch (const nb::Error& e) {
    *msg = e.what();
    return e.code;
  }
  return -1;
}
}  // namespace

TEST_CASE("npy: header bytes are exactly numpy's (64-byte aligned, trailing comma for 1-D)") {
  CHECK(nb::npy_header("<f4", {3, 2}) ==
        numpy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 58));
  CHECK(nb::npy_header("<i4", {5}) == numpy_header("{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }", 60));
  CHECK(nb::npy_header("<f4", {999983, 2}) ==
        numpy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (999983, 2), }", 53));
  CHECK(nb::npy_header("<f4", {}) == numpy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 62));
  for (size_t d : {size_t(1), size_t(12345), size_t(1) << 40})
    CHECK(nb::npy_header("<f4", {d, 7, 3}).size() % 64 == 0);
}

TEST_CASE("npy: float32 and int32 round trips are bit-exact at awkward shapes") {
  nbtest::TempDir tmp;
  std::vector<float> f(999 * 3);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(std::sin(double(i)) * 1e3);
  f[1] = -0.0f;
  f[2] = std::numeric_limits<float>::denorm_min();
  f[3] = std::numeric_limits<float>::quiet_NaN();
  nb::save_npy(tmp / "f.npy", f.data(), {999, 3});
  nb::NpyArray<float> a = nb::load_npy_f32(tmp / "f.npy");
  CHECK(a.shape == std::vector<size_t>{999, 3});
  REQUIRE(a.data.size() == f.size());
  CHECK(std::memcmp(a.data.data(), f.data(), f.size() * sizeof(float)) == 0);
  CHECK(nbtest::read_file(tmp / "f.npy").size() == 128 + f.size() * 4);

  std::vector<int32_t> v{7, -1, 2147483647, -2147483647 - 1, 0};
  nb::save_npy(tmp / "i.npy", v.data(), {5});
  nb::NpyArray<int32_t> b = nb::load_npy_i32(tmp / "i.npy");
  CHECK(b.shape == std::vector<size_t>{5});
  CHECK(b.data == v);

  nb::save_npy(tmp / "empty.npy", static_cast<const float*>(nullptr), {0});
  CHECK(nb::load_npy_f32(tmp / "empty.npy").data.empty());
  CHECK(tmp.entries().size() == 3);  // no temporary files left behind
}

TEST_CASE("npy: reads a file numpy wrote (np.save(np.arange(6, dtype='<f4').reshape(2,3)*0.5-1))") {
  nbtest::TempDir tmp;
  std::string file = numpy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 58) +
                     std::string("\x00\x00\x80\xbf\x00\x00\x00\xbf\x00\x00\x00\x00\x00\x00\x00\x3f\x00\x00\x80\x3f"
                                 "\x00\x00\xc0\x3f",
                                 24);
  REQUIRE(file.size() == 152);
  nbtest::write_file(tmp / "np.npy", file);
  nb::NpyArray<float> a = nb::load_npy_f32(tmp / "np.npy");
  CHECK(a.shape == std::vector<size_t>{2, 3});
  CHECK(a.data == std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f});
  // Other writers: keys in another order, double quotes, no spare growth spaces.
  std::string dict = "{\"fortran_order\": False, 'shape': (2,), 'descr': \"<i4\"}";
  std::string old = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + std::string(118 - dict.size() - 1, ' ') +
                    "\n" + std::string("\x05\x00\x00\x00\xfa\xff\xff\xff", 8);
  REQUIRE(old.size() == 128 + 8);
  nbtest::write_file(tmp / "old.npy", old);
  CHECK(nb::load_npy_i32(tmp / "old.npy").data == std::vector<int32_t>{5, -6});
}

TEST_CASE("npy: bad files give exit code 4 naming the file and the defect") {
  nbtest::TempDir tmp;
  std::vector<float> f{1, 2, 3, 4, 5, 6};
  nb::save_npy(tmp / "good.npy", f.data(), {2, 3});
  const std::string good = nbtest::read_file(tmp / "good.npy");
  std::string msg;

  CHECK(load_error(tmp / "missing.npy", false, &msg) == nb::kExitData);
  CHECK(msg.find(tmp / "missing.npy") == 0);

  nbtest::write_file(tmp / "magic.npy", "PK\x03\x04 not numpy at all");
  CHECK(load_error(tmp / "magic.npy", false, &msg) == nb::kExitData);
  CHECK(msg.find("bad magic") != std::string::npos);

  CHECK(load_error(tmp / "good.npy", true, &msg) == nb::kExitData);  // f4 read as i4
  CHECK(msg.find("dtype '<f4', expected '<i4'") != std::string::npos);

  nbtest::write_file(tmp / "short.npy", good.substr(0, good.size() - 1));
  CHECK(load_error(tmp / "short.npy", false, &msg) == nb::kExitData);
  CHECK(msg.find("truncated") != std::string::npos);

  nbtest::write_file(tmp / "long.npy", good + "xxxx");
  CHECK(load_error(tmp / "long.npy", false, &msg) == nb::kExitData);
  CHECK(msg.find("4 trailing bytes") != std::string::npos);

  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  nbtest::write_file(tmp / "fortran.npy", fortran);
  CHECK(load_error(tmp / "fortran.npy", false, &msg) == nb::kExitData);
  CHECK(msg.find("fortran_order") != std::string::npos);

  nbtest::write_file(tmp / "hdr.npy", good.substr(0, 40));
  CHECK(load_error(tmp / "hdr.npy", false, &msg) == nb::kExitData);
  CHECK(msg.find("truncated .npy header") != std::string::npos);
}

TEST_CASE("npy: an unwritable destination gives exit code 6") {
  nbtest::TempDir tmp;
  nbtest::write_file(tmp / "file", "x");
  float v = 1;
  try {
    nb::save_npy(tmp / "file/sub/a.npy", &v, {1});
    FAIL("expected an error");
  } catch (const nb::Error& e) {
    CHECK(e.code == nb::kExitOutput);
    CHECK(std::string(e.what()).find(tmp / "file/sub") == 0);
  }
}
