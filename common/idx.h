// common/idx.h — read the MNIST / Fashion-MNIST gzip IDX files (zlib), strictly.
//
// Checks: the file exists and is a valid gzip (or plain) stream, the magic (2051 images,
// 2049 labels), the dimensions (28x28 for images), that the payload length equals the header's
// count exactly (truncated or trailing bytes are errors), that labels are 0..9, and that an
// images file and its labels file agree on the count. Every error throws
// nb::Error(kExitData, "<path>: <defect>").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace nb {

struct IdxImages {
  uint32_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major, image after image
};

struct IdxLabels {
  uint32_t count = 0;
  std::vector<uint8_t> labels;
};

IdxImages read_idx_images(const std::string& path);
IdxLabels read_idx_labels(const std::string& path);

struct Dataset {
  std::string name;  // "mnist" | "fashion-mnist"
  IdxImages train_images, test_images;
  IdxLabels train_labels, test_labels;
};

// dir holds train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
// t10k-labels-idx1-ubyte.gz (run `make data`). A missing directory says to run `make data`.
Dataset load_dataset(const std::string& dir, const std::string& name);

}  // namespace nb
