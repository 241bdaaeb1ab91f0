// Reading a .safetensors file: memory-mapped, header validated in full at open (rules: format.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_file.h"
#include "formats/safetensors/mapped_file.h"

namespace fpg::safetensors {

// A tensor as the header declares it, and a byte range of the file (core/tensor_file.h).
using TensorInfo = fpg::TensorInfo;
using ByteSpan = fpg::ByteSpan;

class Reader {
 public:
  // Maps and validates `path`; throws fpg::FormatError naming the file (and tensor, and range).
  explicit Reader(const std::string& path);

  // Validates a file image the caller keeps alive for the Reader's lifetime; `name` stands for the
  // file in messages. For tests and in-memory data.
  static Reader from_buffer(std::string name, const uint8_t* data, uint64_t size);

  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;
  ~Reader();

  const std::string& path() const { return path_; }

  // Tensors in file order: by data offset (the order of their bytes in the file).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  size_t size() const { return tensors_.size(); }
  // nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  // Throws fpg::FormatError naming the file and the tensor when absent.
  const TensorInfo& tensor(std::string_view name) const;

  // The "__metadata__" map (empty when absent or null).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Whether the header has a non-null "__metadata__" (possibly empty).
  bool has_metadata() const { return has_metadata_; }

  // The tensor's bytes inside the map; valid while the Reader lives. Zero-size tensors give a
  // pointer that must not be dereferenced.
  const uint8_t* data(const TensorInfo& t) const { return base_ + data_offset_ + t.begin; }
  ByteSpan bytes(const TensorInfo& t) const { return {data(t), t.nbytes()}; }

  uint64_t file_size() const { return file_size_; }
  uint64_t header_size() const { return data_offset_ - 8; }  // N, padding included
  uint64_t data_offset() const { return data_offset_; }      // 8 + N
  uint64_t data_size() const { return file_size_ - data_offset_; }

 private:
  Reader() = default;
  void parse();

  std::string path_;
  std::unique_ptr<MappedFile> map_;  // null for from_buffer
  const uint8_t* base_ = nullptr;
  uint64_t file_size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::map<std::string, std::string> metadata_;
  bool has_metadata_ = false;
};

}  // namespace fpg::safetensors
