// Hugging Face storage saved by every rank (`HuggingFaceStorageWriter(save_distributed=True)`, torch
// 2.15's hf_storage.py): one safetensors file per rank, `shard-<rank+1>-model-<i>-of-<n>.safetensors`
// (five digits each), holding that rank's local shard of each tensor under the tensor's fqn, with its
// offsets in the global tensor in the file's `__metadata__` as DCP_SHARDING_INFO
// (`{fqn: {"saved_offsets": [...]}}`). There is no .metadata and no index: torch's
// HuggingFaceStorageReader builds the Metadata from the headers, and so does this, so that the
// directory is validated, inspected, compared and exported as any DCP checkpoint:
//   - a key's chunks are its shards in every file, at their saved offsets, of the file's dtype;
//     its global size is, per dimension, the largest offset + size (as torch infers it);
//   - a shard of the same offsets and sizes as one a lower-numbered file holds is a replica: the
//     lower file's is kept;
//   - each chunk's item is the file's tensor (the SAFETENSORS serialization's item: offset 0, the
//     tensor's byte size as length).
// A key two files give another dtype or arity is refused (FormatError naming both files and the
// key), as is a file without DCP_SHARDING_INFO, a shard number missing below the highest, or a
// dtype torch has no counterpart of.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "formats/dcp/checkpoint_dir.h"
#include "formats/dcp/metadata/metadata.h"

namespace fpg::dcp {

// The shard number of a file named as save_distributed names them, or nullopt.
std::optional<uint64_t> hf_shard_number(const std::string& name);

// The distributed shards among `files`' regular files, by shard number then name; empty when the
// directory also holds a Hugging Face model's index or model.safetensors (then it is that model).
std::vector<std::string> hf_distributed_files(const CheckpointDir& files);

// The Metadata torch's HuggingFaceStorageReader would build from `shards` (hf_distributed_files).
// Throws fpg::FormatError as above.
Metadata hf_distributed_metadata(const CheckpointDir& files, const std::vector<std::string>& shards);

}  // namespace fpg::dcp
