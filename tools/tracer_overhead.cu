// tools/tracer_overhead.cu — what does our CUPTI tracer cost? (the goal: <= 5%)
//
// The worst case for an activity tracer is many tiny kernels: each launch produces one record
// and costs the driver some bookkeeping, while the work per launch is close to nothing. So the
// measured loop is 1,000 back-to-back launches of a one-block kernel, timed with CUDA events
// around the whole loop (the span includes the launch gaps, which is where tracing costs show).
// For scale, the same loop also runs with a ~10 µs kernel (a clock64 spin), closer to what the
// phases launch.
//
// Order matters: once CUPTI has been enabled in a process, the driver keeps part of its
// instrumentation after the tracer stops, so "off" must be measured before the first start().
//   off A, off B (both before CUPTI was ever enabled; their difference is the run-to-run drift)
//   on           (tracer active; it must see every measured launch: this tool's validation)
//   after stop   (tracer stopped again; reported to show what lingers)
// Each block: --warmup loops, then --repeats measured loops; medians.
//   overhead % = 100 * (median(on) / median(off A and B) - 1)     (tiny kernel = the headline)
//
// Measured (NVIDIA H100 80GB HBM3, profiles/nvidia-h100-80gb-hbm3/tracer_overhead__default.json):
// tiny kernel (1.03 us) +26.7%, i.e. +1.17 us per launch on a launch-bound loop of 4.38 us per
// launch — the 5% goal is NOT met in this worst case; ~11 us kernel +1.5% (met). After stop()
// the tiny loop stays +25.5% slower: the driver keeps CUPTI's instrumentation for the process.
//
//   build/tools/tracer_overhead [--launches 1000] [--repeats 21] [--warmup 3] [--out DIR]
// writes profiles/<device-slug>/tracer_overhead__<tag>.json.
#include <cstdio>
#include <string>
#include <vector>

#include "check.cuh"
#include "cli.h"
#include "device_info.h"
#include "errors.h"
#include "record.h"
#include "stats.h"
#include "timing.cuh"
#include "tracer.h"

