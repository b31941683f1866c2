// tests/host/test_record.cpp — run records (common/record.h): fields, validation, and the atomic
// write (a reader sees the old file or the whole new one; failures leave no temporary file).
#include <doctest/doctest.h>

#include <cstdlib>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
#include <functional>
#include <limits>

#include "errors.h"
#include "record.h"
#include "test_util.h"

namespace {

// Changes the working directory for one scope.
struct ChangeDir {
  std::string old;
  explicit ChangeDir(const std::string& to) {
    old = std::filesystem::current_path().string();
    std::filesystem::current_path(to);
  }
  ~ChangeDir() { std::filesystem::current_path(old); }
};

nlohmann::json complete_record() {
  nb::Cli cli("phase1_naive", "test");
  int64_t n = 1001;
  cli.add_int("--n", &n, "points");
  nb::CommonOptions common;
  cli.add_common(&common);
  nlohmann::json rec = nb::new_record("phase1_naive", "linreg", "cuda", cli);
  rec["device"] = {{"name", "NVIDIA H100 80GB HBM3"}, {"slug", "nvidia-h100-80gb-hbm3"}};
  rec["timing"] = nb::timing_json("cuda-events", "200 epochs", "data generation", 1, nb::summarize({3.0, 1.0, 2.0}),
                                  {0.5, 0.25});
  return rec;
}

int expect_output_error(const std::function<void()>& f, std::string* msg) {
  try {
    f();
  } catch (const nb::Error& e) {
    *msg = e.what();
    return e.code;
  }
  return -1;
}

bool no_temp_files(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return false;
  return true;
}

}  // namespace

TEST_CASE("record: new_record fills the schema's header fields") {
  nlohmann::json rec = complete_record();
  CHECK(rec["schema"] == "cuda-notebook-run-record");
  CHECK(rec["schema_version"] == nb::kSchemaVersion);
  CHECK(rec["phase"] == "phase1_naive");
  CHECK(rec["workload"] == "linreg");
  CHECK(rec["implementation"] == "cuda");
  CHECK(rec["config"]["n"] == 1001);
  CHECK(rec["config"]["seed"] == 42);
  CHECK(rec["status"] == "ok");
  CHECK(rec["notes"].is_array());
  CHECK(rec["host"]["hostname"].is_string());
  CHECK_FALSE(rec["host"]["hostname"].get<std::string>().empty());
  CHECK(rec["software"]["compiler"].get<std::string>().size() > 3);
  // utc_time: ISO 8601 Z and within a minute of now.
  std::string t = rec["utc_time"];
  REQUIRE(t.size() == 20);
  CHECK(t.back() == 'Z');
  std::tm tm{};
  REQUIRE(strptime(t.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm) != nullptr);
  CHECK(std::llabs(static_cast<long long>(timegm(&tm) - std::time(nullptr))) < 60);
  // git: a 40-hex commit when run inside the repository, "unknown" otherwise.
  std::string c = rec["git"]["commit"];
  if (c != "unknown") {
    CHECK(c.size() == 40);
    CHECK(rec["git"]["dirty"].is_boolean());
  } else {
    CHECK(rec["git"]["dirty"].is_null());
  }
  CHECK(nb::validate_record(rec) == "");
}

TEST_CASE("record: NB_GIT_COMMIT / NB_GIT_DIRTY from the caller win over the repository found here") {
  ::setenv("NB_GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567", 1);
  ::setenv("NB_GIT_DIRTY", "0", 1);
  nb::Cli cli("p", "");
  nlohmann::json rec = nb::new_record("phase1_naive", "linreg", "cuda", cli);
  CHECK(rec["git"]["commit"] == "0123456789abcdef0123456789abcdef01234567");
  CHECK(rec["git"]["dirty"] == false);
  ::setenv("NB_GIT_DIRTY", "1", 1);
  CHECK(nb::new_record("phase1_naive", "linreg", "cuda", cli)["git"]["dirty"] == true);
  ::unsetenv("NB_GIT_COMMIT");
  ::unsetenv("NB_GIT_DIRTY");
}

TEST_CASE("record: outside a git repository the commit is \"unknown\" and dirty is null") {
  ::unsetenv("NB_GIT_COMMIT");
  nbtest::TempDir tmp;
  ChangeDir cd(tmp.path);
  nb::Cli cli("p", "");
  nlohmann::json rec = nb::new_record("phase1_naive", "linreg", "cuda", cli);
  CHECK(rec["git"]["commit"] == "unknown");
  CHECK(rec["git"]["dirty"].is_null());
  CHECK(rec["config"] == nlohmann::json::object());
}

