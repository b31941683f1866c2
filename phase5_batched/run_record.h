// phase5_batched/run_record.h — the rung's part of phase 5's run record: a one-launch rung's
// metrics object (its plan, from the rung's descriptor) and, with --breakdown, block 0's cycles
// per part of a step as shares of the median step (printed as a table too). The graph step has
// none; its fields (GEMM plan, backward, PDL) are written by main.cu.
#pragma once
#include <cstdint>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "p5_options.h"
#include "rungs.h"

namespace nb {
namespace {

// --breakdown of a one-launch kernel: block 0's cycles per part, as shares of the median step.
inline nlohmann::json breakdown_parts(const Rung& rung, const std::vector<unsigned long long>& cyc,
                                      int64_t measured_steps, double per_step_ms) {
  nlohmann::json parts = nlohmann::json::array();
  double sum = 0;
  for (unsigned long long c : cyc) sum += static_cast<double>(c);
  std::printf("%s step breakdown (block 0, thread 0; share of its cycles):\n", rung.name);
  for (int i = 0; i < rung.segments; ++i) {
    const double share = sum > 0 ? cyc[i] / sum : 0.0;
    parts.push_back({{"part", rung.segment_name(i)},
                     {"cycles_per_step", measured_steps > 0 ? cyc[i] / static_cast<double>(measured_steps) : 0.0},
                     {"share", share},
                     {"us_per_step", share * per_step_ms * 1e3}});
    std::printf("  %5.1f%%  %6.2f us  %s\n", 100 * share, share * per_step_ms * 1e3, rung.segment_name(i));
  }
  return parts;
}

// A one-launch rung's fields in metrics: launches_per_step null (one launch per epoch, whatever the
// step count) and metrics[rung name] = its plan (and step_breakdown with --breakdown).
inline void rung_record_fields(nlohmann::json& metrics, const Rung& rung, const OneLaunchKernel& kernel,
                               const P5Options& o, const std::vector<unsigned long long>& breakdown_cycles,
                               int64_t measured_steps, double per_step_ms) {
  if (!rung.record) return;
  metrics["launches_per_step"] = nullptr;
  nlohmann::json parts;
  if (o.breakdown) parts = breakdown_parts(rung, breakdown_cycles, measured_steps, per_step_ms);
  metrics[rung.name] = rung.record(kernel, o);
  if (o.breakdown) metrics[rung.name]["step_breakdown"] = parts;
}

}  // namespace
}  // namespace nb
