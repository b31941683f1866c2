// tests/host/test_idx.cpp — the IDX reader (common/idx.h) on the real MNIST / Fashion-MNIST files
// (env DATA_DIR, default ../shared/data) and on corrupted files written to a temporary folder.
// The checksums below were computed independently with Python's gzip + numpy from the published
// files (md5s in shared/data/README.md).
#include <doctest/doctest.h>
#include <zlib.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "errors.h"
#include "idx.h"
#include "test_util.h"

namespace {

std::string be32(uint32_t v) {
  return {char(v >> 24), char((v >> 16) & 0xff), char((v >> 8) & 0xff), char(v & 0xff)};
}

std::string images_bytes(uint32_t count_in_header, uint32_t count_written, uint32_t rows = 28, uint32_t cols = 28) {
  std::string s = be32(2051) + be32(count_in_header) + be32(rows) + be32(cols);
  for (uint32_t i = 0; i < count_written * rows * cols; ++i) s += char((i * 7) & 0xff);
  return s;
}

std::string labels_bytes(uint32_t count_in_header, const std::vector<uint8_t>& labels) {
  std::string s = be32(2049) + be32(count_in_header);
  for (uint8_t l : labels) s += char(l);
  return s;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

// Runs f, expects nb::Error with the data exit code; returns the message.
std::string data_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const nb::Error& e) {
    CHECK(e.code == nb::kExitData);
    return e.what();
  }
  FAIL("expected nb::Error(kExitData)");
  return "";
}

// Position-weighted pixel sum (catches reordering, not only the histogram).
uint64_t weighted_pixel_sum(const std::vector<uint8_t>& px) {
  uint64_t s = 0;
  for (size_t i = 0; i < px.size(); ++i) s += uint64_t(px[i]) * (uint64_t(i % 65521) + 1);
  return s;
}

uint64_t fnv1a64(const std::vector<uint8_t>& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : v) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

std::array<int, 10> histogram(const std::vector<uint8_t>& labels) {
  std::array<int, 10> h{};
  for (uint8_t l : labels) h[l]++;
  return h;
}

bool have_dataset(const std::string& dir) {
  return nbtest::file_exists(dir + "/train-images-idx3-ubyte.gz") && nbtest::file_exists(dir + "/t10k-labels-idx1-ubyte.gz");
}

}  // namespace

TEST_CASE("idx: real MNIST — counts, shape, labels 0..9, histogram and checksums") {
  const std::string dir = nbtest::data_dir() + "/mnist";
  if (!have_dataset(dir)) {
    MESSAGE("skipped: no MNIST files in ", dir, " (set DATA_DIR or run `make data`); checking the missing-data error");
    std::string msg = data_error([&] { nb::load_dataset(dir + "/absent", "mnist"); });
    CHECK(msg.find("make data") != std::string::npos);
    return;
  }
  nb::Dataset ds = nb::load_dataset(dir, "mnist");
  CHECK(ds.name == "mnist");
  CHECK(ds.train_images.count == 60000);
  CHECK(ds.test_images.count == 10000);
  CHECK(ds.train_labels.count == 60000);
  CHECK(ds.test_labels.count == 10000);
  CHECK(ds.train_images.rows == 28);
  CHECK(ds.train_images.cols == 28);
  CHECK(ds.train_images.pixels.size() == size_t(60000) * 784);
  CHECK(ds.test_images.pixels.size() == size_t(10000) * 784);
  CHECK(histogram(ds.train_labels.labels) == std::array<int, 10>{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949});
  CHECK(histogram(ds.test_labels.labels) == std::array<int, 10>{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009});
  CHECK(std::vector<uint8_t>(ds.train_labels.labels.begin(), ds.train_labels.labels.begin() + 10) ==
        std::vector<uint8_t>{5, 0, 4, 1, 9, 2, 1, 3, 1, 4});
  CHECK(fnv1a64(ds.train_labels.labels) == 0xe3a35dee662474a5ull);
  CHECK(fnv1a64(ds.test_labels.labels) == 0xfca1a11d31bd96bbull);
  CHECK(weighted_pixel_sum(ds.train_images.pixels) == 51357405085107ull);
  CHECK(weighted_pixel_sum(ds.test_images.pixels) == 8672111614975ull);
  CHECK(ds.train_images.pixels[14 * 28 + 14] == 240);  // centre pixel of the first training image (a 5)
}

