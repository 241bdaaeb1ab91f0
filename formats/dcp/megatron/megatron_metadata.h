// Megatron-Core's `metadata.json` beside a dist_checkpointing checkpoint: which backends wrote the
// sharded and the common state ({"sharded_backend": "torch_dist", "sharded_backend_version": 1,
// "common_backend": "torch", "common_backend_version": 1}).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "formats/dcp/checkpoint_dir.h"

namespace fpg::dcp {

struct MegatronMetadata {
  std::string sharded_backend;  // "torch_dist" for DCP
  std::optional<int64_t> sharded_backend_version;
  std::optional<std::string> common_backend;
  std::optional<int64_t> common_backend_version;
  std::map<std::string, std::string> other;  // further keys, their values as compact JSON
};

// Parses a metadata.json image; `file` names it in messages. Throws fpg::FormatError when it is not a
// JSON object with a string "sharded_backend" (and, where present, integer versions and a string
// common backend).
MegatronMetadata parse_megatron_metadata(const std::string& file, const char* text, size_t size);

// Reads DIR/metadata.json if the directory has one (a regular file); nullopt otherwise.
std::optional<MegatronMetadata> read_megatron_metadata(const CheckpointDir& dir);

}  // namespace fpg::dcp
