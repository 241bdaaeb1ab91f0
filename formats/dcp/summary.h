// What a DCP checkpoint holds, from its metadata alone (plus a few bytes of one item to tell the
// serialization): what `inspect` prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/dcp/megatron/megatron_metadata.h"
#include "formats/dcp/reader.h"

namespace fpg::dcp {

struct KeySummary {
  std::string fqn;
  bool is_tensor = true;
  std::string dtype;            // torch name ("bfloat16"); empty for bytes entries
  std::vector<uint64_t> shape;  // tensors
  size_t chunks = 0;            // tensors: chunk count; bytes entries: 1 if stored
  uint64_t bytes = 0;           // tensors: numel × element size; bytes entries: the stored length
  uint64_t stored_bytes = 0;    // sum of the storage entries' lengths (torch.save archives included)
};

struct Summary {
  std::string format;  // "torch_dcp", or "megatron_torch_dist" when metadata.json names torch_dist
  std::optional<std::string> dcp_version;
  std::optional<MegatronMetadata> megatron;
  std::optional<Serialization> serialization;  // of the first tensor item; none without tensors
  std::vector<std::string> transforms;         // distinct stream transforms of the items, sorted
  std::vector<std::string> files;              // distinct relative paths, sorted
  uint64_t tensors = 0, bytes_entries = 0, chunks = 0;
  uint64_t tensor_bytes = 0;  // sum of KeySummary::bytes over tensors
  uint64_t stored_bytes = 0;  // sum over all storage entries
  std::vector<KeySummary> keys;  // in metadata order
};

Summary summarize(const Reader& r);

}  // namespace fpg::dcp
