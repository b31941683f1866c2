// common/cli.h — one command-line parser for every phase.
//
//   nb::Cli cli("phase1_naive", "Linear regression, naive kernels.");
//   int64_t n = 5000000;  cli.add_int("--n", &n, "number of points", 1);
//   double lr = 0.01;     cli.add_double("--lr", &lr, "learning rate");       // finite, > 0
//   nb::CommonOptions common; cli.add_common(&common);
//   if (!cli.parse(argc, argv)) return 0;   // --help was printed
//   rec["config"] = cli.values();
//
// Flags are "--name value" or "--name=value"; booleans are bare "--name". Errors throw
// nb::Error(kExitUsage, "<flag>: <problem>"), e.g. "--n: expected an integer, got 'abc'",
// "--lr: must be finite and > 0, got nan", "--bogus: unknown flag (see --help)".
// --help lists every flag with its type, default and help text.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nb {

// Flags every phase shares (add_common registers them).
struct CommonOptions {
  uint64_t seed = 42;          // --seed
  bool validate = false;       // --validate: compare with the float64 reference, exit 1 on failure
  std::string out;             // --out DIR: record directory (default profiles/<device-slug>)
  std::string tag = "default"; // --tag: record file is <out>/<phase>__<tag>.json
  bool no_cupti = false;       // --no-cupti: our CUPTI tracer stays off
  std::string trace;           // --trace FILE: write our Chrome trace there
  int warmup = 1;              // --warmup: untimed runs before the measured ones
  int repeats = 1;             // --repeats: measured runs (median reported)
  bool deterministic = false;  // --deterministic: no order-dependent float atomics
  bool measure_peaks = false;  // --measure-peaks: copy GB/s and fp16 TFLOP/s into the record
};

class Cli {
 public:
  Cli(std::string program, std::string description);

  // Integers: value must lie in [min, max]. Doubles: must be finite and in [min, max]; with
  // positive=true also > 0 (the default, for rates). Strings: if choices is non-empty the value
  // must be one of them. Int lists: comma separated, each in [min, max], non-empty.
  void add_int(const std::string& name, int64_t* target, const std::string& help, int64_t min = 1,
               int64_t max = std::numeric_limits<int64_t>::max());
  void add_int(const std::string& name, int* target, const std::string& help, int64_t min = 1,
               int64_t max = std::numeric_limits<int>::max());
  void add_uint64(const std::string& name, uint64_t* target, const std::string& help);
  void add_double(const std::string& name, double* target, const std::string& help, bool positive = true,
                  double min = -std::numeric_limits<double>::max(),
                  double max = std::numeric_limits<double>::max());
  void add_string(const std::string& name, std::string* target, const std::string& help,
                  std::vector<std::string> choices = {});
  void add_flag(const std::string& name, bool* target, const std::string& help);
  void add_int_list(const std::string& name, std::vector<int>* target, const std::string& help, int64_t min = 1,
                    int64_t max = std::numeric_limits<int>::max());
  void add_common(CommonOptions* opts);

  // Returns false if --help was given (help printed to stdout); throws nb::Error on bad input.
  // A flag given twice: the last value wins.
  bool parse(int argc, const char* const* argv);
  bool parse(int argc, char** argv) { return parse(argc, const_cast<const char* const*>(argv)); }

  std::string help() const;
  nlohmann::json values() const;       // {"n": 5000000, "lr": 0.01, ...} (names without "--")
  const std::string& program() const { return program_; }

 private:
  struct Flag;
  void add(std::shared_ptr<Flag> f);  // registers a flag (checks the name is new and starts with --)
  std::string program_, description_;
  std::vector<std::shared_ptr<Flag>> flags_;
};

}  // namespace nb
