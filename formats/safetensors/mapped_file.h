// A read-only memory map of a whole file (RAII).
#pragma once

#include <cstdint>
#include <string>

namespace fpg::safetensors {

class MappedFile {
 public:
  // Maps `path` read-only. Throws fpg::FormatError naming the path if it cannot be opened, is not a
  // regular file, or cannot be mapped. An empty file maps to data() == nullptr, size() == 0.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();

  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace fpg::safetensors
