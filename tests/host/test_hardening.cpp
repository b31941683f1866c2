// tests/host/test_hardening.cpp — the hardening checks of host code that are not the regression replay:
// check_output_dir() (a bad --out must fail at once with exit 6, before any heavy work).
#include <unistd.h>

#include <string>

#include <doctest/doctest.h>

#include "errors.h"
#include "record.h"
#include "test_util.h"

namespace {

// Runs f, which must throw nb::Error; returns it (code 0 / empty message if it did not throw).
template <class F>
nb::Error error_of(F f) {
  try {
    f();
  } catch (const nb::Error& e) {
    return e;
  }
  return nb::Error(0, "");
}

}  // namespace

TEST_CASE("check_output_dir: creates a missing directory (with parents) and leaves it empty") {
  nbtest::TempDir tmp;
  const std::string dir = tmp / "a/b/c";
  CHECK_NOTHROW(nb::check_output_dir(dir));
  CHECK(nbtest::file_exists(dir));
  CHECK(tmp.entries("a/b/c").empty());  // the probe file is gone
  CHECK_NOTHROW(nb::check_output_dir(dir));  // an existing, writable directory is fine
  CHECK(tmp.entries("a/b/c").empty());
}

TEST_CASE("check_output_dir: a path through a regular file fails with exit 6 naming the directory") {
  nbtest::TempDir tmp;
  nbtest::write_file(tmp / "file", "x");
  for (const std::string& dir : {tmp / "file", tmp / "file/sub", tmp / "file/sub/deeper"}) {
    CAPTURE(dir);
    nb::Error e = error_of([&] { nb::check_output_dir(dir); });
    CHECK(e.code == nb::kExitOutput);
    const std::string m = e.what();
    CHECK(m.find(dir) == 0);
    CHECK(m.find('\n') == std::string::npos);
  }
  CHECK(nbtest::read_file(tmp / "file") == "x");  // untouched
  CHECK(tmp.entries().size() == 1);
}

TEST_CASE("check_output_dir: a read-only directory fails with exit 6 (skipped as root)") {
  if (::geteuid() == 0) {
    MESSAGE("skipped: running as root (root may write into a read-only directory)");
    return;
  }
  nbtest::TempDir tmp;
  const std::string dir = tmp / "ro";
  nb::check_output_dir(dir);
  REQUIRE(::chmod(dir.c_str(), 0555) == 0);
  nb::Error e = error_of([&] { nb::check_output_dir(dir); });
  ::chmod(dir.c_str(), 0755);
  CHECK(e.code == nb::kExitOutput);
  CHECK(std::string(e.what()).find("not writable") != std::string::npos);
}
