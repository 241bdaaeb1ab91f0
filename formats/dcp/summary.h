// What a PyTorch DCP / Megatron torch_dist checkpoint holds, from its metadata alone (`fpgather
// inspect DIR`): format, versions, data files and their sizes, and every key with its dtype, shape,
// chunk count and bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/dcp/reader.h"

namespace fpg::dcp {

struct KeySummary {
  std::string fqn;
  bool tensor = true;
  std::string dtype;            // torch's name ("bfloat16"); empty for bytes entries
  std::vector<uint64_t> shape;  // global shape
  size_t chunks = 0;
  uint64_t bytes = 0;           // tensor: volume x element size; bytes entry: stored length
};

struct Summary {
  std::string dir;
  std::string format;  // "Megatron torch_dist" or "PyTorch DCP"
  std::optional<std::string> megatron_backend;  // metadata.json's sharded_backend
  std::optional<int64_t> megatron_backend_version;
  std::string dcp_version;  // Metadata.version, "" when absent
  std::vector<std::pair<std::string, uint64_t>> files;  // data files named by storage_data, with sizes
  size_t tensor_keys = 0, bytes_keys = 0, chunks = 0;
  uint64_t tensor_bytes = 0;
  std::vector<KeySummary> keys;  // metadata order
};

// FormatError when a data file named by the metadata cannot be opened.
Summary summarize(const Reader& reader);

}  // namespace fpg::dcp
