// The metadata of a PyTorch Distributed Checkpoint (the `.metadata` pickle), as plain C++ data.
//
// Metadata(state_dict_metadata={fqn: TensorStorageMetadata | BytesStorageMetadata}, planner_data,
// storage_data={MetadataIndex(fqn, offset, index): _StorageInfo(relative_path, offset, length,
// transform_descriptors)}, storage_meta=StorageMeta(...), version). Decoding checks every field's type
// and names the file and the field on a mismatch (fpg::FormatError); what the values mean — chunks in
// bounds, offsets of the right arity, a storage entry for every chunk — is left to validate.h, which
// reports it as problems. Fields this reader does not know are kept (top level, e.g. Megatron's
// `mcore_data`) or ignored with a debug-level note (inside the dataclasses).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dim_vector.h"
#include "core/shared_string.h"
#include "formats/dcp/pickle/pickle_reader.h"
#include "formats/dcp/pickle/pickle_value.h"
#include "formats/dcp/torch_dtype.h"

namespace fpg::dcp {

constexpr int64_t kNoStorage = -1;

struct ChunkMeta {
  DimVector offsets;  // per dimension, in elements
  DimVector sizes;
  int64_t storage = kNoStorage;  // index into Metadata::storage
};

struct TensorMeta {
  const TorchDType* dtype = nullptr;  // never null after decoding
  std::vector<uint64_t> size;         // the global shape
  std::vector<ChunkMeta> chunks;
  std::string layout = "torch.strided";
  std::string memory_format = "torch.contiguous_format";
  bool requires_grad = false;
  bool pin_memory = false;
  std::optional<std::vector<int64_t>> strides;  // TensorProperties.strides, where the writer recorded it
  uint64_t numel() const;  // product of size (saturating at UINT64_MAX)
};

struct Entry {
  std::string fqn;
  bool is_tensor = true;
  TensorMeta tensor;                 // is_tensor
  int64_t storage = kNoStorage;      // !is_tensor: index into Metadata::storage
};

// One storage_data entry: where an item's bytes are.
struct StorageEntry {
  SharedString fqn;  // shared by the entries of one key
  std::optional<DimVector> chunk_offsets;  // MetadataIndex.offset; none for bytes
  std::optional<int64_t> index;                        // MetadataIndex.index, a lookup hint
  std::string relative_path;
  uint64_t offset = 0;  // in the file
  uint64_t length = 0;
  std::vector<std::string> transform_descriptors;  // stream transforms (experimental in DCP)
};

struct StorageMetaInfo {
  std::optional<std::string> checkpoint_id;  // a str, or a pathlib path joined with '/'
  std::optional<std::string> save_id;
  std::optional<std::string> load_id;
  std::vector<std::string> modules;
};

struct RankMetadata;  // rank_local_metadata.h
class CheckpointDir;  // ../checkpoint_dir.h

struct Metadata {
  std::string file;                  // the .metadata path, for messages
  std::vector<Entry> entries;        // state_dict_metadata, in file order
  std::vector<StorageEntry> storage; // storage_data, in file order
  std::optional<std::string> version;
  std::optional<StorageMetaInfo> storage_meta;
  // planner_data of the default planner: each fqn's path in the original, nested state dict (int
  // path elements as decimal strings). Other planner_data shapes are kept in `extra`.
  std::vector<std::pair<std::string, std::vector<std::string>>> planner_data;
  std::map<std::string, Value> extra;  // other top-level fields, e.g. Megatron's "mcore_data"
  std::vector<std::string> notes;      // fields read but ignored, one line each
  uint64_t duplicate_storage_keys = 0; // storage_data keys repeated (the last one is used)

  const Entry* find(std::string_view fqn) const;
  size_t chunk_count() const;

 private:
  friend Metadata decode_metadata(const PickleDocument& doc);
  friend Metadata merge_rank_metadata(std::vector<RankMetadata> ranks, std::string file);
  friend Metadata hf_distributed_metadata(const CheckpointDir& files, const std::vector<std::string>& shards);
  std::unordered_map<std::string, size_t> by_fqn_;
};

// Decodes a document read with AllowList::dcp_metadata().
Metadata decode_metadata(const PickleDocument& doc);

// Reads and decodes a .metadata image; `file` names it in messages.
Metadata parse_metadata(const std::string& file, const uint8_t* data, size_t size,
                        const PickleLimits& limits = {});
// The same, its `size` bytes read through `source` as the decoding goes (read_pickle's window).
Metadata parse_metadata(const std::string& file, size_t size, const PickleSource& source,
                        const PickleLimits& limits = {});

}  // namespace fpg::dcp
