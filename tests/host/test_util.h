// tests/host/test_util.h — small helpers shared by the host test files: a self-deleting temporary
// directory, whole-file read/write, and where the real data sets are (env DATA_DIR).
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace nbtest {

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "nb_host_test_XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  // Names of the entries in the directory (to check that no temporary file was left behind).
  std::vector<std::string> entries(const std::string& sub = "") const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(sub.empty() ? path : path + "/" + sub))
      out.push_back(e.path().filename().string());
    return out;
  }
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The data sets fetched by `make data` / shipped in ../shared/data (env DATA_DIR overrides).
inline std::string data_dir() {
  const char* d = std::getenv("DATA_DIR");
  return d && *d ? d : "../shared/data";
}

}  // namespace nbtest
