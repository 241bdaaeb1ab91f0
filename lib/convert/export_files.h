// Where a checkpoint export's tensors go: OUT ending in ".safetensors" is one file; ending in ".json"
// an index whose shards (model-0000i-of-0000n.safetensors, cut at max_shard bytes by HF's rule) go in
// its directory; anything else a directory (created) receiving model.safetensors, or shards and
// model.safetensors.index.json when the tensors exceed max_shard.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpg::convert {

struct ExportFiles {
  std::vector<std::string> paths;           // the safetensors files
  std::vector<std::vector<size_t>> tensors;  // per file: indices into the planned tensors, in order
  std::string index_path;                    // empty: no index
};

// Plans files for tensors of these sizes (bytes, in export order). UsageError when OUT names a file
// where a directory is needed, FormatError when the directory cannot be created.
ExportFiles plan_export_files(const std::vector<uint64_t>& tensor_bytes, const std::string& out, uint64_t max_shard);

}  // namespace fpg::convert
