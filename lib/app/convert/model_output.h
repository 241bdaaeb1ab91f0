// The output side of a safetensors conversion: OUT's files planned (model_files.h) and staged
// (staged_output.h), one Writer per file declared up front and filled by the conversion, the model
// directory's other files carried over, then everything committed together.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "app/convert/model_files.h"
#include "app/convert/staged_output.h"
#include "core/progress.h"
#include "core/tensor_file.h"
#include "core/thread_pool.h"

namespace fpg::app::convert {

class ModelOutput {
 public:
  // Plans and stages OUT: UsageError for an OUT that exists (without force) or would replace an
  // input. A directory or index OUT of a model directory gets its companion files
  // (model_dir_files.h), config.json with `quantization_config` (JSON text) set, or removed when
  // empty; not when OUT's directory is IN's own (they are there already, and IN is never written).
  ModelOutput(const TensorFiles& in, const std::string& out, bool force,
              std::map<std::string, std::string> metadata, const std::string& quantization_config);

  const OutputLayout& layout() const { return layout_; }
  // True when OUT gets a config.json, the one that declares the quantization to loaders.
  bool writes_config() const { return writes_config_; }

  // Declares an output tensor of file `file` (before open()).
  void declare(size_t file, TensorSpec spec);
  // Creates every file in the staging directory. Nothing is under OUT until commit().
  void open();
  TensorFileWriter& writer(size_t file) { return *writers_.at(file); }

  // Copies input tensor `entry` unchanged into file `file`, in slabs spread over the pool.
  void copy_tensor(size_t file, const TensorFiles::Entry& entry, ThreadPool& pool, Progress& progress);

  // Completes every file, writes the index (when there is one), puts the output in place; returns
  // the final paths, the index last.
  std::vector<std::string> commit();

 private:
  void carry_companions(const std::string& quantization_config);

  const TensorFiles& in_;
  OutputLayout layout_;
  std::map<std::string, std::string> metadata_;
  StagedOutput staged_;
  std::vector<std::string> paths_;       // staged path of each file of layout_
  std::string index_path_;               // staged path of the index, or empty
  std::vector<std::string> companions_;  // final paths of the carried files
  bool writes_config_ = false;
  std::vector<std::vector<TensorSpec>> specs_;
  std::vector<std::unique_ptr<TensorFileWriter>> writers_;
};

// Bytes a slab of work should cover: large enough to amortize dispatch, small enough to bound memory.
constexpr uint64_t kSlabBytes = uint64_t{4} << 20;

}  // namespace fpg::app::convert
