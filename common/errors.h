// common/errors.h — the project's one error type and its documented exit codes.
//
// Every failure a user can cause or meet (a bad flag, a missing file, no GPU, a failed CUDA
// call, a diverging run) is thrown as nb::Error{code, one-line message}. Each program's main()
// is wrapped by nb::guarded_main(), which prints "error: <message>" on one line to stderr and
// returns the code. Nothing aborts, so destructors run and no half-written file is left behind
// (records are written atomically: see record.h).
//
// Exit codes (also listed in docs/ERRORS.md):
//   0    success
//   1    --validate ran and a tolerance was exceeded (the record says which)
//   2    usage: unknown flag, missing or malformed value, value out of range
//   3    no usable CUDA device (none visible, or compute capability too old)
//   4    data: missing, truncated or corrupt input file
//   5    the problem does not fit in free GPU memory (refused before allocating)
//   6    the output directory or file cannot be written
//   7    training diverged (non-finite loss detected on the device)
//   8    a CUDA / cuRAND / CUPTI / cuBLAS call failed (message names call, file, line)
//   9    any other internal error (a bug: please report it)
//   130  interrupted (SIGINT); records written before the signal are intact
#pragma once
#include <stdexcept>
#include <string>

namespace nb {

enum ExitCode : int {
  kExitOk = 0,
  kExitValidation = 1,
  kExitUsage = 2,
  kExitNoDevice = 3,
  kExitData = 4,
  kExitOutOfMemory = 5,
  kExitOutput = 6,
  kExitDiverged = 7,
  kExitCuda = 8,
  kExitInternal = 9,
  kExitInterrupted = 130,
};

struct Error : std::runtime_error {
  int code;
  Error(int exit_code, const std::string& message) : std::runtime_error(message), code(exit_code) {}
};

// Runs body(argc, argv); an nb::Error prints "error: <what>" and returns its code, any other
// std::exception returns kExitInternal. Defined in errors.cpp.
int guarded_main(int argc, char** argv, int (*body)(int, char**));

// Set by the SIGINT handler that guarded_main installs; training loops poll it between
// epochs/steps and throw Error(kExitInterrupted, ...) so that cleanup runs.
bool interrupted();
void throw_if_interrupted(const char* where);

}  // namespace nb
