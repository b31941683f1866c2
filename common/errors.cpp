// common/errors.cpp — see errors.h.
#include "errors.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <exception>
#include <new>

namespace nb {
namespace {
std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted.store(true); }
}  // namespace

bool interrupted() { return g_interrupted.load(); }

void throw_if_interrupted(const char* where) {
  if (interrupted()) throw Error(kExitInterrupted, std::string("interrupted (SIGINT) during ") + where);
}

int guarded_main(int argc, char** argv, int (*body)(int, char**)) {
  std::signal(SIGINT, on_sigint);
  try {
    return body(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.code;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: host memory exhausted\n");
    return kExitOutOfMemory;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal: %s\n", e.what());
    return kExitInternal;
  }
}

}  // namespace nb
