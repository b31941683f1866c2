// common/nvtx.h — NVTX ranges (nvtx3, header-only) in a fixed set of categories and colours.
//
//   { nb::NvtxRange r(nb::Cat::Forward, "forward"); ...enqueue work... }
//   void step() { NB_NVTX_FUNC(nb::Cat::Update); ... }
//
// Every phase uses the same eight categories so nsys timelines and our own trace look alike.
// When the CUPTI tracer (tracer.h) is active the range also records its host start/end on the
// tracer's clock, so our Chrome trace shows the ranges on the host row next to the kernels.
// Ranges measure host time (how long the enqueueing took, or the sync if the range contains one).
#pragma once
#include <cstdint>

namespace nb {

enum class Cat : int { H2D = 0, Init, Forward, Loss, Backward, Update, Eval, Sync, kCount };

const char* cat_name(Cat c);      // "h2d", "init", ...
uint32_t cat_color(Cat c);        // ARGB

class NvtxRange {
 public:
  NvtxRange(Cat cat, const char* name);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  Cat cat_;
  const char* name_;
  uint64_t start_ns_ = 0;
};

}  // namespace nb

#define NB_NVTX_CONCAT2(a, b) a##b
#define NB_NVTX_CONCAT(a, b) NB_NVTX_CONCAT2(a, b)
#define NB_NVTX_FUNC(cat) ::nb::NvtxRange NB_NVTX_CONCAT(nb_nvtx_func_, __LINE__)((cat), __func__)
#define NB_NVTX_RANGE(cat, name) ::nb::NvtxRange NB_NVTX_CONCAT(nb_nvtx_range_, __LINE__)((cat), (name))
