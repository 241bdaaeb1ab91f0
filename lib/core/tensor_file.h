// Files of named tensors, and models made of them (one file, or shards an index lists): what the
// conversions of a model, the exports of a checkpoint, `step`, `train --init` and the public API
// read and write. This is the seam between those use cases and the tensor-file format of the build
// (safetensors: formats/safetensors), handed to lib/ by tensor_file_format(), defined in
// formats/registry.cpp, so lib/ names no file format.
//
// A call through these interfaces stands for a tensor or a range of megabytes of one, never for an
// element: a file's tensors are read in place (mapped), and written by ranges from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace fpg {

// A read-only byte range (C++17 has no std::span).
struct ByteSpan {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  const uint8_t* begin() const { return data; }
  const uint8_t* end() const { return data + size; }
};

// One tensor of a file. Offsets are relative to the start of the file's data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::U8;
  std::vector<uint64_t> shape;  // [] is a scalar
  uint64_t numel = 0;
  uint64_t begin = 0;  // first byte
  uint64_t end = 0;    // past the last byte
  uint64_t nbytes() const { return end - begin; }
};

// A tensor to write.
struct TensorSpec {
  std::string name;
  DType dtype = DType::U8;
  std::vector<uint64_t> shape;
};

// The index of a sharded model, as Hugging Face writes it: which shard file holds which tensor.
struct ShardIndex {
  // Bytes of tensor data over all shards (metadata.total_size), where the index records it.
  std::optional<uint64_t> total_size;
  // The index's other metadata entries, each as its JSON text, so that a rewrite keeps them.
  std::map<std::string, std::string> extra_metadata_json;
  // Tensor name → shard file name, relative to the index's directory.
  std::map<std::string, std::string> weight_map;

  // The distinct shard files, sorted.
  std::vector<std::string> shard_files() const;
};

// A model's tensors, mapped: one file, or the shards of an index (each checked against the others at
// open: no tensor missing, twice, or outside the index).
class TensorFiles {
 public:
  struct Entry {
    const TensorInfo* info;  // owned by the model
    size_t shard;
  };

  virtual ~TensorFiles() = default;
  // What was opened (a file, an index or a directory) and the file read first (the tensor file or
  // the index).
  virtual const std::string& path() const = 0;
  virtual const std::string& source() const = 0;
  // The index of a sharded model; nullptr for one file.
  virtual const ShardIndex* index() const = 0;
  bool sharded() const { return index() != nullptr; }
  // The tensor files, in sorted file-name order; one for a single file.
  virtual size_t shard_count() const = 0;
  virtual const std::string& shard_path(size_t shard) const = 0;
  // Every tensor: shard order, then file order within a shard.
  virtual const std::vector<Entry>& tensors() const = 0;
  size_t size() const { return tensors().size(); }
  virtual const Entry* find(std::string_view name) const = 0;  // nullptr when absent
  virtual const Entry& tensor(std::string_view name) const = 0;  // FormatError naming model and tensor
  // The tensor's bytes, valid while the model lives.
  virtual ByteSpan bytes(const Entry& e) const = 0;
  const uint8_t* data(const Entry& e) const { return bytes(e).data; }
  // The string → string metadata of the file (of the first shard: HF shards carry the same map).
  virtual const std::map<std::string, std::string>& metadata() const = 0;
  // Bytes of tensor data over all shards.
  virtual uint64_t total_bytes() const = 0;
};

// One tensor file being written, in bounded memory, from several threads at once: every tensor is
// declared up front (create), then any thread writes any byte range of any tensor, in any order;
// commit() checks that every byte was written and puts the file in place atomically. Destroyed
// uncommitted, it leaves nothing under its name.
class TensorFileWriter {
 public:
  virtual ~TensorFileWriter() = default;
  virtual const std::string& path() const = 0;
  // The layout: tensors in file order with their offsets.
  virtual const std::vector<TensorInfo>& tensors() const = 0;
  // Index into tensors() of `name`; InternalError when it was never declared.
  virtual size_t index(std::string_view name) const = 0;
  // Bytes [offset, offset + size) of tensor `index`. Thread-safe; ranges may come in any order and
  // again. FormatError when the write fails.
  virtual void write(size_t index, uint64_t offset, const void* data, uint64_t size) = 0;
  void write(std::string_view name, uint64_t offset, const void* data, uint64_t size) {
    write(index(name), offset, data, size);
  }
  // Starts writing back what was written so far, without waiting (a long write flushes as it goes).
  virtual void start_writeback() const = 0;
  // Makes the file final: InternalError naming the first range never written, FormatError on an
  // I/O failure.
  virtual void commit() = 0;
};

// The tensor-file format of the build and its sharded form.
class TensorFileFormat {
 public:
  virtual ~TensorFileFormat() = default;
  // A model: a tensor file, an index, or a directory holding the one or the other. FormatError
  // naming the file (and tensor, and range) when it cannot be read.
  virtual std::unique_ptr<TensorFiles> open(const std::string& path) const = 0;
  // One tensor file, nothing else.
  virtual std::unique_ptr<TensorFiles> open_file(const std::string& path) const = 0;
  // A file at `path` holding `tensors` and `metadata` (TensorFileWriter). UsageError for a
  // declaration the format cannot hold, FormatError when the file cannot be created.
  virtual std::unique_ptr<TensorFileWriter> create(const std::string& path, std::vector<TensorSpec> tensors,
                                                   std::map<std::string, std::string> metadata = {}) const = 0;
  // The index of a sharded model: read (FormatError naming it) and written atomically (UsageError for
  // a shard name outside its directory).
  virtual ShardIndex read_index(const std::string& path) const = 0;
  virtual void write_index(const std::string& path, const ShardIndex& index) const = 0;
  // The names a model directory's loaders look for: the one file of a model, the index of a sharded
  // one, and shard i of n.
  virtual std::string model_file_name() const = 0;
  virtual std::string index_file_name() const = 0;
  virtual std::string shard_file_name(size_t i, size_t n) const = 0;
};

// The tensor-file format this build reads and writes (defined in formats/registry.cpp).
const TensorFileFormat& tensor_file_format();

}  // namespace fpg
