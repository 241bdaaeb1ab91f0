// Writing a .safetensors file in bounded memory, from several threads at once, committed atomically.
//
// The caller declares every tensor and the metadata up front; the constructor lays the file out,
// creates it under a temporary name in the destination directory (".NAME.tmp-XXXXXXXX"),
// preallocates it and writes the header. Then any thread may write any byte range of any tensor, in
// any order (pwrite; no data is buffered). commit() checks that every byte of every tensor was
// written, fsyncs the file, renames it to its final name and fsyncs the directory. A Writer
// destroyed without a successful commit() removes its temporary file, so a crash or an error never
// leaves a half-written file under the final name.
//
// Tensor order: the reference writer's (dtype alignment descending, then name; format.h), not the
// declared order. It keeps every tensor aligned to its element size in the file, which zero-copy
// readers rely on, and makes our output byte-identical to safetensors' own for the same input, so
// conversions are reproducible whatever order the caller happens to declare tensors in.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_file.h"
#include "formats/safetensors/reader.h"

namespace fpg::safetensors {

using TensorSpec = fpg::TensorSpec;

// The format's TensorFileWriter (core/tensor_file.h): final, so that its own callers write without
// virtual dispatch.
class Writer final : public TensorFileWriter {
 public:
  // Throws fpg::UsageError for an invalid declaration (duplicate or reserved name, name that is not
  // UTF-8, shape overflow, sub-byte tensor not a whole number of bytes, header over the limit) and
  // fpg::FormatError when the temporary file cannot be created or preallocated.
  Writer(std::string path, std::vector<TensorSpec> tensors,
         std::map<std::string, std::string> metadata = {});
  ~Writer() override;  // removes the temporary file unless committed
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // The layout: tensors in file order with their offsets (relative to the data section).
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  // Index into tensors() of `name`; throws fpg::InternalError when it was never declared.
  size_t index(std::string_view name) const override;

  // Writes bytes [offset, offset + size) of tensor `index`. Thread-safe; ranges may be written in any
  // order and again (coverage is the union). Throws fpg::InternalError for a range outside the
  // tensor or a write after commit, fpg::FormatError when the write fails.
  void write(size_t index, uint64_t offset, const void* data, uint64_t size) override;
  using TensorFileWriter::write;  // by name

  // Starts writeback of what was written so far (sync_file_range, no wait), so a long write flushes
  // as it goes instead of all in commit()'s fsync. Thread-safe; a hint only.
  void start_writeback() const override;

  // Makes the file final (see above). Throws fpg::InternalError naming the first tensor and byte
  // range never written, fpg::FormatError on an I/O failure; after a throw the temporary file stays
  // until the Writer is destroyed.
  void commit() override;
  bool committed() const { return committed_; }

  const std::string& path() const override { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  uint64_t header_size() const { return data_offset_ - 8; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_size_; }

 private:
  void remove_temp() noexcept;

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;

  // Written ranges per tensor as disjoint, non-adjacent [begin, end) intervals (begin → end).
  std::mutex coverage_mutex_;
  std::vector<std::map<uint64_t, uint64_t>> coverage_;
};

}  // namespace fpg::safetensors
