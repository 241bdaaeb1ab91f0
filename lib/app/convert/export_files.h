// Where a checkpoint export's tensors go, and the staged files that receive them. OUT ending in
// ".safetensors" is one file; ending in ".json" an index whose shards (model-0000i-of-0000n.safetensors,
// cut at max_shard bytes by HF's rule) go in its directory; anything else a directory receiving
// model.safetensors, or shards and model.safetensors.index.json when the tensors exceed max_shard.
// The output is put in place as app/convert/staged_output.h says (never over an existing OUT without
// force, never half).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "app/convert/staged_output.h"
#include "core/tensor_file.h"

namespace fpg::app::convert {

struct ExportFiles {
  OutputKind kind = OutputKind::file;
  std::vector<std::string> names;            // the safetensors files, in the output's directory
  std::vector<std::vector<size_t>> tensors;  // per file: indices into the planned tensors, in order
  std::string index_name;                    // empty: no index
};

// Plans files for tensors of these sizes (bytes, in export order).
ExportFiles plan_export_files(const std::vector<uint64_t>& tensor_bytes, const std::string& out, uint64_t max_shard);

// The sizes, specs and total bytes of planned tensors (anything with `bytes()` and a `spec`), in order.
struct PlannedSpecs {
  std::vector<uint64_t> sizes;
  std::vector<TensorSpec> specs;
  uint64_t total = 0;
};
template <class Planned>
PlannedSpecs planned_specs(const std::vector<Planned>& tensors) {
  PlannedSpecs r;
  for (const auto& t : tensors) {
    r.sizes.push_back(t.bytes());
    r.specs.push_back(t.spec);
    r.total += t.bytes();
  }
  return r;
}

// The planned files being written: one staged Writer per file, then everything committed.
class ExportOutput {
 public:
  // specs[i]: the i-th planned tensor. UsageError for an OUT that may not be written (staged_output.h).
  ExportOutput(const std::string& out, const ExportFiles& files, bool force, const std::vector<std::string>& inputs,
               const std::vector<TensorSpec>& specs, const std::map<std::string, std::string>& metadata);

  TensorFileWriter& writer(size_t file) { return *writers_.at(file); }
  // Writes file `name` of the output's directory with `contents` (a directory OUT only).
  void add_file(const std::string& name, const std::string& contents);

  // Completes every file, writes the index (when there is one) and puts the output in place;
  // returns the final paths, the index last.
  std::vector<std::string> commit();

 private:
  ExportFiles files_;
  StagedOutput staged_;
  std::vector<std::unique_ptr<TensorFileWriter>> writers_;
  std::string index_path_;
};

}  // namespace fpg::app::convert
