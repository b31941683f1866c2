// common/record.cpp — see record.h and profiles/README.md (the schema).
//
// The one subtle part is write_file_atomic: the contents go to a temporary file created next to
// the target (same directory, so rename() is atomic on the same file system), are flushed to
// disk, and only then renamed over the target. On any failure the temporary file is removed and
// Error(kExitOutput, "<path>: <reason>") is thrown, so a reader sees either the old file or the
// complete new one, never half of one.
#include "record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "errors.h"

namespace nb {

namespace {

// Runs a shell command and returns its stdout; ok=false when it cannot run or exits non-zero.
std::string run_command(const char* cmd, bool* ok) {
  *ok = false;
  std::FILE* p = ::popen(cmd, "r");
  if (!p) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  *ok = (status == 0);
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

nlohmann::json git_info() {
  // The script that ran the program may say which commit it was, through NB_GIT_COMMIT and
  // NB_GIT_DIRTY=0|1; it wins over any repository found here: the copy of the working tree sent to
  // a GPU machine can carry a stale .git (records of 2026-11-22 named an older commit
  // that way, marked dirty).
  const char* env = std::getenv("NB_GIT_COMMIT");
  if (env && *env) {
    const char* env_dirty = std::getenv("NB_GIT_DIRTY");
    nlohmann::json dirty = nullptr;
    if (env_dirty && *env_dirty) dirty = std::string(env_dirty) != "0";
    return {{"commit", std::string(env)}, {"dirty", dirty}};
  }
  bool ok = false;
  std::string commit = trim(run_command("git rev-parse HEAD 2>/dev/null", &ok));
  bool hex = ok && commit.size() == 40;
  for (char c : commit) hex = hex && std::isxdigit(static_cast<unsigned char>(c));
  if (!hex) return {{"commit", "unknown"}, {"dirty", nullptr}};  // null: not known (no git / not a repo)
  bool ok2 = false;
  std::string status = run_command("git status --porcelain 2>/dev/null", &ok2);
  nlohmann::json dirty = ok2 ? nlohmann::json(!trim(status).empty()) : nlohmann::json(nullptr);
  return {{"commit", commit}, {"dirty", dirty}};
}

std::string utc_now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string hostname() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string compiler_name() {
#if defined(__clang__)
  return std::string("clang++ ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("g++ ") + __VERSION__;
#else
  return "unknown";
#endif
}

[[noreturn]] void output_error(const std::string& path, const std::string& what, int err) {
  throw Error(kExitOutput, path + ": " + what + ": " + std::strerror(err));
}

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Everything but the last path component ("" for a bare file name).
std::string parent_of(const std::string& path) {
  std::filesystem::path p(path);
  return p.parent_path().string();
}

}  // namespace

nlohmann::json new_record(const std::string& phase, const std::string& workload, const std::string& implementation,
                          const Cli& cli) {
  nlohmann::json r;
  r["schema"] = "cuda-notebook-run-record";
  r["schema_version"] = kSchemaVersion;
  r["phase"] = phase;
  r["workload"] = workload;
  r["implementation"] = implementation;
  r["config"] = cli.values();
  r["git"] = git_info();
  r["utc_time"] = utc_now_iso8601();
  r["host"] = {{"hostname", hostname()}};
  r["software"] = {{"compiler", compiler_name()}};
  r["status"] = "ok";
  r["notes"] = nlohmann::json::array();
  r["run_mode"] = run_mode_from_env();
  return r;
}

std::string run_mode_from_env() {
  // scripts/run_all.sh exports NB_RUN_MODE=quick for its reduced notebook; the report prefers a full
  // run's record where both fill a slot. Anything else (unset, or another value) is a full run.
  const char* m = std::getenv("NB_RUN_MODE");
  return (m != nullptr && std::string(m) == "quick") ? "quick" : "full";
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json finite_array(const std::vector<double>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (double x : v) a.push_back(finite_or_null(x));
  return a;
}

nlohmann::json finite_array(const std::vector<float>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (float x : v) a.push_back(finite_or_null(static_cast<double>(x)));
  return a;
}

nlohmann::json per_step_json(const std::vector<float>& losses) {
  std::vector<double> first, means;
  for (size_t i = 0; i < losses.size() && i < static_cast<size_t>(kLossExactSteps); ++i) first.push_back(losses[i]);
  for (size_t i = 0; i < losses.size(); i += kLossWindow) {
    double s = 0;
    size_t n = 0;
    for (size_t j = i; j < losses.size() && j < i + kLossWindow; ++j, ++n) s += losses[j];
    means.push_back(s / static_cast<double>(n));
  }
  return {{"every", kLossWindow}, {"reduce", "mean"}, {"first_exact", finite_array(first)},
          {"values", finite_array(means)}};
}

nlohmann::json to_json(const Stats& s) {
  return {{"min", finite_or_null(s.min)},
          {"median", finite_or_null(s.median)},
          {"max", finite_or_null(s.max)},
          {"mean", finite_or_null(s.mean)},
          {"samples", finite_array(s.samples)}};
}

nlohmann::json timing_json(const std::string& method, const std::string& includes, const std::string& excludes,
                           int warmup, const Stats& total_ms, const std::vector<double>& per_epoch_ms) {
  return {{"method", method},
          {"includes", includes},
          {"excludes", excludes},
          {"warmup", warmup},
          {"repeats", total_ms.count},
          {"total_ms", to_json(total_ms)},
          {"per_epoch_ms", finite_array(per_epoch_ms)}};
}

std::string validate_record(const nlohmann::json& rec) {
  if (!rec.is_object()) return "record is not a JSON object";
  auto str_field = [&](const nlohmann::json& obj, const char* key, const std::string& full) -> std::string {
    if (!obj.is_object() || !obj.contains(key)) return "missing field '" + full + "'";
    const auto& v = obj.at(key);
    if (!v.is_string()) return "field '" + full + "' must be a string";
    if (v.get<std::string>().empty()) return "field '" + full + "' must not be empty";
    return "";
  };
  std::string e;
  if (!(e = str_field(rec, "schema", "schema")).empty()) return e;
  if (rec["schema"] != "cuda-notebook-run-record")
    return "field 'schema' is '" + rec["schema"].get<std::string>() + "', expected 'cuda-notebook-run-record'";
  if (!rec.contains("schema_version")) return "missing field 'schema_version'";
  if (!rec["schema_version"].is_number_integer()) return "field 'schema_version' must be an integer";
  if (rec["schema_version"].get<int64_t>() != kSchemaVersion)
    return "schema_version " + std::to_string(rec["schema_version"].get<int64_t>()) + " is not supported (expected " +
           std::to_string(kSchemaVersion) + ")";
  for (const char* k : {"phase", "workload", "implementation"})
    if (!(e = str_field(rec, k, k)).empty()) return e;
  if (!rec.contains("config")) return "missing field 'config'";
  if (!rec["config"].is_object()) return "field 'config' must be an object";
  if (!rec.contains("device")) return "missing field 'device'";
  if (!rec["device"].is_object()) return "field 'device' must be an object";
  if (!(e = str_field(rec["device"], "name", "device.name")).empty()) return e;
  if (!(e = str_field(rec, "utc_time", "utc_time")).empty()) return e;
  {
    // Shape 2026-11-22T10:00:00Z.
    const std::string t = rec["utc_time"].get<std::string>();
    bool ok = t.size() == 20 && t[4] == '-' && t[7] == '-' && t[10] == 'T' && t[13] == ':' && t[16] == ':' &&
              t[19] == 'Z';
    for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18})
      ok = ok && i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]));
    if (!ok) return "field 'utc_time' is '" + t + "', expected ISO 8601 like 2026-11-22T10:00:00Z";
  }
  if (!rec.contains("timing")) return "missing field 'timing'";
  if (!rec["timing"].is_object()) return "field 'timing' must be an object";
  if (!(e = str_field(rec["timing"], "method", "timing.method")).empty()) return e;
  if (!(e = str_field(rec, "status", "status")).empty()) return e;
  const std::string st = rec["status"].get<std::string>();
  if (st != "ok" && st != "validation_failed" && st != "diverged" && st != "interrupted")
    return "field 'status' is '" + st + "', expected ok|validation_failed|diverged|interrupted";
  return "";
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  if (path.empty()) throw Error(kExitOutput, "(empty path): cannot write a file with no name");
  const std::string dir = parent_of(path);
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw Error(kExitOutput, dir + ": cannot create directory: " + ec.message());
  }
  // mkstemp in the target's own directory, so the final rename stays on one file system.
  std::string tmpl = path + ".tmp.XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = ::mkstemp(name.data());
  if (fd < 0) output_error(path, "cannot create temporary file", errno);
  const std::string tmp(name.data());
  auto fail = [&](const char* what, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    output_error(path, what, err);
  };
  // mkstemp creates 0600; records are ordinary world-readable files.
  if (::fchmod(fd, 0644) != 0) fail("cannot set permissions", errno);
  if (!write_all(fd, contents.data(), contents.size())) fail("cannot write", errno);
  if (::fsync(fd) != 0) fail("cannot flush to disk", errno);
  int c = ::close(fd);
  fd = -1;
  if (c != 0) fail("cannot close", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename temporary file into place", errno);
  // Make the rename itself durable (best effort: some file systems refuse fsync on directories).
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void check_output_dir(const std::string& out_dir) {
  const std::string dir = out_dir.empty() ? "profiles" : out_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(kExitOutput, dir + ": cannot create the output directory: " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) throw Error(kExitOutput, dir + ": the output path is not a directory");
  std::string tmpl = dir + "/.write-test.XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = ::mkstemp(name.data());
  if (fd < 0) output_error(dir, "the output directory is not writable", errno);
  ::close(fd);
  ::unlink(name.data());
}

std::string write_record(const nlohmann::json& rec, const std::string& out_dir, const std::string& device_slug,
                         const std::string& phase, const std::string& tag) {
  auto safe = [](const std::string& s) {
    if (s.empty() || s == "." || s == "..") return false;
    for (char c : s)
      if (c == '/' || c == '\0') return false;
    return true;
  };
  const std::string dir = out_dir.empty() ? "profiles/" + device_slug : out_dir;
  if (out_dir.empty() && !safe(device_slug))
    throw Error(kExitOutput, dir + ": device slug '" + device_slug + "' is not a usable folder name");
  if (!safe(phase) || !safe(tag))
    throw Error(kExitOutput, dir + ": phase '" + phase + "' and tag '" + tag + "' must be non-empty file-name parts");
  std::string path = dir;
  if (path.back() != '/') path += '/';
  path += phase + "__" + tag + ".json";
  // Invalid UTF-8 in a string (e.g. a device name) is replaced rather than failing the dump.
  write_file_atomic(path, rec.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  return path;
}

std::string float_checksum(const std::vector<float>& values) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bit
  for (float f : values) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    for (int i = 0; i < 4; ++i) {
      h ^= (u >> (8 * i)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace nb
