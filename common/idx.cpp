// common/idx.cpp — strict reader for the (gzip-compressed) IDX files of MNIST and Fashion-MNIST.
//
// zlib's gzopen/gzread read gzip streams and, transparently, plain uncompressed files, so the
// same code reads both. The reader trusts nothing: it checks the header field by field, reads
// exactly the payload the header announces (growing its buffer as bytes arrive, so a corrupt
// count cannot make it allocate terabytes), then reads on to the end of the stream, which both
// detects trailing bytes and makes zlib verify the gzip CRC and length trailer.
// Every defect throws nb::Error(kExitData, "<path>: <defect>").
#include "idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "errors.h"

namespace nb {

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // 2051: unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // 2049: unsigned byte, 1 dimension
constexpr uint32_t kSide = 28;

[[noreturn]] void defect(const std::string& path, const std::string& what) { throw Error(kExitData, path + ": " + what); }

class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) defect(path, "missing (no such file; run `make data`)");
      defect(path, std::string("cannot access: ") + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) defect(path, "not a regular file");
    f_ = gzopen(path.c_str(), "rb");
    if (!f_) defect(path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "out of memory"));
    gzbuffer(f_, 1 << 17);
  }
  ~GzReader() {
    if (f_) gzclose(f_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes into dst; returns how many arrived before the end of the stream.
  // A damaged gzip stream (bad data, bad CRC, cut short) throws naming zlib's reason.
  size_t read(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 20));
      int r = gzread(f_, dst + got, chunk);
      if (r < 0 || (r == 0 && !gzeof(f_))) stream_error(got);
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    if (got < n) {
      int err = 0;
      gzerror(f_, &err);
      if (err != Z_OK) stream_error(got);
    }
    return got;
  }

  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void stream_error(size_t got) {
    int err = 0;
    const char* msg = gzerror(f_, &err);
    std::string m = msg && *msg ? msg : "read error";
    if (m.compare(0, path_.size() + 2, path_ + ": ") == 0) m.erase(0, path_.size() + 2);  // zlib prefixes the path
    if (err == Z_BUF_ERROR || m.find("unexpected end") != std::string::npos)
      defect(path_, "truncated gzip stream (" + m + ")");
    (void)got;
    defect(path_, "corrupt gzip stream (" + m + ")");
  }

  std::string path_;
  gzFile f_ = nullptr;
};

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string magic_text(uint32_t m) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%u (0x%08x)", m, m);
  std::string s = buf;
  const char* what = m == kImagesMagic ? "this is an IDX images file"
                     : m == kLabelsMagic ? "this is an IDX labels file"
                     : (m >> 16) == 0x1f8b ? "a gzip stream inside the gzip stream"
                     : nullptr;
  if (what) s = s.substr(0, s.size() - 1) + "; " + what + ")";
  return s;
}

// Reads the magic and the `ndims` dimension words.
std::vector<uint32_t> read_header(GzReader& in, uint32_t want_magic, int ndims, const char* kind) {
  uint8_t h[16];
  size_t need = 4 + 4 * static_cast<size_t>(ndims);
  size_t got = in.read(h, 4);
  if (got < 4)
    defect(in.path(), got == 0 ? "empty file (no IDX header)"
                               : "truncated: the file ends inside the IDX header (" + std::to_string(got) + " of " +
                                     std::to_string(need) + " bytes)");
  uint32_t magic = big_endian_u32(h);
  if (magic != want_magic)
    defect(in.path(), "wrong magic " + magic_text(magic) + ", expected " + magic_text(want_magic).substr(0, magic_text(want_magic).find(' ')) +
                          " (IDX " + kind + ")");
  got = in.read(h + 4, need - 4);
  if (got < need - 4)
    defect(in.path(), "truncated: the file ends inside the IDX header (" + std::to_string(4 + got) + " of " +
                          std::to_string(need) + " bytes)");
  std::vector<uint32_t> dims;
  for (int d = 0; d < ndims; ++d) dims.push_back(big_endian_u32(h + 4 + 4 * d));
  return dims;
}

// Reads exactly `expected` payload bytes, then checks the stream ends there.
std::vector<uint8_t> read_payload(GzReader& in, uint64_t expected, const std::string& what) {
  std::vector<uint8_t> data;
  uint64_t got = 0;
  const uint64_t step = 16u << 20;
  while (got < expected) {
    uint64_t want = std::min<uint64_t>(expected - got, step);
    data.resize(static_cast<size_t>(got + want));
    size_t r = in.read(data.data() + got, static_cast<size_t>(want));
    got += r;
    if (r < want) break;
  }
  if (got < expected)
    defect(in.path(), "truncated or count mismatch: the header announces " + what + " (" + std::to_string(expected) +
                          " payload bytes) but the file holds only " + std::to_string(got));
  // Read on to the end: catches trailing bytes and lets zlib check the CRC/length trailer.
  uint64_t extra = 0;
  uint8_t sink[4096];
  for (;;) {
    size_t r = in.read(sink, sizeof sink);
    extra += r;
    if (r < sizeof sink || extra > (64u << 20)) break;
  }
  if (extra > 0)
    defect(in.path(), std::string(extra > (64u << 20) ? "more than " : "") + std::to_string(extra) +
                          " trailing bytes after the " + what +
                          " the header announces (count mismatch or trailing garbage)");
  return data;
}

}  // namespace

IdxImages read_idx_images(const std::string& path) {
  GzReader in(path);
  std::vector<uint32_t> d = read_header(in, kImagesMagic, 3, "images");
  IdxImages img;
  img.count = d[0];
  img.rows = d[1];
  img.cols = d[2];
  if (img.rows != kSide || img.cols != kSide)
    defect(path, "image dimensions " + std::to_string(img.rows) + "x" + std::to_string(img.cols) +
                     ", expected 28x28");
  img.pixels = read_payload(in, uint64_t(img.count) * img.rows * img.cols, std::to_string(img.count) + " images");
  return img;
}

IdxLabels read_idx_labels(const std::string& path) {
  GzReader in(path);
  std::vector<uint32_t> d = read_header(in, kLabelsMagic, 1, "labels");
  IdxLabels lab;
  lab.count = d[0];
  lab.labels = read_payload(in, lab.count, std::to_string(lab.count) + " labels");
  for (size_t i = 0; i < lab.labels.size(); ++i)
    if (lab.labels[i] > 9)
      defect(path, "label " + std::to_string(lab.labels[i]) + " at index " + std::to_string(i) +
                       " is outside 0..9");
  return lab;
}

Dataset load_dataset(const std::string& dir, const std::string& name) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw Error(kExitData, dir + ": no such data directory (run `make data` to fetch " + name + ")");
  std::string base = dir;
  if (!base.empty() && base.back() != '/') base += '/';
  Dataset ds;
  ds.name = name;
  ds.train_images = read_idx_images(base + "train-images-idx3-ubyte.gz");
  ds.train_labels = read_idx_labels(base + "train-labels-idx1-ubyte.gz");
  ds.test_images = read_idx_images(base + "t10k-images-idx3-ubyte.gz");
  ds.test_labels = read_idx_labels(base + "t10k-labels-idx1-ubyte.gz");
  auto agree = [&](const IdxImages& im, const IdxLabels& lb, const char* imf, const char* lbf) {
    if (im.count != lb.count)
      throw Error(kExitData, base + lbf + ": count mismatch: " + std::to_string(lb.count) + " labels but " + base +
                                 imf + " has " + std::to_string(im.count) + " images");
  };
  agree(ds.train_images, ds.train_labels, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz");
  agree(ds.test_images, ds.test_labels, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz");
  return ds;
}

}  // namespace nb