TEST_CASE("record: validate_record names the first missing or wrong field") {
  const nlohmann::json good = complete_record();
  REQUIRE(nb::validate_record(good) == "");
  for (const char* k : {"schema", "schema_version", "phase", "workload", "implementation", "config", "device",
                        "utc_time", "timing", "status"}) {
    nlohmann::json r = good;
    r.erase(k);
    std::string e = nb::validate_record(r);
    CHECK_MESSAGE(e.find(std::string("'") + k + "'") != std::string::npos, k, " -> ", e);
  }
  nlohmann::json r = good;
  r["device"].erase("name");
  CHECK(nb::validate_record(r).find("device.name") != std::string::npos);
  r = good;
  r["timing"].erase("method");
  CHECK(nb::validate_record(r).find("timing.method") != std::string::npos);
  r = good;
  r["schema_version"] = 2;
  CHECK(nb::validate_record(r).find("schema_version 2") != std::string::npos);
  r = good;
  r["schema"] = "something-else";
  CHECK(nb::validate_record(r).find("schema") != std::string::npos);
  r = good;
  r["status"] = "fine";
  CHECK(nb::validate_record(r).find("status") != std::string::npos);
  r = good;
  r["utc_time"] = "yesterday";
  CHECK(nb::validate_record(r).find("utc_time") != std::string::npos);
  r = good;
  r["phase"] = 7;
  CHECK(nb::validate_record(r).find("'phase' must be a string") != std::string::npos);
  CHECK(nb::validate_record(nlohmann::json::array()) != "");
}

TEST_CASE("record: timing_json and non-finite numbers become null") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  nlohmann::json t = nb::timing_json("cuda-events", "in", "out", 2, nb::summarize({4.0, nan, 2.0}), {1.0, nan});
  CHECK(t["method"] == "cuda-events");
  CHECK(t["warmup"] == 2);
  CHECK(t["repeats"] == 3);
  CHECK(t["total_ms"]["min"] == 2.0);
  CHECK(t["total_ms"]["median"] == 4.0);
  CHECK(t["total_ms"]["max"].is_null());
  CHECK(t["total_ms"]["mean"].is_null());
  CHECK(t["total_ms"]["samples"] == nlohmann::json::parse("[4.0, null, 2.0]"));
  CHECK(t["per_epoch_ms"] == nlohmann::json::parse("[1.0, null]"));
  CHECK(nb::finite_or_null(std::numeric_limits<double>::infinity()).is_null());
  CHECK(nb::finite_or_null(-0.5) == -0.5);
  CHECK(nb::finite_array(std::vector<float>{1.5f, -std::numeric_limits<float>::infinity()}) ==
        nlohmann::json::parse("[1.5, null]"));
  CHECK(nb::timing_json("host-steady-clock", "a", "b", 0, nb::summarize({1.0}))["per_epoch_ms"] ==
        nlohmann::json::array());
}

TEST_CASE("record: write_record round trip (path, contents, validation, no temp file)") {
  nbtest::TempDir tmp;
  nlohmann::json rec = complete_record();
  rec["device"]["name"] = "GPU \xff\xfe";  // invalid UTF-8 must not make the write fail
  std::string out = tmp / "deep/er/dir";
  std::string path = nb::write_record(rec, out, "ignored-slug", "phase1_naive", "t1");
  CHECK(path == out + "/phase1_naive__t1.json");
  nlohmann::json back = nlohmann::json::parse(nbtest::read_file(path));
  CHECK(nb::validate_record(back) == "");
  CHECK(back["config"] == rec["config"]);
  CHECK(back["timing"] == rec["timing"]);
  CHECK(back["utc_time"] == rec["utc_time"]);
  CHECK(no_temp_files(out));
  CHECK(tmp.entries("deep/er/dir").size() == 1);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0444) == 0444);  // readable by the report, not 0600 like mkstemp's file
}

TEST_CASE("record: default folder is profiles/<device-slug>") {
  nbtest::TempDir tmp;
  ChangeDir cd(tmp.path);
  std::string path = nb::write_record(complete_record(), "", "nvidia-h100-80gb-hbm3", "phase2_shared_mem", "default");
  CHECK(path == "profiles/nvidia-h100-80gb-hbm3/phase2_shared_mem__default.json");
  CHECK(nbtest::file_exists(tmp.path + "/" + path));
  std::string msg;
  CHECK(expect_output_error([&] { nb::write_record(complete_record(), "", "..", "p", "t"); }, &msg) ==
        nb::kExitOutput);
  CHECK(expect_output_error([&] { nb::write_record(complete_record(), "x", "s", "p", "a/b"); }, &msg) ==
        nb::kExitOutput);
}

