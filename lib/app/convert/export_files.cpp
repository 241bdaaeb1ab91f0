#include "app/convert/export_files.h"

#include <filesystem>

#include "core/error.h"
#include "core/fs.h"
#include "core/tensor_file.h"

namespace fpg::app::convert {

ExportFiles plan_export_files(const std::vector<uint64_t>& tensor_bytes, const std::string& out, uint64_t max_shard) {
  ExportFiles f;
  f.kind = output_kind(out);
  std::vector<size_t> all(tensor_bytes.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  uint64_t total = 0;
  for (uint64_t b : tensor_bytes) total += b;
  if (f.kind == OutputKind::file || (f.kind == OutputKind::directory && total <= max_shard)) {
    f.names = {f.kind == OutputKind::file ? std::filesystem::path(out).filename().string()
                                          : tensor_file_format().model_file_name()};
    f.tensors = {all};
    return f;
  }
  f.index_name = f.kind == OutputKind::index ? std::filesystem::path(out).filename().string()
                                             : tensor_file_format().index_file_name();
  // HF's rule: a shard closes before the tensor that would take it past the limit (a tensor larger
  // than the limit gets a shard of its own).
  uint64_t in_shard = 0;
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    if (f.tensors.empty() || (in_shard > 0 && in_shard + tensor_bytes[i] > max_shard)) {
      f.tensors.emplace_back();
      in_shard = 0;
    }
    f.tensors.back().push_back(i);
    in_shard += tensor_bytes[i];
  }
  for (size_t s = 0; s < f.tensors.size(); ++s) f.names.push_back(tensor_file_format().shard_file_name(s, f.tensors.size()));
  return f;
}

ExportOutput::ExportOutput(const std::string& out, const ExportFiles& files, bool force,
                           const std::vector<std::string>& inputs, const std::vector<TensorSpec>& specs,
                           const std::map<std::string, std::string>& metadata)
    : files_(files), staged_(out, files.kind, force, inputs) {
  std::vector<std::string> paths;
  for (const auto& n : files_.names) paths.push_back(staged_.stage(n));
  if (!files_.index_name.empty()) index_path_ = staged_.stage(files_.index_name);
  for (size_t f = 0; f < files_.names.size(); ++f) {
    std::vector<TensorSpec> mine;
    for (size_t i : files_.tensors[f]) mine.push_back(specs.at(i));
    writers_.push_back(tensor_file_format().create(paths[f], mine, metadata));
  }
}

void ExportOutput::add_file(const std::string& name, const std::string& contents) {
  if (files_.kind != OutputKind::directory) throw InternalError("convert: a side file " + name + " for a file output");
  fs::write_file_atomic(staged_.stage(name), contents);
}

std::vector<std::string> ExportOutput::commit() {
  std::vector<std::string> paths;
  uint64_t total = 0;
  for (size_t f = 0; f < writers_.size(); ++f) {
    writers_[f]->commit();
    for (const auto& t : writers_[f]->tensors()) total += t.nbytes();
    paths.push_back(staged_.final_path(files_.names[f]));
  }
  if (!files_.index_name.empty()) {
    ShardIndex index;
    for (size_t f = 0; f < writers_.size(); ++f)
      for (const auto& t : writers_[f]->tensors()) index.weight_map[t.name] = files_.names[f];
    index.total_size = total;
    tensor_file_format().write_index(index_path_, index);
    paths.push_back(staged_.final_path(files_.index_name));
  }
  staged_.commit();
  return paths;
}

}  // namespace fpg::app::convert
