// Helpers for the safetensors tests: temporary directories, raw file images, error capture.
#pragma once

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fs.h"

namespace fpg::sttest {

// A fresh directory under $TMPDIR (or /tmp), removed with its files on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/fpg-st-XXXXXX";
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() { fs::remove_tree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

  // Names in the directory (hidden ones included), sorted.
  std::set<std::string> list() const { return list_dir(path_); }

  static std::set<std::string> list_dir(const std::string& dir) {
    std::set<std::string> names;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (n != "." && n != "..") names.insert(n);
      }
      ::closedir(d);
    }
    return names;
  }

 private:
  std::string path_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

// A file image: u64 length, `header` padded with spaces to a multiple of 8, `data_size` data bytes.
inline std::vector<uint8_t> image(const std::string& header, size_t data_size) {
  std::string h = header;
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(uint64_t(h.size()) >> (8 * i));
  s += h;
  for (size_t i = 0; i < data_size; ++i) s += static_cast<char>(i * 7 + 1);
  return {s.begin(), s.end()};
}

// The message of the fpg::FormatError `f` throws; "<no FormatError>" if it throws none.
template <class F>
std::string format_error(F&& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  return "<no FormatError>";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace fpg::sttest
