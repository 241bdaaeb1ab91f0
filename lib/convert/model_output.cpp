#include "convert/model_output.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "formats/safetensors/index.h"

namespace fpg::convert {

ModelOutput::ModelOutput(const safetensors::Model& in, OutputLayout layout,
                         std::map<std::string, std::string> metadata)
    : in_(in), layout_(std::move(layout)), metadata_(std::move(metadata)), specs_(layout_.files.size()) {}

void ModelOutput::declare(size_t file, safetensors::TensorSpec spec) {
  if (!writers_.empty()) throw InternalError("convert: tensor declared after the output was opened");
  specs_.at(file).push_back(std::move(spec));
}

void ModelOutput::open() {
  for (size_t f = 0; f < layout_.files.size(); ++f)
    writers_.push_back(std::make_unique<safetensors::Writer>(layout_.files[f].path, specs_[f], metadata_));
}

void ModelOutput::copy_tensor(size_t file, const safetensors::Model::Entry& entry, ThreadPool& pool,
                              Progress& progress) {
  safetensors::Writer& w = writer(file);
  const size_t idx = w.index(entry.info->name);
  const uint8_t* src = in_.data(entry);
  const uint64_t n = entry.info->nbytes();
  const uint64_t slabs = (n + kSlabBytes - 1) / kSlabBytes;
  pool.parallel_for(slabs, [&](size_t s) {
    const uint64_t lo = s * kSlabBytes, len = std::min(kSlabBytes, n - lo);
    w.write(idx, lo, src + lo, len);
    progress.advance(len);
  });
}

std::vector<std::string> ModelOutput::commit() {
  std::vector<std::string> paths;
  for (auto& w : writers_) {
    w->commit();
    paths.push_back(w->path());
  }
  if (layout_.index_path.empty()) return paths;

  safetensors::ShardIndex index;
  if (const auto* src = in_.index()) index.extra_metadata_json = src->extra_metadata_json;
  uint64_t total = 0;
  for (size_t f = 0; f < writers_.size(); ++f) {
    const std::string shard = std::filesystem::path(layout_.files[f].path).filename().string();
    for (const auto& t : writers_[f]->tensors()) {
      index.weight_map[t.name] = shard;
      total += t.nbytes();
    }
  }
  index.total_size = total;
  safetensors::write_index(layout_.index_path, index);
  paths.push_back(layout_.index_path);
  return paths;
}

}  // namespace fpg::convert
