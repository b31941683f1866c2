// fuzz/cli_harness.h — one CLI parse of arbitrary bytes, shared by the libFuzzer target
// (fuzz/fuzz_cli.cpp) and the regression replay (tests/host/test_regressions.cpp).
//
// The bytes are split into argv tokens at NUL and space (so a token may hold a newline, a tab or
// any other byte), at most 64 tokens. They are parsed by an nb::Cli that registers every kind of
// flag the phases use plus add_common(). The contract checked here:
//   - parse() either returns (true, or false for --help) or throws nb::Error with code
//     kExitUsage and a message of exactly one line; any other exception escapes (a finding);
//   - after a successful parse every value honours its declared constraint (range, finite,
//     > 0, choices, non-empty list, a --tag safe in a file name), and values() serializes to JSON
//     the way write_record() dumps a record (invalid UTF-8 replaced) without throwing.
// Violations call std::abort() so libFuzzer reports them with the input (or throw, see below).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.h"
#include "errors.h"

namespace nb_fuzz {

inline std::vector<std::string> split_tokens(const uint8_t* data, size_t size, size_t max_tokens = 64) {
  std::vector<std::string> tokens;
  std::string cur;
  bool in_token = false;
  for (size_t i = 0; i < size && tokens.size() < max_tokens; ++i) {
    char c = static_cast<char>(data[i]);
    if (c == '\0' || c == ' ') {
      if (in_token) tokens.push_back(cur);
      cur.clear();
      in_token = false;
    } else {
      cur += c;
      in_token = true;
    }
  }
  if (in_token && tokens.size() < max_tokens) tokens.push_back(cur);
  return tokens;
}

// libFuzzer wants an abort (it saves the input); the doctest replay wants an exception it can
// report, so it sets throw_on_violation() = true.
inline bool& throw_on_violation() {
  static bool on = false;
  return on;
}

[[noreturn]] inline void violation(const char* what, const std::string& detail) {
  if (throw_on_violation()) throw std::logic_error(std::string("cli contract violated: ") + what + ": " + detail);
  std::fprintf(stderr, "cli contract violated: %s: %s\n", what, detail.c_str());
  std::abort();
}

// Outcome of one parse, for the regression test.
struct CliOutcome {
  bool threw = false;
  int code = 0;
  std::string message;
};

inline CliOutcome run_cli_once(const std::vector<std::string>& tokens) {
  nb::Cli cli("fuzz_cli", "every kind of flag the phases register");
  int64_t n = 5000000;
  int epochs = 200;
  int offset = 0;
  uint64_t count = 7;
  double lr = 0.01;
  double dropout = 0.2;
  double beta = -1.5;
  std::string precision = "fp32";
  std::string dataset_dir = "data/mnist";
  bool verbose = false;
  std::vector<int> layers = {784, 128, 64, 10};
  nb::CommonOptions common;
  const double below_one = std::nextafter(1.0, 0.0);
  cli.add_int("--n", &n, "points", 1);
  cli.add_int("--epochs", &epochs, "epochs", 1, 1000000);
  cli.add_int("--offset", &offset, "a signed small int", -5, 5);
  cli.add_uint64("--count", &count, "unsigned");
  cli.add_double("--lr", &lr, "learning rate");
  cli.add_double("--dropout", &dropout, "dropout in [0, 1)", false, 0.0, below_one);
  cli.add_double("--beta", &beta, "any finite number", false);
  cli.add_string("--precision", &precision, "precision", {"fp32", "fp16"});
  cli.add_string("--data", &dataset_dir, "data directory");
  cli.add_flag("--verbose", &verbose, "chatty");
  cli.add_int_list("--layers", &layers, "layer widths", 1, 1 << 20);
  cli.add_common(&common);

  std::vector<const char*> argv;
  argv.push_back("fuzz_cli");
  for (const auto& t : tokens) argv.push_back(t.c_str());
  argv.push_back(nullptr);

  CliOutcome out;
  bool completed = false;
  try {
    completed = cli.parse(static_cast<int>(tokens.size() + 1), argv.data());
  } catch (const nb::Error& e) {
    out.threw = true;
    out.code = e.code;
    out.message = e.what();
    if (e.code != nb::kExitUsage) violation("error code is not kExitUsage", out.message);
    if (out.message.empty()) violation("empty error message", "");
    if (out.message.find('\n') != std::string::npos) violation("error message spans lines", out.message);
    return out;
  }
  if (!completed) return out;  // --help

  if (n < 1) violation("--n below its minimum", std::to_string(n));
  if (epochs < 1 || epochs > 1000000) violation("--epochs out of range", std::to_string(epochs));
  if (offset < -5 || offset > 5) violation("--offset out of range", std::to_string(offset));
  if (!std::isfinite(lr) || !(lr > 0)) violation("--lr not finite and > 0", std::to_string(lr));
  if (!std::isfinite(dropout) || dropout < 0 || dropout >= 1) violation("--dropout outside [0,1)", std::to_string(dropout));
  if (!std::isfinite(beta)) violation("--beta not finite", std::to_string(beta));
  if (precision != "fp32" && precision != "fp16") violation("--precision not a choice", precision);
  if (layers.empty()) violation("--layers empty", "");
  for (int w : layers)
    if (w < 1 || w > (1 << 20)) violation("--layers item out of range", std::to_string(w));
  if (common.warmup < 0) violation("--warmup negative", std::to_string(common.warmup));
  if (common.repeats < 1) violation("--repeats < 1", std::to_string(common.repeats));
  if (common.tag.empty() || common.tag == "." || common.tag == "..") violation("--tag unusable", common.tag);
  for (char c : common.tag)
    if (c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20) violation("--tag unsafe in a file name", common.tag);
  // The record's config is cli.values(); dump it as record.cpp does.
  try {
    (void)cli.values().dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    (void)cli.help();
  } catch (const std::exception& e) {
    violation("values()/help() threw", e.what());
  }
  (void)count;
  (void)verbose;
  return out;
}

}  // namespace nb_fuzz
