// common/tracer.h — our own CUPTI activity tracer: kernels, memcpy/memset and NVTX ranges.
//
//   nb::Tracer& tr = nb::Tracer::instance();
//   tr.start(!opts.no_cupti);      // one warning and tr.active()==false if CUPTI is unavailable
//   ... warm-up ...; tr.clear();   // drop warm-up records
//   ... measured work ...
//   tr.flush();
//   rec["kernels"] = tr.kernel_summary(); rec["ranges"] = tr.range_summary();
//   tr.write_chrome_trace(path);   // Perfetto / chrome://tracing
//
// Only one CUPTI subscriber may exist per process. When the program runs under nsys or ncu
// (detected from their injection environment variables) or CUPTI refuses the subscription, the
// tracer prints one warning and stays off; the program goes on with event timers only.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "nvtx.h"

namespace nb {

class Tracer {
 public:
  static Tracer& instance();

  // Returns active(). enabled=false (--no-cupti) turns it off silently.
  bool start(bool enabled);
  bool active() const { return active_; }
  // Why the last start(true) left the tracer off; "" when it is on or was never asked to start.
  const std::string& off_reason() const;
  // True when it stayed off because a profiler or sanitizer (nsys, ncu, compute-sanitizer)
  // holds CUPTI in this process — the expected case under those tools, not a failure.
  bool tool_present() const;
  void flush();   // deliver all buffered activity records (synchronizes the device first)
  void clear();   // flush, then forget everything recorded so far
  void stop();    // flush and unsubscribe

  // Summaries, sorted by total time descending: [{name, calls, total_ns, mean_ns, min_ns, max_ns}]
  // (kernels: also grid, block of the first call; ranges: also category).
  nlohmann::json kernel_summary() const;
  nlohmann::json memcpy_summary() const;  // by kind: HtoD, DtoH, DtoD, memset; with bytes
  nlohmann::json range_summary() const;
  // Writes {"traceEvents": [...]} atomically; at most max_events events (earliest kept), and
  // says in "otherData" how many were dropped. Kernels: one row (tid) per stream on the GPU
  // process; ranges: the host row. Returns the number of events written.
  size_t write_chrome_trace(const std::string& path, size_t max_events = 100000) const;

  uint64_t now_ns() const;  // on the activity records' clock (cuptiGetTimestamp) when active
  void record_range(Cat cat, const char* name, uint64_t start_ns, uint64_t end_ns);

 private:
  Tracer() = default;
  bool active_ = false;
};

}  // namespace nb
