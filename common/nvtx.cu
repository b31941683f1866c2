// common/nvtx.cu — NVTX ranges (see nvtx.h).
//
// Each NvtxRange pushes an NVTX range with its category's colour and numeric category (named
// once per process with nvtxNameCategoryA, so nsys shows "forward", "update", ... in its
// timeline), and pops it when the scope ends. NVTX is header-only (nvtx3): without a tool
// attached, push/pop cost a branch each.
//
// Our own CUPTI tracer (tracer.h) cannot see NVTX calls by itself, so while it is active the
// range also takes its start and end timestamps from Tracer::now_ns() — the same clock as the
// kernel records — and hands them to Tracer::record_range() at the end of the scope.
#include <nvtx3/nvToolsExt.h>

#include <mutex>

#include "nvtx.h"
#include "tracer.h"

namespace nb {

namespace {
struct CatInfo {
  const char* name;
  uint32_t argb;
};
// Distinct, colour-blind-friendly hues (Okabe–Ito palette plus grey for sync).
constexpr CatInfo kCats[static_cast<int>(Cat::kCount)] = {
    {"h2d", 0xFF0072B2u},       // blue
    {"init", 0xFF999999u},      // light grey
    {"forward", 0xFF009E73u},   // green
    {"loss", 0xFFF0E442u},      // yellow
    {"backward", 0xFFD55E00u},  // vermillion
    {"update", 0xFFCC79A7u},    // purple
    {"eval", 0xFF56B4E9u},      // sky blue
    {"sync", 0xFF555555u},      // dark grey
};

int cat_index(Cat c) {
  int i = static_cast<int>(c);
  return (i >= 0 && i < static_cast<int>(Cat::kCount)) ? i : 0;
}

void name_categories_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int i = 0; i < static_cast<int>(Cat::kCount); ++i) nvtxNameCategoryA(static_cast<uint32_t>(i + 1), kCats[i].name);
  });
}
}  // namespace

const char* cat_name(Cat c) { return kCats[cat_index(c)].name; }
uint32_t cat_color(Cat c) { return kCats[cat_index(c)].argb; }

NvtxRange::NvtxRange(Cat cat, const char* name) : cat_(cat), name_(name ? name : "(unnamed)") {
  name_categories_once();
  nvtxEventAttributes_t attr = {};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.category = static_cast<uint32_t>(cat_index(cat_) + 1);  // 0 means "no category" in NVTX
  attr.colorType = NVTX_COLOR_ARGB;
  attr.color = cat_color(cat_);
  attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attr.message.ascii = name_;
  nvtxRangePushEx(&attr);
  Tracer& tr = Tracer::instance();
  if (tr.active()) start_ns_ = tr.now_ns();
}

NvtxRange::~NvtxRange() {
  Tracer& tr = Tracer::instance();
  // start_ns_ == 0: the tracer was off when the range began, so it has no start on the tracer's clock.
  if (start_ns_ != 0 && tr.active()) tr.record_range(cat_, name_, start_ns_, tr.now_ns());
  nvtxRangePop();
}

}  // namespace nb
