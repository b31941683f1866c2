// common/tracer.cu — our own CUPTI activity tracer (see tracer.h for how a phase uses it).
//
// How it works, top-down:
//  1. start(): refuse politely when a profiler or sanitizer is attached (their environment
//     variables, or CUPTI refusing a second subscriber), else subscribe (to claim CUPTI, no
//     callbacks enabled), register the two buffer callbacks and enable the activity kinds
//     CONCURRENT_KERNEL (does not serialize kernels), MEMCPY and MEMSET.
//  2. CUPTI fills 8 MiB buffers with activity records on its own schedule and hands each full
//     buffer to buffer_completed(), possibly on its own thread; flush() forces the hand-over.
//  3. buffer_completed() folds every record into per-name aggregates (calls, total, min, max),
//     and keeps the first kRawCap records as raw events for the Chrome trace.
//  4. NVTX ranges (nvtx.cu) report their own host start/end on cuptiGetTimestamp's clock, the
//     clock of the kernel records, through record_range().
// All state sits behind one mutex; every method is a no-op (and every summary an empty array)
// while the tracer is off, so phases that never call start() pay nothing.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "check.cuh"
#include "record.h"
#include "tracer.h"

extern char** environ;

namespace nb {

namespace {

constexpr size_t kBufferBytes = 8u << 20;   // one CUPTI activity buffer
constexpr size_t kRawCap = 200000;          // raw events kept for the Chrome trace (~11 MB)

enum class EvType : uint8_t { Kernel, Memcpy, Memset, Range };

struct RawEvent {
  uint64_t start = 0, end = 0;
  uint64_t bytes = 0;
  uint32_t name_id = 0;  // index into Impl::names
  uint32_t stream = 0;
  EvType type = EvType::Kernel;
  uint8_t cat = 0;
  std::array<int32_t, 3> grid{}, block{};
};

struct Agg {
  uint64_t calls = 0, total = 0, min = UINT64_MAX, max = 0, bytes = 0;
  void add(uint64_t dur, uint64_t nbytes = 0) {
    ++calls;
    total += dur;
    min = std::min(min, dur);
    max = std::max(max, dur);
    bytes += nbytes;
  }
};

struct KernelAgg : Agg {
  std::array<int32_t, 3> grid{}, block{};
  uint32_t stream = 0;
};

struct Impl {
  std::mutex mu;
  CUpti_SubscriberHandle subscriber = nullptr;
  bool callbacks_registered = false;
  bool warned = false;
  bool tool_present = false;
  std::string off_reason;
  std::vector<CUpti_ActivityKind> enabled_kinds;
  // recorded data
  std::map<std::string, KernelAgg> kernels;
  std::map<std::string, Agg> memcpys;
  std::map<std::pair<std::string, int>, Agg> ranges;
  std::vector<std::string> names;
  std::map<std::string, uint32_t> name_ids;
  // CUPTI shares one name pointer among all records of a kernel: demangle each kernel once.
  std::unordered_map<const char*, std::string> short_names;
  std::vector<RawEvent> raw;
  uint64_t raw_dropped = 0;    // events beyond kRawCap
  uint64_t cupti_dropped = 0;  // records CUPTI itself lost (buffers full)

