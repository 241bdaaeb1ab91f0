// One view of a safetensors model, whether a single file or shards with an index.
//
// Model::open accepts a .safetensors file, an index (any path ending in ".json"), or a directory
// holding model.safetensors.index.json or model.safetensors. Shards are opened (mapped, headers
// validated) eagerly: the cross-shard checks below need every header, and a header costs little.
// Checks on a sharded model, each an fpg::FormatError naming the index, the shard and the tensor:
// a shard file that does not exist; a tensor the weight_map places in a shard that lacks it; a
// tensor stored in two shards; a tensor stored in a shard but absent from the weight_map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/safetensors/index.h"
#include "formats/safetensors/reader.h"

namespace fpg::safetensors {

// The format's TensorFiles (core/tensor_file.h): final, so that its own callers read without virtual
// dispatch.
class Model final : public TensorFiles {
 public:
  using Entry = TensorFiles::Entry;  // info owned by shard(shard)

  static Model open(const std::string& path);
  // One .safetensors file, with Reader's checks and messages (no index, no directory).
  static Model open_file(const std::string& path);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model() override;

  // The path that was opened (file, index or directory) and the file actually read first (the
  // .safetensors file or the index).
  const std::string& path() const override { return path_; }
  const std::string& source() const override { return source_; }
  const ShardIndex* index() const override { return index_ ? &*index_ : nullptr; }

  // Shards in sorted file-name order; one for a single file.
  size_t shard_count() const override { return shards_.size(); }
  const Reader& shard(size_t i) const { return *shards_[i]; }
  const std::string& shard_path(size_t i) const override { return shards_[i]->path(); }

  // Every tensor: shard order, then file order within a shard.
  const std::vector<Entry>& tensors() const override { return entries_; }
  const Entry* find(std::string_view name) const override;  // nullptr when absent
  const Entry& tensor(std::string_view name) const override;  // throws FormatError naming model and tensor

  const Reader& reader(const Entry& e) const { return *shards_[e.shard]; }
  const uint8_t* data(const Entry& e) const { return reader(e).data(*e.info); }
  ByteSpan bytes(const Entry& e) const override { return reader(e).bytes(*e.info); }

  // "__metadata__" of the single file, or of the first shard (HF shards carry the same map).
  const std::map<std::string, std::string>& metadata() const override;
  // Bytes of tensor data over all shards (what HF records as total_size).
  uint64_t total_bytes() const override { return total_bytes_; }

 private:
  Model() = default;
  void add_shard(std::unique_ptr<Reader> r);

  std::string path_;
  std::string source_;
  std::optional<ShardIndex> index_;
  std::vector<std::unique_ptr<Reader>> shards_;
  std::vector<Entry> entries_;
  std::map<std::string, size_t, std::less<>> by_name_;
  uint64_t total_bytes_ = 0;
};

}  // namespace fpg::safetensors
