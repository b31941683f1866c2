// fuzz/fuzz_idx.cpp — libFuzzer target for the IDX reader (common/idx.cpp).
//
// Each input becomes a file (plain, gzip-compressed, truncated .gz or .gz with trailing bytes,
// chosen by its first byte: see fuzz/idx_harness.h) that both read_idx_images() and
// read_idx_labels() must either accept as well-formed or reject with one line of
// nb::Error(kExitData) naming the file. Built and run by `make fuzz` (scripts/harden.sh fuzz).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "idx_harness.h"

namespace {
std::string g_dir;
void remove_dir() {
  if (!g_dir.empty()) rmdir(g_dir.c_str());
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/nb-fuzz-idx.XXXXXX";
  if (!mkdtemp(&templ[0])) {
    std::perror("fuzz_idx: mkdtemp");
    std::abort();
  }
  g_dir = templ;
  std::atexit(remove_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nb_fuzz::run_idx_once(data, size, g_dir + "/input-idx-ubyte");
  return 0;
}
