// fuzz/fuzz_cli.cpp — libFuzzer target for the command-line parser (common/cli.cpp).
//
// Each input is split into argv tokens and parsed by a Cli that registers every kind of flag
// (see fuzz/cli_harness.h for the contract). Only nb::Error(kExitUsage, one line) may come out
// of a bad command line; any other exception, a sanitizer report, or a value that slipped past
// its constraint is a finding. Built and run by `make fuzz` (scripts/harden.sh fuzz).
#include <cstdint>
#include <cstdio>

#include "cli_harness.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // --help prints the flag list to stdout; keep libFuzzer's log readable.
  if (!std::freopen("/dev/null", "w", stdout)) return 0;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nb_fuzz::run_cli_once(nb_fuzz::split_tokens(data, size));
  return 0;
}
