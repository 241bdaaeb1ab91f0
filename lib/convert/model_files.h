// Where `fpgather convert` writes a safetensors model, and which input tensors go to which file.
//
// IN is a .safetensors file, an index (*.json) or a directory holding one (formats/safetensors/model.h).
// OUT names the output:
//   - a path ending in ".safetensors": one file holding every tensor (a sharded IN is consolidated);
//   - a path ending in ".json": an index; each input shard becomes an output shard of the same file
//     name in the index's directory (a single-file IN becomes one shard named like IN);
//   - anything else, when IN is sharded: a directory, created if missing, receiving the shards and
//     model.safetensors.index.json.
// OUT may not be IN, nor write a shard over one of IN's files.
#pragma once

#include <string>
#include <vector>

#include "formats/safetensors/model.h"

namespace fpg::convert {

struct OutputFile {
  std::string path;                  // final path of this .safetensors file
  std::vector<size_t> tensors;       // indexes into Model::tensors(), in the model's order
};

struct OutputLayout {
  std::vector<OutputFile> files;
  std::string index_path;            // empty: a single file, no index
};

// Throws UsageError for an OUT that cannot be written as asked (see above).
OutputLayout plan_output_files(const safetensors::Model& in, const std::string& out);

}  // namespace fpg::convert