TEST_CASE("idx: real Fashion-MNIST — counts, balanced classes and checksums") {
  const std::string dir = nbtest::data_dir() + "/fashion-mnist";
  if (!have_dataset(dir)) {
    MESSAGE("skipped: no Fashion-MNIST files in ", dir, "; checking the missing-file error instead");
    std::string msg = data_error([&] { nb::read_idx_images(dir + "/train-images-idx3-ubyte.gz"); });
    CHECK(msg.find("missing") != std::string::npos);
    return;
  }
  nb::Dataset ds = nb::load_dataset(dir, "fashion-mnist");
  CHECK(ds.train_images.count == 60000);
  CHECK(ds.test_images.count == 10000);
  for (int c : histogram(ds.train_labels.labels)) CHECK(c == 6000);
  for (int c : histogram(ds.test_labels.labels)) CHECK(c == 1000);
  CHECK(fnv1a64(ds.train_labels.labels) == 0xb9f71c71bae5f277ull);
  CHECK(fnv1a64(ds.test_labels.labels) == 0x25bdf8123f06fac3ull);
  CHECK(weighted_pixel_sum(ds.train_images.pixels) == 112463966970509ull);
  CHECK(weighted_pixel_sum(ds.test_images.pixels) == 18731464165863ull);
}

TEST_CASE("idx: small valid files read back, gzip or plain") {
  nbtest::TempDir tmp;
  write_gz(tmp / "im.gz", images_bytes(3, 3));
  nbtest::write_file(tmp / "im.raw", images_bytes(3, 3));
  for (const char* name : {"im.gz", "im.raw"}) {
    nb::IdxImages im = nb::read_idx_images(tmp / name);
    CHECK(im.count == 3);
    CHECK(im.rows == 28);
    REQUIRE(im.pixels.size() == 3 * 784);
    CHECK(im.pixels[1] == 7);
    CHECK(im.pixels[100] == uint8_t(700 & 0xff));
  }
  write_gz(tmp / "lb.gz", labels_bytes(4, {0, 9, 3, 3}));
  nb::IdxLabels lb = nb::read_idx_labels(tmp / "lb.gz");
  CHECK(lb.labels == std::vector<uint8_t>{0, 9, 3, 3});
  // Two concatenated gzip members form one stream (as `gzip -d` reads them).
  write_gz(tmp / "m1.gz", labels_bytes(3, {8}));
  write_gz(tmp / "m2.gz", std::string{char(1), char(2)});
  nbtest::write_file(tmp / "multi.gz", nbtest::read_file(tmp / "m1.gz") + nbtest::read_file(tmp / "m2.gz"));
  CHECK(nb::read_idx_labels(tmp / "multi.gz").labels == std::vector<uint8_t>{8, 1, 2});
}

TEST_CASE("idx: missing file, wrong magic, garbage and empty files name the file and the defect") {
  nbtest::TempDir tmp;
  std::string m = data_error([&] { nb::read_idx_images(tmp / "nope.gz"); });
  CHECK(m.find(tmp / "nope.gz") == 0);
  CHECK(m.find("missing") != std::string::npos);

  write_gz(tmp / "labels-as-images.gz", labels_bytes(2, {1, 2}));
  m = data_error([&] { nb::read_idx_images(tmp / "labels-as-images.gz"); });
  CHECK(m.find(tmp / "labels-as-images.gz") == 0);
  CHECK(m.find("wrong magic 2049") != std::string::npos);
  CHECK(m.find("labels file") != std::string::npos);

  std::string garbage;
  for (int i = 0; i < 5000; ++i) garbage += char((i * 131 + 17) % 251);
  nbtest::write_file(tmp / "garbage", garbage);
  m = data_error([&] { nb::read_idx_labels(tmp / "garbage"); });
  CHECK(m.find(tmp / "garbage") == 0);
  CHECK(m.find("wrong magic") != std::string::npos);

  nbtest::write_file(tmp / "empty.gz", "");
  m = data_error([&] { nb::read_idx_labels(tmp / "empty.gz"); });
  CHECK(m.find("empty") != std::string::npos);

  m = data_error([&] { nb::read_idx_labels(tmp.path); });
  CHECK(m.find("not a regular file") != std::string::npos);
}

TEST_CASE("idx: truncated files (cut gzip stream, cut header, short payload)") {
  nbtest::TempDir tmp;
  write_gz(tmp / "full.gz", images_bytes(50, 50));
  std::string gz = nbtest::read_file(tmp / "full.gz");
  nbtest::write_file(tmp / "cut.gz", gz.substr(0, gz.size() / 2));
  std::string m = data_error([&] { nb::read_idx_images(tmp / "cut.gz"); });
  CHECK(m.find(tmp / "cut.gz") == 0);
  CHECK(m.find("truncated") != std::string::npos);

  nbtest::write_file(tmp / "hdr", images_bytes(3, 3).substr(0, 10));
  m = data_error([&] { nb::read_idx_images(tmp / "hdr"); });
  CHECK(m.find("ends inside the IDX header") != std::string::npos);

  nbtest::write_file(tmp / "short", images_bytes(3, 3).substr(0, 16 + 2 * 784 + 5));
  m = data_error([&] { nb::read_idx_images(tmp / "short"); });
  CHECK(m.find("holds only 1573") != std::string::npos);
}

