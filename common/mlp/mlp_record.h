// common/mlp/mlp_record.h — the parts of an MLP run record that phase 4 and phase 5 fill the same
// way: the traced run and per-kernel efficiency from the tracer's summary,
// validation (ValidationResult: validate.h). (loss.per_step: nb::per_step_json of common/record.h.)
#pragma once
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device_info.h"
#include "mlp_common.h"
#include "record.h"
#include "reference.h"
#include "runner.h"
#include "tracer.h"
#include "validate.h"

namespace nb {
namespace mlp {

// The timed runs run without our CUPTI tracer (it adds ~2 us to every launch it watches: the
// tracer_overhead record); after them, one more training run, untimed, with the tracer on feeds the
// kernel/memcpy/range summaries (nb::timed_then_traced, common/runner.h). Its time, or nothing (and a
// note in rec saying why) when there was no traced run: after a diverged run, with --no-cupti, or
// when a profiler or sanitizer holds CUPTI.
inline std::optional<double> traced_run_ms(nlohmann::json& rec, const TimedRuns& runs, bool diverged, double ms) {
  if (runs.trace_runs > 0) {
    Tracer::instance().flush();
    return ms;
  }
  rec["notes"].push_back(diverged ? "no traced run after a diverged one: no kernel summary or efficiency"
                                  : "our CUPTI tracer was off: no kernel summary or efficiency");
  return std::nullopt;
}
// The record's account of it (after rec["timing"] is set): trace_runs, timing.traced (false: the
// timed runs ran without the tracer), timing.traced_run_ms (what the tracer costs, beside total_ms).
// What the traced run gives the record: timing.traced (false: the timed runs ran without our
// tracer), timing.traced_run_ms, trace_runs, and, from the tracer, the kernel/memcpy/range
// summaries and the Chrome trace (written when trace_path is set). Without a traced run the
// summaries stay as new_record left them and trace_file is null.
inline void traced_run_fields(nlohmann::json& rec, const std::optional<double>& traced_ms, const std::string& trace_path) {
  rec["timing"]["traced"] = false;
  rec["timing"]["traced_run_ms"] = traced_ms ? nlohmann::json(*traced_ms) : nlohmann::json(nullptr);
  rec["trace_runs"] = traced_ms ? 1 : 0;
  rec["trace_file"] = nullptr;
  if (!traced_ms) return;
  rec["notes"].push_back(
      "kernels/memcpy/ranges: from trace_runs extra untimed runs after the timed ones, with our CUPTI tracer on "
      "(the timed runs ran without it; timing.traced_run_ms is the traced run's time)");
  Tracer& tracer = Tracer::instance();
  rec["kernels"] = tracer.kernel_summary();
  rec["memcpy"] = tracer.memcpy_summary();
  rec["ranges"] = tracer.range_summary();
  if (!trace_path.empty()) {
    tracer.write_chrome_trace(trace_path);
    rec["trace_file"] = trace_path;
  }
}

// Efficiency of the kernels whose (demangled) name contains each tag: total flops and compulsory
// bytes counted on the host for the launches of the measured region, over the tracer's total time.
inline nlohmann::json efficiency_json(const nlohmann::json& kernels, const std::map<std::string, KernelCost>& costs,
                                      const Peaks* peaks) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [tag, c] : costs) {
    double ns = 0;
    int64_t calls = 0;
    std::string name;
    // A tag "!x" matches every kernel whose name does not contain x (e.g. "!nb::mlp::": cuBLASLt's).
    const bool negate = !tag.empty() && tag[0] == '!';
    const std::string needle = negate ? tag.substr(1) : tag;
    for (const auto& k : kernels) {
      const std::string n = k.value("name", "");
      if ((n.find(needle) != std::string::npos) != negate) {
        ns += k.value("total_ns", 0.0);
        calls += k.value("calls", int64_t{0});
        if (name.empty()) name = n;
      }
    }
    if (ns <= 0 || calls == 0) continue;
    nlohmann::json e = {{"kernel", name},
                        {"calls", calls},
                        {"calls_counted_on_host", c.calls},
                        {"bytes", c.bytes},
                        {"flops", c.flops},
                        {"total_ns", ns},
                        {"gbps", c.bytes / ns},
                        {"tflops", c.flops / ns / 1e3}};
    if (calls != c.calls) e["note"] = "tracer and host counted different numbers of calls";
    if (peaks && peaks->copy_gbps > 0) e["pct_copy_peak"] = 100.0 * (c.bytes / ns) / peaks->copy_gbps;
    if (peaks && peaks->fp16_tflops > 0) e["pct_tensor_peak"] = 100.0 * (c.flops / ns / 1e3) / peaks->fp16_tflops;
    out[negate ? "not " + needle : tag] = e;
  }
  return out;
}

inline nlohmann::json software_json(const DeviceInfo& dev) {
  nlohmann::json s;
  s["compiler"] = "nvcc " + std::to_string(__CUDACC_VER_MAJOR__) + "." + std::to_string(__CUDACC_VER_MINOR__) + "." +
                  std::to_string(__CUDACC_VER_BUILD__);
  s["cuda_runtime"] = dev.runtime_version;
  s["driver"] = dev.driver_version;
  return s;
}

// A GEMM's flops and compulsory bytes (operands read once, fp32 result written once).
inline void add_gemm_cost(std::map<std::string, KernelCost>& costs, const std::string& tag, double M, double N,
                          double K, double operand_bytes, double extra_bytes = 0) {
  KernelCost& c = costs[tag];
  c.flops += 2.0 * M * N * K;
  c.bytes += (M * K + K * N) * operand_bytes + M * N * 4.0 + extra_bytes;
  c.calls += 1;
}

// What --validate checks for these options (common/mlp/validate.h).
inline ValidateSpec validate_spec(const MlpOptions& o) {
  return ValidateSpec{o.layers, o.batch, o.precision == "fp16", o.adam(), o.lr};
}

inline MlpParams to_reference(const HostParams& h) {
  MlpParams p;
  p.layers = h.layers;
  for (size_t l = 0; l < h.W.size(); ++l) {
    p.W.push_back(to_double(h.W[l]));
    p.b.push_back(to_double(h.b[l]));
  }
  return p;
}

}  // namespace mlp
}  // namespace nb