  uint32_t intern(const std::string& s) {
    auto it = name_ids.find(s);
    if (it != name_ids.end()) return it->second;
    uint32_t id = static_cast<uint32_t>(names.size());
    names.push_back(s);
    name_ids.emplace(s, id);
    return id;
  }
  void keep(const RawEvent& e) {
    if (raw.size() < kRawCap) raw.push_back(e);
    else ++raw_dropped;
  }
  void forget() {
    kernels.clear();
    memcpys.clear();
    ranges.clear();
    names.clear();
    name_ids.clear();
    short_names.clear();
    raw.clear();
    raw.shrink_to_fit();
    raw_dropped = cupti_dropped = 0;
  }
};

Impl& impl() {
  static Impl* p = new Impl();  // never destroyed: CUPTI may call back during process exit
  return *p;
}

// "_Z11spin_kernelPyy" -> "spin_kernel"; "void nb::(anonymous namespace)::axpy<float>(float*, int)"
// -> "nb::axpy<float>". Template arguments stay (they tell fp32 from fp16 variants).
std::string short_kernel_name(const char* mangled) {
  if (!mangled) return "(unknown kernel)";
  int status = 0;
  char* dem = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = (status == 0 && dem) ? dem : mangled;
  std::free(dem);
  // drop the parameter list: the last balanced "(...)" at the end
  if (!s.empty() && s.back() == ')') {
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      else if (s[i] == '(' && --depth == 0) {
        s.erase(i);
        break;
      }
    }
  }
  // drop a leading return type ("void ") that templates carry
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  const std::string anon = "(anonymous namespace)::";
  for (size_t pos; (pos = s.find(anon)) != std::string::npos;) s.erase(pos, anon.size());
  if (s.size() > 160) s = s.substr(0, 157) + "...";
  return s;
}

const char* memcpy_kind_name(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    default: return "other";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t /*size*/,
                               size_t valid_size) {
  Impl& im = impl();
  {
    std::lock_guard<std::mutex> lock(im.mu);
    CUpti_Activity* rec = nullptr;
    while (valid_size > 0 && cuptiActivityGetNextRecord(buffer, valid_size, &rec) == CUPTI_SUCCESS) {
      RawEvent e;
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
          auto cached = im.short_names.find(k->name);
          if (cached == im.short_names.end()) cached = im.short_names.emplace(k->name, short_kernel_name(k->name)).first;
          const std::string& name = cached->second;
          e.type = EvType::Kernel;
          e.start = k->start;
          e.end = k->end;
          e.stream = k->streamId;
          e.grid = {k->gridX, k->gridY, k->gridZ};
          e.block = {k->blockX, k->blockY, k->blockZ};
          e.name_id = im.intern(name);
          KernelAgg& a = im.kernels[name];
          if (a.calls == 0) {
            a.grid = e.grid;
            a.block = e.block;
            a.stream = e.stream;
          }
          a.add(e.end > e.start ? e.end - e.start : 0);
          im.keep(e);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
          const char* kind = memcpy_kind_name(m->copyKind);
          e.type = EvType::Memcpy;
          e.start = m->start;
          e.end = m->end;
          e.stream = m->streamId;
          e.bytes = m->bytes;
          e.name_id = im.intern(std::string("memcpy ") + kind);
          im.memcpys[kind].add(e.end > e.start ? e.end - e.start : 0, m->bytes);
          im.keep(e);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
          e.type = EvType::Memset;
          e.start = m->start;
          e.end = m->end;
          e.stream = m->streamId;
          e.bytes = m->bytes;
          e.name_id = im.intern("memset");
          im.memcpys["memset"].add(e.end > e.start ? e.end - e.start : 0, m->bytes);
          im.keep(e);
          break;
        }
        default: break;
      }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS) im.cupti_dropped += dropped;
  }
  std::free(buffer);
}

// Claims CUPTI without asking for any callback; fails when nsys/ncu/compute-sanitizer hold it.
void CUPTIAPI no_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

std::string cupti_error(const char* call, CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return std::string(call) + ": " + (s ? s : "unknown CUptiResult");
}

// A profiler or sanitizer announces itself in the environment of the program it runs.
std::string tool_env_var() {
  for (const char* exact : {"CUDA_INJECTION64_PATH", "NSYS_PROFILING_SESSION_ID", "NV_COMPUTE_PROFILER_PERFWORKS_DIR"})
    if (std::getenv(exact)) return exact;
  for (char** e = environ; e && *e; ++e)
    for (const char* prefix : {"NV_SANITIZER", "COMPUTE_SANITIZER"})
      if (std::strncmp(*e, prefix, std::strlen(prefix)) == 0) return std::string(*e).substr(0, std::string(*e).find('='));
  return "";
}

uint64_t steady_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

nlohmann::json agg_fields(const Agg& a) {
  return {{"calls", a.calls},
          {"total_ns", a.total},
          {"mean_ns", a.calls ? static_cast<double>(a.total) / static_cast<double>(a.calls) : 0.0},
          {"min_ns", a.calls ? a.min : 0},
          {"max_ns", a.max}};
}

nlohmann::json sorted_by_total(std::vector<nlohmann::json> rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["total_ns"].get<uint64_t>() > b["total_ns"].get<uint64_t>();
  });
  nlohmann::json out = nlohmann::json::array();
  for (auto& r : rows) out.push_back(std::move(r));
  return out;
}

}  // namespace

Tracer& Tracer::instance() {
  static Tracer t;
  return t;
}

