// common/idx.cpp — strict reader for the (gzip-compressed) IDX files of MNIST and Fashion-MNIST.
//
// A gzip file is inflated with zlib; a plain (already decompressed) file is read as is. The reader
// trusts nothing: it checks the header field by field, reads exactly the payload the header
// announces (growing its buffer as bytes arrive, so a corrupt count cannot make it allocate
// terabytes), then reads on to the end of the stream, which detects trailing bytes and makes
// zlib verify the gzip CRC and length trailer (a file cut anywhere, even inside the 8-byte
// trailer, is reported as truncated).
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

// A byte stream over an IDX file: gzip (detected by its 1f 8b magic) is inflated with zlib's
// inflate() directly, anything else is read as is. (zlib's gzread() is not used because it
// quietly accepts a gzip file cut inside its 8-byte CRC/length trailer.)
class IdxStream {
 public:
  explicit IdxStream(const std::string& path) : path_(path), in_(1 << 17) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) defect(path, "missing (no such file; run `make data`)");
      defect(path, std::string("cannot access: ") + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) defect(path, "not a regular file");
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) defect(path, std::string("cannot open: ") + std::strerror(errno));
    zs_.next_in = in_.data();
    zs_.avail_in = 0;
    fill(2);
    gzip_ = zs_.avail_in >= 2 && zs_.next_in[0] == 0x1f && zs_.next_in[1] == 0x8b;
    if (gzip_) {
      if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) defect(path, "zlib could not initialise (out of memory?)");
      zinit_ = true;
    }
  }
  ~IdxStream() {
    if (zinit_) inflateEnd(&zs_);
    if (f_) std::fclose(f_);
  }
  IdxStream(const IdxStream&) = delete;
  IdxStream& operator=(const IdxStream&) = delete;

  // Reads up to n bytes into dst; returns how many arrived before the end of the data.
  // A damaged gzip stream (bad data, bad CRC, cut short, garbage after it) throws.
  size_t read(uint8_t* dst, size_t n) {
    size_t got = 0;
    if (!gzip_) {  // plain file: first whatever is buffered, then the file
      while (got < n) {
        if (zs_.avail_in == 0 && fill(1) == 0) break;
        size_t k = std::min<size_t>(n - got, zs_.avail_in);
        std::memcpy(dst + got, zs_.next_in, k);
        zs_.next_in += k;
        zs_.avail_in -= static_cast<uInt>(k);
        got += k;
      }
      return got;
    }
    while (got < n && !ended_) {
      if (zs_.avail_in == 0 && fill(1) == 0)
        defect(path_, "truncated gzip stream (the file ends before the end of the compressed data and its CRC)");
      zs_.next_out = dst + got;
      zs_.avail_out = static_cast<uInt>(std::min<size_t>(n - got, 1u << 30));
      const uInt before = zs_.avail_out;
      int ret = inflate(&zs_, Z_NO_FLUSH);
      got += before - zs_.avail_out;
      if (ret == Z_STREAM_END) {
        next_member();
      } else if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT || ret == Z_STREAM_ERROR) {
        defect(path_, std::string("corrupt gzip stream (") + (zs_.msg ? zs_.msg : "invalid data") + ")");
      } else if (ret == Z_MEM_ERROR) {
        defect(path_, "zlib ran out of memory");
      }
      // Z_OK: progress made; Z_BUF_ERROR: needs more input, refilled at the top of the loop.
    }
    return got;
  }

  const std::string& path() const { return path_; }

 private:
  // Moves unread input to the front and reads from the file until at least `want` bytes are
  // buffered or the file ends; returns the bytes buffered.
  size_t fill(size_t want) {
    if (zs_.avail_in >= want) return zs_.avail_in;
    std::memmove(in_.data(), zs_.next_in, zs_.avail_in);
    zs_.next_in = in_.data();
    while (zs_.avail_in < want) {
      size_t r = std::fread(in_.data() + zs_.avail_in, 1, in_.size() - zs_.avail_in, f_);
      if (r == 0) {
        if (std::ferror(f_)) defect(path_, std::string("read error: ") + std::strerror(errno));
        break;
      }
      zs_.avail_in += static_cast<uInt>(r);
    }
    return zs_.avail_in;
  }

  // After one gzip member: another member may follow (as `gzip -d` allows); anything else is
  // garbage after the data.
  void next_member() {
    size_t have = fill(2);
    if (have == 0) {
      ended_ = true;
      return;
    }
    if (have >= 2 && zs_.next_in[0] == 0x1f && zs_.next_in[1] == 0x8b) {
      if (inflateReset(&zs_) != Z_OK) defect(path_, "zlib could not reset for the next gzip member");
      return;
    }
    size_t extra = have;  // count what follows (up to a cap), for the message
    zs_.avail_in = 0;
    while (extra < (64u << 20)) {
      size_t r = fill(1);
      if (r == 0) break;
      extra += r;
      zs_.avail_in = 0;
    }
    defect(path_, std::to_string(extra) + " bytes of garbage after the end of the gzip stream");
  }

  std::string path_;
  std::FILE* f_ = nullptr;
  std::vector<uint8_t> in_;
  z_stream zs_{};
  bool gzip_ = false, zinit_ = false, ended_ = false;
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
std::vector<uint32_t> read_header(IdxStream& in, uint32_t want_magic, int ndims, const char* kind) {
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
std::vector<uint8_t> read_payload(IdxStream& in, uint64_t expected, const std::string& what) {
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
  IdxStream in(path);
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
  IdxStream in(path);
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
