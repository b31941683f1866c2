// tools/ceilings.cu — measure this GPU's two ceilings once and keep them in a run record.
//
// Every efficiency figure in the report ("phase 3 moves 71% of the copy ceiling", "the fp16
// MLP reaches 12% of the tensor-core ceiling") divides by these two numbers, measured here on
// the device itself rather than read off a datasheet:
//   copy_gbps   — device-to-device cudaMemcpy of 1 GiB, bytes read + written, median of 15
//   fp16_tflops — cuBLAS GEMM 8192³, fp16 inputs, fp32 accumulation, median of 20
// (details and the GEMM's correctness check in common/device_info.cu).
//
// Measured (NVIDIA H100 80GB HBM3, profiles/nvidia-h100-80gb-hbm3/ceilings__default.json):
// copy 2986 GB/s, fp16 GEMM 730 TFLOP/s (an earlier run on another H100 machine: 2965 and 755).
//
//   build/tools/ceilings [--out DIR] [--tag default]
// writes profiles/<device-slug>/ceilings__<tag>.json (phase "ceilings", workload "ceilings").
#include <cstdio>

#include "check.cuh"
#include "cli.h"
#include "device_info.h"
#include "errors.h"
#include "record.h"
#include "tracer.h"

namespace {

int run(int argc, char** argv) {
  nb::Cli cli("ceilings", "Measure the device-to-device copy bandwidth and fp16 tensor-core GEMM rate of this GPU.");
  nb::CommonOptions common;
  cli.add_common(&common);
  if (!cli.parse(argc, argv)) return nb::kExitOk;

  nb::check_output_dir(common.out);  // before the device: an unwritable --out wastes no run
  const nb::DeviceInfo dev = nb::require_device();
  nb::Tracer& tr = nb::Tracer::instance();
  tr.start(!common.no_cupti);  // only to name the kernels cuBLAS picked; off under nsys/ncu

  const nb::PeakDetail pd = nb::measure_peaks_detailed();
  tr.flush();

  nlohmann::json rec = nb::new_record("ceilings", "ceilings", "cuda", cli);
  rec["device"] = nb::to_json(dev);
  rec["peaks"] = nb::to_json(pd.peaks);
  rec["timing"] = nb::timing_json("cuda-events", "one device-to-device cudaMemcpyAsync of 1 GiB",
                                  "allocation, cuRAND fill; GEMM timings are under ceilings.gemm",
                                  pd.copy_warmup, pd.copy_ms);
  rec["timing"]["repeats"] = pd.copy_repeats;
  const double n = pd.gemm_n;
  rec["ceilings"] = {
      {"copy",
       {{"bytes", pd.copy_bytes},
        {"counted_bytes", 2 * pd.copy_bytes},
        {"warmup", pd.copy_warmup},
        {"repeats", pd.copy_repeats},
        {"ms", nb::to_json(pd.copy_ms)},
        {"gbps_median", pd.peaks.copy_gbps},
        {"gbps_best", 2.0 * double(pd.copy_bytes) / (pd.copy_ms.min * 1e-3) / 1e9}}},
      {"gemm",
       {{"m", pd.gemm_n},
        {"n", pd.gemm_n},
        {"k", pd.gemm_n},
        {"inputs", "fp16 (random normal, cuRAND Philox)"},
        {"accumulate", "fp32 (CUBLAS_COMPUTE_32F)"},
        {"output", "fp16"},
        {"api", "cublasGemmEx, CUBLAS_GEMM_DEFAULT"},
        {"flops", 2.0 * n * n * n},
        {"warmup", pd.gemm_warmup},
        {"repeats", pd.gemm_repeats},
        {"ms", nb::to_json(pd.gemm_ms)},
        {"tflops_median", pd.peaks.fp16_tflops},
        {"tflops_best", 2.0 * n * n * n / (pd.gemm_ms.min * 1e-3) / 1e12}}}};
  // fp16 output rounding alone gives ~3e-4 relative error on sums of 8192 products.
  const double tol = 2e-3;
  const bool ok = pd.gemm_rel_error <= tol;
  rec["validation"] = {{"performed", true},
                       {"passed", ok},
                       {"errors", {{"gemm_rel_l2_64_entries_vs_float64", pd.gemm_rel_error}}},
                       {"tolerances", {{"gemm_rel_l2_64_entries_vs_float64", tol}}}};
  rec["kernels"] = tr.kernel_summary();
  rec["memcpy"] = tr.memcpy_summary();
  rec["ranges"] = tr.range_summary();
  rec["trace_file"] = nullptr;
  if (!common.trace.empty() && tr.active()) {
    tr.write_chrome_trace(common.trace);
    rec["trace_file"] = common.trace;
  }
  if (!tr.active()) rec["notes"].push_back("CUPTI tracer off: " + (common.no_cupti ? std::string("--no-cupti") : tr.off_reason()));
  if (!ok) rec["status"] = "validation_failed";

  const std::string path = nb::write_record(rec, common.out, dev.slug, "ceilings", common.tag);
  std::printf("%s: copy %.0f GB/s (read+write, median of %d), fp16 GEMM %.1f TFLOP/s (median of %d), "
              "GEMM check rel. error %.2e\nrecord: %s\n",
              dev.name.c_str(), pd.peaks.copy_gbps, pd.copy_repeats, pd.peaks.fp16_tflops, pd.gemm_repeats,
              pd.gemm_rel_error, path.c_str());
  return ok ? nb::kExitOk : nb::kExitValidation;
}

}  // namespace

int main(int argc, char** argv) { return nb::guarded_main(argc, argv, run); }
