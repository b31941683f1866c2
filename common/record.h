// common/record.h — run records: one JSON document per run, the contract between the phases,
// the PyTorch twins and the report. The schema (version kSchemaVersion) is documented in
// profiles/README.md; change both together and bump the version.
//
//   nlohmann::json rec = nb::new_record("phase1_naive", "linreg", "cuda", cli);
//   rec["device"] = nb::to_json(dev);
//   rec["timing"] = nb::timing_json("cuda-events", includes, excludes, warmup, stats, per_epoch_ms);
//   ...
//   std::string path = nb::write_record(rec, common.out, dev.slug, "phase1_naive", common.tag);
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "stats.h"

namespace nb {

constexpr int kSchemaVersion = 1;

// Fills schema, schema_version, phase, workload, implementation, config (cli.values()),
// git {commit, dirty} (from `git` when available, else "unknown"), utc_time (ISO 8601 Z),
// host {hostname, compiler}, status "ok", notes [], run_mode ("quick" when NB_RUN_MODE=quick, else
// "full": the report prefers a full run's record where both fill one slot).
nlohmann::json new_record(const std::string& phase, const std::string& workload, const std::string& implementation,
                          const Cli& cli);

// "quick" when the environment variable NB_RUN_MODE is "quick" (scripts/run_all.sh's quick notebook), else "full".
std::string run_mode_from_env();

// {"method", "includes", "excludes", "warmup", "repeats", "total_ms": {min, median, max, mean,
//  samples}, "per_epoch_ms": [...]} — per_epoch_ms may be empty.
nlohmann::json timing_json(const std::string& method, const std::string& includes, const std::string& excludes,
                           int warmup, const Stats& total_ms, const std::vector<double>& per_epoch_ms = {});
nlohmann::json to_json(const Stats& s);

// Checks the fields every record must have (schema, schema_version, phase, workload,
// implementation, config, device.name, utc_time, timing.method, status). Returns "" if valid,
// else a one-line description of the first problem.
std::string validate_record(const nlohmann::json& rec);

// Directory: out_dir if non-empty, else "profiles/<device_slug>". Creates it (with parents).
// File: <dir>/<phase>__<tag>.json, written to a temporary file in the same directory, fsync'd,
// then renamed over the target, so a reader never sees a partial record. Throws
// Error(kExitOutput, "<path>: <reason>") when the directory or file cannot be written.
// Returns the final path.
std::string write_record(const nlohmann::json& rec, const std::string& out_dir, const std::string& device_slug,
                         const std::string& phase, const std::string& tag);

// Called right after parsing, before data, device or training: proves the record directory can
// be written, so a bad --out fails in a second with exit 6 rather than after the run. Creates
// out_dir (or ./profiles when out_dir is empty: the device folder inside it is made at write time)
// with parents, then creates and removes one temporary file there. Throws
// Error(kExitOutput, "<dir>: <reason>"). Leaves at most the (empty) directory behind.
void check_output_dir(const std::string& out_dir);

// Atomic write of any text file (same temp+rename scheme). Throws Error(kExitOutput, ...).
void write_file_atomic(const std::string& path, const std::string& contents);

// A fingerprint of final parameters for run records: "fnv1a64:<16 hex digits>" over the float32
// values' bytes (little-endian, in the order given). Two runs with bit-identical parameters give
// the same string; the determinism check compares it.
std::string float_checksum(const std::vector<float>& values);

// JSON cannot hold NaN/inf: these become null, which the report reads as "not finite".
nlohmann::json finite_or_null(double v);
nlohmann::json finite_array(const std::vector<double>& v);
nlohmann::json finite_array(const std::vector<float>& v);

// loss.per_step of the MLP records (phases 4-5, the PyTorch and libtorch twins write the same shape):
//   {"every": 100, "reduce": "mean", "first_exact": [losses of steps 0..19],
//    "values": [mean of steps 0..99, mean of 100..199, ...]}  (the last window may be shorter)
// so the first 20 steps can be compared exactly and the rest as 100-step means.
constexpr int kLossExactSteps = 20;
constexpr int kLossWindow = 100;
nlohmann::json per_step_json(const std::vector<float>& losses);

}  // namespace nb