TEST_CASE("idx: count mismatch and trailing bytes") {
  nbtest::TempDir tmp;
  write_gz(tmp / "more.gz", images_bytes(4, 3));  // header promises 4 images, 3 present
  std::string m = data_error([&] { nb::read_idx_images(tmp / "more.gz"); });
  CHECK(m.find(tmp / "more.gz") == 0);
  CHECK(m.find("count mismatch") != std::string::npos);

  write_gz(tmp / "fewer.gz", labels_bytes(2, {1, 2, 3}));  // header says 2, 3 present
  m = data_error([&] { nb::read_idx_labels(tmp / "fewer.gz"); });
  CHECK(m.find("1 trailing bytes") != std::string::npos);

  std::string one = [&] {
    write_gz(tmp / "one.gz", labels_bytes(2, {4, 5}));
    return nbtest::read_file(tmp / "one.gz");
  }();
  nbtest::write_file(tmp / "garbage-after.gz", one + "junk!");
  m = data_error([&] { nb::read_idx_labels(tmp / "garbage-after.gz"); });
  CHECK(m.find("5 bytes of garbage after the end of the gzip stream") != std::string::npos);

  write_gz(tmp / "huge.gz", be32(2051) + be32(0xffffffffu) + be32(28) + be32(28) + std::string(100, 'x'));
  m = data_error([&] { nb::read_idx_images(tmp / "huge.gz"); });  // must not try to allocate 3 TB
  CHECK(m.find("holds only 100") != std::string::npos);

  // load_dataset: images and labels files that disagree on the count.
  write_gz(tmp / "train-images-idx3-ubyte.gz", images_bytes(3, 3));
  write_gz(tmp / "train-labels-idx1-ubyte.gz", labels_bytes(2, {1, 2}));
  write_gz(tmp / "t10k-images-idx3-ubyte.gz", images_bytes(1, 1));
  write_gz(tmp / "t10k-labels-idx1-ubyte.gz", labels_bytes(1, {7}));
  m = data_error([&] { nb::load_dataset(tmp.path, "mnist"); });
  CHECK(m.find("train-labels-idx1-ubyte.gz: count mismatch: 2 labels") != std::string::npos);
}

TEST_CASE("idx: bad dimensions, out-of-range labels and a corrupted gzip body") {
  nbtest::TempDir tmp;
  write_gz(tmp / "dims.gz", images_bytes(2, 2, 27, 28));
  std::string m = data_error([&] { nb::read_idx_images(tmp / "dims.gz"); });
  CHECK(m.find("27x28, expected 28x28") != std::string::npos);

  write_gz(tmp / "lab.gz", labels_bytes(3, {1, 10, 2}));
  m = data_error([&] { nb::read_idx_labels(tmp / "lab.gz"); });
  CHECK(m.find("label 10 at index 1") != std::string::npos);

  write_gz(tmp / "ok.gz", images_bytes(20, 20));
  std::string gz = nbtest::read_file(tmp / "ok.gz");
  std::string crc = gz;
  crc[crc.size() - 6] = char(crc[crc.size() - 6] ^ 0x5a);  // inside the CRC32 trailer
  nbtest::write_file(tmp / "crc.gz", crc);
  m = data_error([&] { nb::read_idx_images(tmp / "crc.gz"); });
  CHECK(m.find(tmp / "crc.gz") == 0);
  CHECK(m.find("corrupt gzip stream") != std::string::npos);
}

TEST_CASE("idx: corrupted copies of the real MNIST files") {
  const std::string dir = nbtest::data_dir() + "/mnist";
  nbtest::TempDir tmp;
  if (!have_dataset(dir)) {
    MESSAGE("skipped: no MNIST files in ", dir, "; checking a missing data directory instead");
    std::string m = data_error([&] { nb::load_dataset(tmp / "no-such-dir", "mnist"); });
    CHECK(m.find(tmp / "no-such-dir") == 0);
    return;
  }
  std::string labels = nbtest::read_file(dir + "/t10k-labels-idx1-ubyte.gz");
  std::string images = nbtest::read_file(dir + "/t10k-images-idx3-ubyte.gz");
  REQUIRE(labels.size() == 4542);
  nbtest::write_file(tmp / "labels-cut.gz", labels.substr(0, 3000));
  std::string m = data_error([&] { nb::read_idx_labels(tmp / "labels-cut.gz"); });
  CHECK(m.find("truncated") != std::string::npos);
  nbtest::write_file(tmp / "images-cut.gz", images.substr(0, images.size() - 1));
  m = data_error([&] { nb::read_idx_images(tmp / "images-cut.gz"); });
  CHECK(m.find(tmp / "images-cut.gz") == 0);
  std::string flipped = images;
  flipped[flipped.size() / 2] = char(flipped[flipped.size() / 2] ^ 0xff);
  nbtest::write_file(tmp / "images-flip.gz", flipped);
  m = data_error([&] { nb::read_idx_images(tmp / "images-flip.gz"); });
  CHECK(m.find("corrupt gzip stream") != std::string::npos);
  // Swapped files: images where labels belong.
  m = data_error([&] { nb::read_idx_labels(dir + "/t10k-images-idx3-ubyte.gz"); });
  CHECK(m.find("wrong magic 2051") != std::string::npos);
}
