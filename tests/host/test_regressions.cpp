// tests/host/test_regressions.cpp — replays every input in tests/regressions/ (inputs that once
// broke, or were written to probe, the IDX reader and the CLI parser) through the same harness
// the libFuzzer targets use (fuzz/idx_harness.h, fuzz/cli_harness.h). Each must be rejected
// cleanly: one line of nb::Error with the documented exit code (4 for data, 2 for usage); files
// named accept-* must be accepted instead. Any other exception, or a contract violation, fails.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "../../fuzz/cli_harness.h"
#include "../../fuzz/idx_harness.h"

namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// tests/regressions/ from the working directory or one of its parents (make runs the suite
// from the repository root; NB_REPO_ROOT overrides).
std::string regressions_dir() {
  if (const char* root = std::getenv("NB_REPO_ROOT")) return std::string(root) + "/tests/regressions";
  std::string up;
  for (int i = 0; i < 4; ++i, up += "../")
    if (is_dir(up + "tests/regressions")) return up + "tests/regressions";
  return "";
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && !is_dir(dir + "/" + n)) out.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

bool accepted_by_name(const std::string& name) { return name.compare(0, 7, "accept-") == 0; }

struct TempDir {
  std::string path;
  TempDir() {
    const char* t = std::getenv("TMPDIR");
    std::string templ = std::string(t && *t ? t : "/tmp") + "/nb-regress.XXXXXX";
    if (::mkdtemp(&templ[0])) path = templ;
  }
  ~TempDir() {
    if (!path.empty()) ::rmdir(path.c_str());
  }
};

}  // namespace

TEST_CASE("regressions: every IDX input is rejected with one line of nb::Error(kExitData)") {
  const std::string dir = regressions_dir();
  REQUIRE_MESSAGE(!dir.empty(), "tests/regressions not found: run from the repository root or set NB_REPO_ROOT");
  const std::vector<std::string> files = files_in(dir + "/idx");
  REQUIRE_MESSAGE(files.size() >= 10, "expected the committed IDX regression inputs in " << dir << "/idx");
  TempDir tmp;
  REQUIRE(!tmp.path.empty());
  nb_fuzz::idx_throw_on_violation() = true;
  for (const std::string& name : files) {
    CAPTURE(name);
    const std::vector<uint8_t> bytes = slurp(dir + "/idx/" + name);
    nb_fuzz::IdxOutcome out;
    CHECK_NOTHROW(out = nb_fuzz::run_idx_once(bytes.data(), bytes.size(), tmp.path + "/input-idx-ubyte"));
    if (accepted_by_name(name)) {
      CHECK(out.rejected == 1);  // a file is images or labels, never both
    } else {
      CHECK(out.rejected == 2);
      CHECK(!out.images_error.empty());
      CHECK(!out.labels_error.empty());
    }
  }
  nb_fuzz::idx_throw_on_violation() = false;
}

TEST_CASE("regressions: every CLI input is rejected with one line of nb::Error(kExitUsage)") {
  const std::string dir = regressions_dir();
  REQUIRE_MESSAGE(!dir.empty(), "tests/regressions not found: run from the repository root or set NB_REPO_ROOT");
  const std::vector<std::string> files = files_in(dir + "/cli");
  REQUIRE_MESSAGE(files.size() >= 10, "expected the committed CLI regression inputs in " << dir << "/cli");
  nb_fuzz::throw_on_violation() = true;
  // --help (if an input has it) prints to stdout; that is fine here.
  for (const std::string& name : files) {
    CAPTURE(name);
    const std::vector<uint8_t> bytes = slurp(dir + "/cli/" + name);
    nb_fuzz::CliOutcome out;
    CHECK_NOTHROW(out = nb_fuzz::run_cli_once(nb_fuzz::split_tokens(bytes.data(), bytes.size())));
    if (accepted_by_name(name)) {
      CHECK_MESSAGE(!out.threw, out.message);
    } else {
      CHECK(out.threw);
      CHECK(out.code == nb::kExitUsage);
      CHECK(out.message.find('\n') == std::string::npos);
    }
  }
  nb_fuzz::throw_on_violation() = false;
}

TEST_CASE("regressions: the harness itself notices a broken contract") {
  // A parse that succeeds is not a rejection, and an IDX file the readers accept is counted as
  // accepted: without this the two replays above could pass vacuously.
  const std::string good = "--n 5 --lr 0.5";
  nb_fuzz::CliOutcome c = nb_fuzz::run_cli_once(
      nb_fuzz::split_tokens(reinterpret_cast<const uint8_t*>(good.data()), good.size()));
  CHECK(!c.threw);
  const std::string bad = "--lr 0";
  c = nb_fuzz::run_cli_once(nb_fuzz::split_tokens(reinterpret_cast<const uint8_t*>(bad.data()), bad.size()));
  CHECK(c.threw);
  CHECK(c.message.find("--lr") != std::string::npos);

  TempDir tmp;
  REQUIRE(!tmp.path.empty());
  // mode 0 (plain file), magic 2049 (0x00000801), count 2, labels 4 and 7
  const std::vector<uint8_t> labels = {0, 0, 0, 8, 1, 0, 0, 0, 2, 4, 7};
  nb_fuzz::IdxOutcome o = nb_fuzz::run_idx_once(labels.data(), labels.size(), tmp.path + "/labels");
  CHECK(o.rejected == 1);
  CHECK(o.labels_error.empty());
  CHECK(o.images_error.find("wrong magic") != std::string::npos);
}
