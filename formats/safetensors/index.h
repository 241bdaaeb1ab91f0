// The index of a sharded safetensors model, "model.safetensors.index.json":
//   {"metadata": {"total_size": N, ...}, "weight_map": {"TENSOR": "SHARD FILE", ...}}
// as Hugging Face writes it. Shard files are named relative to the index's directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor_file.h"

namespace fpg::safetensors {

// The conventional index name next to the shards, and the one file of an unsharded model directory.
constexpr const char* kIndexFileName = "model.safetensors.index.json";
constexpr const char* kModelFileName = "model.safetensors";

using ShardIndex = fpg::ShardIndex;  // core/tensor_file.h

// Reads and checks an index: JSON object, "weight_map" an object of strings (no tensor twice),
// "metadata" absent, null or an object whose "total_size" is a non-negative integer, shard names
// relative paths without ".." (an index must not point outside its directory). Throws
// fpg::FormatError naming the index file (and tensor).
ShardIndex read_index(const std::string& path);

// Writes `index` as HF does (2-space indent, sorted keys, trailing newline), atomically. Throws
// fpg::UsageError for a shard name read_index would refuse, fpg::FormatError on I/O failure.
void write_index(const std::string& path, const ShardIndex& index);

// "model-00001-of-00003.safetensors" for i = 0, n = 3 (HF's shard naming; 1-based in the name).
std::string shard_file_name(size_t i, size_t n, std::string_view stem = "model");

// Whether a shard name from an index is acceptable (see read_index).
bool is_safe_shard_name(std::string_view name);

}  // namespace fpg::safetensors
