// Which files `fpgather convert` writes for a safetensors model, and which input tensors go to which.
//
// IN is a .safetensors file, an index (*.json) or a directory holding one (core/tensor_file.h, TensorFileFormat::open).
// OUT names the output (app/convert/staged_output.h for how it is put in place):
//   - a path ending in ".safetensors": one file holding every tensor (a sharded IN is consolidated);
//   - a path ending in ".json": an index; each input shard becomes an output shard of the same file
//     name in the index's directory (a single-file IN becomes one shard named like IN);
//   - anything else: a directory receiving the shards and model.safetensors.index.json of a sharded
//     IN, or model.safetensors for a single-file IN (the names Hugging Face loaders look for).
#pragma once

#include <string>
#include <vector>

#include "app/convert/staged_output.h"
#include "core/tensor_file.h"

namespace fpg::app::convert {

struct OutputFile {
  std::string name;                  // file name in the output's directory
  std::vector<size_t> tensors;       // indexes into Model::tensors(), in the model's order
};

struct OutputLayout {
  OutputKind kind = OutputKind::file;
  std::vector<OutputFile> files;
  std::string index_name;            // empty: no index
};

OutputLayout plan_output_files(const TensorFiles& in, const std::string& out);

// The files a conversion of `in` reads, which its output may never replace.
std::vector<std::string> input_files(const TensorFiles& in);

}  // namespace fpg::app::convert
