// The output side of a safetensors conversion: one Writer per output file, declared up front, filled
// by the conversion, then committed together (every file renamed into place, the index last).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "convert/model_files.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "formats/safetensors/model.h"
#include "formats/safetensors/writer.h"

namespace fpg::convert {

class ModelOutput {
 public:
  ModelOutput(const safetensors::Model& in, OutputLayout layout, std::map<std::string, std::string> metadata);

  const OutputLayout& layout() const { return layout_; }

  // Declares an output tensor of file `file` (before open()).
  void declare(size_t file, safetensors::TensorSpec spec);
  // Creates every file under its temporary name. Nothing exists under a final name until commit().
  void open();
  safetensors::Writer& writer(size_t file) { return *writers_.at(file); }

  // Copies input tensor `entry` unchanged into file `file`, in slabs spread over the pool.
  void copy_tensor(size_t file, const safetensors::Model::Entry& entry, ThreadPool& pool, Progress& progress);

  // Renames every file into place, then writes the index (when there is one); returns the paths.
  std::vector<std::string> commit();

 private:
  const safetensors::Model& in_;
  OutputLayout layout_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::vector<safetensors::TensorSpec>> specs_;
  std::vector<std::unique_ptr<safetensors::Writer>> writers_;
};

// Bytes a slab of work should cover: large enough to amortize dispatch, small enough to bound memory.
constexpr uint64_t kSlabBytes = uint64_t{4} << 20;

}  // namespace fpg::convert