const std::string& Tracer::off_reason() const { return impl().off_reason; }
bool Tracer::tool_present() const { return impl().tool_present; }

bool Tracer::start(bool enabled) {
  if (active_) return true;
  Impl& im = impl();
  if (!enabled) return false;  // --no-cupti: silent
  im.tool_present = false;
  auto refuse = [&](const std::string& reason, bool tool) {
    im.off_reason = reason;
    im.tool_present = tool;
    if (!im.warned) {
      std::fprintf(stderr, "warning: CUPTI tracer off: %s; timing with CUDA events only\n", reason.c_str());
      im.warned = true;
    }
    return false;
  };
  std::string var = tool_env_var();
  if (!var.empty()) return refuse("running under a profiler or sanitizer (" + var + " is set)", true);

  CUptiResult r = cuptiSubscribe(&im.subscriber, no_callback, nullptr);
  if (r != CUPTI_SUCCESS) {
    im.subscriber = nullptr;
    bool tool = (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
    return refuse(std::string(tool ? "another CUPTI client (nsys, ncu or compute-sanitizer) holds this process: " : "") +
                      cupti_error("cuptiSubscribe", r),
                  tool);
  }
  auto undo = [&] {
    for (CUpti_ActivityKind k : im.enabled_kinds) cuptiActivityDisable(k);
    im.enabled_kinds.clear();
    cuptiUnsubscribe(im.subscriber);
    im.subscriber = nullptr;
  };
  if (!im.callbacks_registered) {
    r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
      undo();
      return refuse(cupti_error("cuptiActivityRegisterCallbacks", r), false);
    }
    im.callbacks_registered = true;
  }
  for (CUpti_ActivityKind k :
       {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET}) {
    r = cuptiActivityEnable(k);
    if (r != CUPTI_SUCCESS) {
      undo();
      return refuse(cupti_error("cuptiActivityEnable", r), r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
    }
    im.enabled_kinds.push_back(k);
  }
  im.off_reason.clear();
  active_ = true;
  return true;
}

void Tracer::flush() {
  if (!active_) return;
  CUDA_CHECK(cudaDeviceSynchronize());
  CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
}

void Tracer::clear() {
  if (!active_) return;
  flush();
  Impl& im = impl();
  std::lock_guard<std::mutex> lock(im.mu);
  im.forget();
}

void Tracer::stop() {
  if (!active_) return;
  flush();
  Impl& im = impl();
  for (CUpti_ActivityKind k : im.enabled_kinds) cuptiActivityDisable(k);
  im.enabled_kinds.clear();
  CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  cuptiUnsubscribe(im.subscriber);
  im.subscriber = nullptr;
  active_ = false;  // what was recorded stays readable
}

uint64_t Tracer::now_ns() const {
  if (active_) {
    uint64_t t = 0;
    if (cuptiGetTimestamp(&t) == CUPTI_SUCCESS) return t;
  }
  return steady_ns();
}

void Tracer::record_range(Cat cat, const char* name, uint64_t start_ns, uint64_t end_ns) {
  if (!active_ || !name) return;
  Impl& im = impl();
  std::lock_guard<std::mutex> lock(im.mu);
  RawEvent e;
  e.type = EvType::Range;
  e.start = start_ns;
  e.end = end_ns;
  e.cat = static_cast<uint8_t>(cat);
  e.name_id = im.intern(name);
  im.ranges[{name, static_cast<int>(cat)}].add(end_ns > start_ns ? end_ns - start_ns : 0);
  im.keep(e);
}

nlohmann::json Tracer::kernel_summary() const {
  Impl& im = impl();
  std::lock_guard<std::mutex> lock(im.mu);
  std::vector<nlohmann::json> rows;
  for (const auto& [name, a] : im.kernels) {
    nlohmann::json j = {{"name", name}};
    j.update(agg_fields(a));
    j["grid"] = a.grid;
    j["block"] = a.block;
    j["stream"] = a.stream;
    rows.push_back(std::move(j));
  }
  return sorted_by_total(std::move(rows));
}

nlohmann::json Tracer::memcpy_summary() const {
  Impl& im = impl();
  std::lock_guard<std::mutex> lock(im.mu);
  std::vector<nlohmann::json> rows;
  for (const auto& [kind, a] : im.memcpys) {
    nlohmann::json j = {{"kind", kind}};
    j.update(agg_fields(a));
    j["bytes"] = a.bytes;
    rows.push_back(std::move(j));
  }
  return sorted_by_total(std::move(rows));
}

nlohmann::json Tracer::range_summary() const {
  Impl& im = impl();
  std::lock_guard<std::mutex> lock(im.mu);
  std::vector<nlohmann::json> rows;
  for (const auto& [key, a] : im.ranges) {
    nlohmann::json j = {{"name", key.first}, {"category", cat_name(static_cast<Cat>(key.second))}};
    j.update(agg_fields(a));
    rows.push_back(std::move(j));
  }
  return sorted_by_total(std::move(rows));
}

// Chrome trace-event format: complete events ("ph":"X") with ts/dur in microseconds, relative to
// the earliest kept event. pid 1 = "GPU" with one thread row per CUDA stream; pid 2 = "host"
// with the NVTX ranges on one row. Metadata events ("ph":"M") give the rows their names.
size_t Tracer::write_chrome_trace(const std::string& path, size_t max_events) const {
  Impl& im = impl();
  std::vector<RawEvent> evs;
  std::vector<std::string> names;
  uint64_t dropped_before = 0, cupti_dropped = 0;
  {
    std::lock_guard<std::mutex> lock(im.mu);
    evs = im.raw;
    names = im.names;
    dropped_before = im.raw_dropped;
    cupti_dropped = im.cupti_dropped;
  }
  std::stable_sort(evs.begin(), evs.end(), [](const RawEvent& a, const RawEvent& b) { return a.start < b.start; });
  uint64_t dropped = dropped_before;
  if (evs.size() > max_events) {
    dropped += evs.size() - max_events;
    evs.resize(max_events);
  }
  const uint64_t t0 = evs.empty() ? 0 : evs.front().start;
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  constexpr int kGpuPid = 1, kHostPid = 2, kRangeTid = 1;

  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", kGpuPid}, {"tid", 0}, {"args", {{"name", "GPU"}}}});
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", kHostPid}, {"tid", 0}, {"args", {{"name", "host"}}}});
  events.push_back({{"name", "thread_name"},
                    {"ph", "M"},
                    {"pid", kHostPid},
                    {"tid", kRangeTid},
                    {"args", {{"name", "NVTX ranges"}}}});
  std::vector<uint32_t> streams;
  for (const RawEvent& e : evs)
    if (e.type != EvType::Range && std::find(streams.begin(), streams.end(), e.stream) == streams.end())
      streams.push_back(e.stream);
  std::sort(streams.begin(), streams.end());
  for (uint32_t s : streams)
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", kGpuPid},
                      {"tid", s},
                      {"args", {{"name", "stream " + std::to_string(s)}}}});

  for (const RawEvent& e : evs) {
    nlohmann::json j = {{"name", names[e.name_id]},
                        {"ph", "X"},
                        {"ts", us(e.start - t0)},
                        {"dur", us(e.end > e.start ? e.end - e.start : 0)}};
    switch (e.type) {
      case EvType::Kernel:
        j["cat"] = "kernel";
        j["pid"] = kGpuPid;
        j["tid"] = e.stream;
        j["args"] = {{"grid", e.grid}, {"block", e.block}};
        break;
      case EvType::Memcpy:
      case EvType::Memset:
        j["cat"] = e.type == EvType::Memcpy ? "memcpy" : "memset";
        j["pid"] = kGpuPid;
        j["tid"] = e.stream;
        j["args"] = {{"bytes", e.bytes}};
        break;
      case EvType::Range:
        j["cat"] = cat_name(static_cast<Cat>(e.cat));
        j["pid"] = kHostPid;
        j["tid"] = kRangeTid;
        break;
    }
    events.push_back(std::move(j));
  }
  nlohmann::json doc = {
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ns"},
      {"otherData",
       {{"producer", "cuda-notebook CUPTI tracer (common/tracer.cu)"},
        {"clock", "cuptiGetTimestamp ns; ts/dur in microseconds relative to t0_ns"},
        {"t0_ns", t0},
        {"events_written", evs.size()},
        {"events_dropped", dropped},
        {"cupti_records_dropped", cupti_dropped},
        {"tracer_active", active_}}}};
  write_file_atomic(path, doc.dump());
  return evs.size();
}

}  // namespace nb