namespace {

__global__ void tiny_kernel(float* p) { p[threadIdx.x] += 1.0f; }

__global__ void spin_kernel(float* p, long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  p[threadIdx.x] += 1.0f;
}

struct Block {
  std::vector<double> event_ms, host_ms;  // per measured loop: device span, host enqueue time
};

// warmup + repeats loops of `launches` launches; only the measured loops are returned.
// spin_cycles == 0: the tiny kernel; else the spin kernel.
Block run_block(float* d, int launches, long long spin_cycles, int warmup, int repeats, nb::Tracer* clear_after_warmup) {
  nb::EventTimer timer;
  Block b;
  for (int r = 0; r < warmup + repeats; ++r) {
    if (r == warmup && clear_after_warmup) clear_after_warmup->clear();
    nb::HostTimer host;
    timer.start();
    for (int i = 0; i < launches; ++i) {
      if (spin_cycles == 0) tiny_kernel<<<1, 32>>>(d);
      else spin_kernel<<<1, 32>>>(d, spin_cycles);
      CHECK_LAUNCH();
    }
    timer.stop();
    const double enqueue_ms = host.elapsed_ms();
    const double ms = timer.elapsed_ms();
    if (r >= warmup) {
      b.event_ms.push_back(ms);
      b.host_ms.push_back(enqueue_ms);
    }
  }
  return b;
}

std::vector<double> concat(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> v = a;
  v.insert(v.end(), b.begin(), b.end());
  return v;
}

long long traced_calls(const nlohmann::json& kernels, const char* name) {
  for (const auto& k : kernels)
    if (k["name"] == name) return k["calls"].get<long long>();
  return 0;
}

int run(int argc, char** argv) {
  nb::Cli cli("tracer_overhead", "Cost of our CUPTI tracer on 1,000 back-to-back launches of a tiny kernel.");
  int launches = 1000;
  cli.add_int("--launches", &launches, "kernel launches per timed loop", 1, 1000000);
  double spin_us = 10.0;
  cli.add_double("--spin-us", &spin_us, "length of the second, longer kernel in microseconds (at the SM clock)",
                 true, 0.0, 10000.0);
  nb::CommonOptions common;
  common.repeats = 21;
  common.warmup = 3;
  cli.add_common(&common);
  if (!cli.parse(argc, argv)) return nb::kExitOk;
  if (common.no_cupti) throw nb::Error(nb::kExitUsage, "--no-cupti: this tool measures the tracer; nothing to do without it");

  nb::check_output_dir(common.out);  // before the device: an unwritable --out wastes no run
  const nb::DeviceInfo dev = nb::require_device();
  const long long spin_cycles = static_cast<long long>(spin_us * dev.sm_clock_khz / 1000.0);
  float* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, 32 * sizeof(float)));
  CUDA_CHECK(cudaMemset(d, 0, 32 * sizeof(float)));
  const int W = common.warmup, R = common.repeats;

  nb::Tracer& tr = nb::Tracer::instance();
  // off A, off B: CUPTI never enabled in this process yet
  const Block tiny_a = run_block(d, launches, 0, W, R, nullptr), spin_a = run_block(d, launches, spin_cycles, W, R, nullptr);
  const Block tiny_b = run_block(d, launches, 0, W, R, nullptr), spin_b = run_block(d, launches, spin_cycles, W, R, nullptr);
  if (!tr.start(true))
    throw nb::Error(nb::kExitCuda, "cannot measure the tracer's overhead: CUPTI tracer off: " + tr.off_reason());
  const Block tiny_on = run_block(d, launches, 0, W, R, &tr);
  tr.flush();
  const nlohmann::json kernels_tiny = tr.kernel_summary();
  const Block spin_on = run_block(d, launches, spin_cycles, W, R, &tr);
  tr.flush();
  const nlohmann::json kernels_spin = tr.kernel_summary();
  tr.stop();
  const Block tiny_after = run_block(d, launches, 0, W, R, nullptr);

  // Validation: every measured launch was traced, and every launch really ran.
  const long long expected = static_cast<long long>(launches) * R;
  const long long traced_tiny = traced_calls(kernels_tiny, "tiny_kernel");
  const long long traced_spin = traced_calls(kernels_spin, "spin_kernel");
  float h0 = 0;
  CUDA_CHECK(cudaMemcpy(&h0, d, sizeof h0, cudaMemcpyDeviceToHost));
  const double ran_expected = 7.0 * (W + R) * launches;  // 7 blocks: tiny A, B, on, after; spin A, B, on
  CUDA_CHECK(cudaFree(d));
  const bool ok = traced_tiny == expected && traced_spin == expected && static_cast<double>(h0) == ran_expected;

  auto variant = [&](const char* name, const Block& a, const Block& b, const Block& on, const nlohmann::json& ks) {
    const nb::Stats off = nb::summarize(concat(a.event_ms, b.event_ms)), s_on = nb::summarize(on.event_ms);
    const nb::Stats sa = nb::summarize(a.event_ms), sb = nb::summarize(b.event_ms);
    const nb::Stats h_off = nb::summarize(concat(a.host_ms, b.host_ms)), h_on = nb::summarize(on.host_ms);
    double kernel_mean_ns = 0;
    for (const auto& k : ks)
      if (k["name"] == name) kernel_mean_ns = k["mean_ns"].get<double>();
    return nlohmann::json{{"kernel", name},
                          {"kernel_mean_us_traced", kernel_mean_ns / 1000.0},
                          {"off_ms", nb::to_json(off)},
                          {"on_ms", nb::to_json(s_on)},
                          {"off_a_vs_b_drift_pct", 100.0 * (sb.median / sa.median - 1.0)},
                          {"overhead_pct", 100.0 * (s_on.median / off.median - 1.0)},
                          {"per_launch_us_off", 1000.0 * off.median / launches},
                          {"per_launch_us_on", 1000.0 * s_on.median / launches},
                          {"host_enqueue_ms_off", nb::to_json(h_off)},
                          {"host_enqueue_ms_on", nb::to_json(h_on)},
                          {"host_enqueue_overhead_pct", 100.0 * (h_on.median / h_off.median - 1.0)}};
  };
  const nlohmann::json v_tiny = variant("tiny_kernel", tiny_a, tiny_b, tiny_on, kernels_tiny);
  const nlohmann::json v_spin = variant("spin_kernel", spin_a, spin_b, spin_on, kernels_spin);
  const double overhead_pct = v_tiny["overhead_pct"].get<double>();
  const nb::Stats after = nb::summarize(tiny_after.event_ms);
  const double after_pct = 100.0 * (after.median / v_tiny["off_ms"]["median"].get<double>() - 1.0);
  const double goal_pct = 5.0;

  nlohmann::json rec = nb::new_record("tracer_overhead", "tracer_overhead", "cuda", cli);
  rec["device"] = nb::to_json(dev);
  rec["timing"] = nb::timing_json(
      "cuda-events",
      std::to_string(launches) + " back-to-back launches of a 1-block, 32-thread tiny kernel on the default stream, "
                                 "tracer on (events around the whole loop)",
      "tracer start/stop and flush; warm-up loops", W, nb::summarize(tiny_on.event_ms));
  rec["timing"]["repeats"] = R;
  rec["metrics"] = {{"overhead_pct", overhead_pct},
                    {"goal_pct", goal_pct},
                    {"meets_goal", overhead_pct <= goal_pct},
                    {"launches", launches},
                    {"per_launch_us_off", v_tiny["per_launch_us_off"]},
                    {"per_launch_us_on", v_tiny["per_launch_us_on"]},
                    {"added_us_per_launch",
                     v_tiny["per_launch_us_on"].get<double>() - v_tiny["per_launch_us_off"].get<double>()},
                    {"spin_kernel_overhead_pct", v_spin["overhead_pct"]},
                    {"after_stop_ms", nb::to_json(after)},
                    {"after_stop_vs_off_pct", after_pct},
                    {"variants", {v_tiny, v_spin}}};
  rec["validation"] = {{"performed", true},
                       {"passed", ok},
                       {"errors",
                        {{"traced_tiny_launches", traced_tiny},
                         {"traced_spin_launches", traced_spin},
                         {"expected_traced_launches", expected},
                         {"device_counter", h0},
                         {"expected_device_counter", ran_expected}}},
                       {"tolerances", {{"traced_launches", "exact"}, {"device_counter", "exact"}}}};
  rec["kernels"] = kernels_tiny;  // the measured loops of both kernels (each block cleared after its warm-up)
  for (const auto& k : kernels_spin) rec["kernels"].push_back(k);
  rec["memcpy"] = nlohmann::json::array();
  rec["ranges"] = nlohmann::json::array();
  rec["trace_file"] = nullptr;
  if (!common.trace.empty()) {
    tr.write_chrome_trace(common.trace);
    rec["trace_file"] = common.trace;
  }
  rec["notes"].push_back("off blocks A and B run before CUPTI is first enabled; 'after_stop' shows what lingers "
                         "in the driver once the tracer has been on");
  if (overhead_pct > goal_pct)
    rec["notes"].push_back("tracer overhead " + std::to_string(overhead_pct) +
                           "% exceeds the 5% goal on this worst case (tiny kernels, launch-bound)");
  if (!ok) rec["status"] = "validation_failed";
  const std::string path = nb::write_record(rec, common.out, dev.slug, "tracer_overhead", common.tag);

  for (const nlohmann::json* v : {&v_tiny, &v_spin})
    std::printf("%-12s (%.2f us traced): off %.3f ms, on %.3f ms per %d launches: overhead %+.1f%% "
                "(%+.2f us/launch); off A->B drift %+.1f%%; host enqueue %+.1f%%\n",
                (*v)["kernel"].get<std::string>().c_str(), (*v)["kernel_mean_us_traced"].get<double>(),
                (*v)["off_ms"]["median"].get<double>(), (*v)["on_ms"]["median"].get<double>(), launches,
                (*v)["overhead_pct"].get<double>(),
                (*v)["per_launch_us_on"].get<double>() - (*v)["per_launch_us_off"].get<double>(),
                (*v)["off_a_vs_b_drift_pct"].get<double>(), (*v)["host_enqueue_overhead_pct"].get<double>());
  std::printf("%s: tracer overhead %.1f%% on the tiny-kernel loop (goal <= %.0f%%); after stop %+.1f%%; "
              "traced %lld + %lld of %lld each\nrecord: %s\n",
              dev.name.c_str(), overhead_pct, goal_pct, after_pct, traced_tiny, traced_spin, expected, path.c_str());
  return ok ? nb::kExitOk : nb::kExitValidation;
}

}  // namespace

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, run); }