TEST_CASE("record: an existing record is replaced wholly, never appended to or mixed") {
  nbtest::TempDir tmp;
  std::string p = tmp / "r.json";
  nb::write_file_atomic(p, std::string(100000, 'x'));
  CHECK(nbtest::read_file(p).size() == 100000);
  nb::write_file_atomic(p, "short\n");
  CHECK(nbtest::read_file(p) == "short\n");
  nb::write_file_atomic(p, "");
  CHECK(nbtest::read_file(p).empty());
  CHECK(tmp.entries().size() == 1);
}

TEST_CASE("record: unwritable target gives exit code 6, names the path, leaves no temporary file") {
  nbtest::TempDir tmp;
  std::string msg;
  // (a) the output folder would have to be created inside a regular file.
  nbtest::write_file(tmp / "afile", "x");
  CHECK(expect_output_error([&] { nb::write_record(complete_record(), tmp / "afile/sub", "s", "p", "t"); }, &msg) ==
        nb::kExitOutput);
  CHECK(msg.find(tmp / "afile/sub") == 0);
  CHECK(msg.find('\n') == std::string::npos);
  // (b) the target name is an existing directory: the temporary file is written, the rename
  //     fails, and the temporary file must be gone afterwards.
  std::filesystem::create_directories(tmp / "out/p__t.json");
  CHECK(expect_output_error([&] { nb::write_record(complete_record(), tmp / "out", "s", "p", "t"); }, &msg) ==
        nb::kExitOutput);
  CHECK(msg.find(tmp / "out/p__t.json") == 0);
  CHECK(msg.find("rename") != std::string::npos);
  CHECK(tmp.entries("out") == std::vector<std::string>{"p__t.json"});
  CHECK(std::filesystem::is_directory(tmp / "out/p__t.json"));
  // (c) a read-only folder (only meaningful when not running as root, who may write anyway).
  std::filesystem::create_directories(tmp / "ro");
  ::chmod((tmp / "ro").c_str(), 0555);
  if (::geteuid() != 0) {
    CHECK(expect_output_error([&] { nb::write_file_atomic(tmp / "ro/x.json", "{}"); }, &msg) == nb::kExitOutput);
    CHECK(msg.find("Permission denied") != std::string::npos);
    CHECK(tmp.entries("ro").empty());
  } else {
    MESSAGE("read-only folder sub-check skipped: running as root (root may write there)");
    CHECK(nb::validate_record(complete_record()) == "");
  }
  ::chmod((tmp / "ro").c_str(), 0755);
  CHECK(expect_output_error([&] { nb::write_file_atomic("", "{}"); }, &msg) == nb::kExitOutput);
}

TEST_CASE("float_checksum: FNV-1a over the float32 bytes, as Python's struct.pack('<f') gives them") {
  // Expected values computed independently in Python (struct.pack('<f', v), FNV-1a 64-bit).
  CHECK(nb::float_checksum({}) == "fnv1a64:14650fb0739d0383");
  CHECK(nb::float_checksum({1.0f, -2.5f, 0.1f}) == "fnv1a64:38e3d675c99bd858");
  // one bit of one value changes the fingerprint; order matters
  CHECK(nb::float_checksum({1.0f, -2.5f, std::nextafter(0.1f, 1.0f)}) != nb::float_checksum({1.0f, -2.5f, 0.1f}));
  CHECK(nb::float_checksum({-2.5f, 1.0f, 0.1f}) != nb::float_checksum({1.0f, -2.5f, 0.1f}));
}

TEST_CASE("per_step_json: the first 20 step losses as they are, then 100-step means (the last window shorter)") {
  std::vector<float> losses(250);
  for (size_t i = 0; i < losses.size(); ++i) losses[i] = static_cast<float>(i);
  losses[3] = std::nanf("");
  const nlohmann::json j = nb::per_step_json(losses);
  CHECK(j["every"] == 100);
  CHECK(j["reduce"] == "mean");
  REQUIRE(j["first_exact"].size() == 20);
  CHECK(j["first_exact"][2] == 2.0);
  CHECK(j["first_exact"][3].is_null());  // not finite: null, as everywhere in a record
  CHECK(j["first_exact"][19] == 19.0);
  REQUIRE(j["values"].size() == 3);
  CHECK(j["values"][0].is_null());            // the window holds the NaN
  CHECK(j["values"][1] == doctest::Approx(149.5));
  CHECK(j["values"][2] == doctest::Approx(224.5));  // steps 200..249
  CHECK(nb::per_step_json({})["first_exact"].empty());
}
