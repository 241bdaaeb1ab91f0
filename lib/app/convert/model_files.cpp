#include "app/convert/model_files.h"

#include <filesystem>

#include "core/tensor_file.h"

namespace fpg::app::convert {
namespace fs = std::filesystem;

OutputLayout plan_output_files(const TensorFiles& in, const std::string& out) {
  OutputLayout layout;
  layout.kind = output_kind(out);
  std::vector<size_t> all(in.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;

  if (layout.kind == OutputKind::file) {
    layout.files.push_back({fs::path(out).filename().string(), all});
    return layout;
  }
  if (layout.kind == OutputKind::directory && !in.sharded()) {
    layout.files.push_back({tensor_file_format().model_file_name(), all});
    return layout;
  }
  layout.index_name = layout.kind == OutputKind::index ? fs::path(out).filename().string()
                                                       : tensor_file_format().index_file_name();
  layout.files.resize(in.shard_count());
  for (size_t s = 0; s < in.shard_count(); ++s)
    layout.files[s].name = fs::path(in.shard_path(s)).filename().string();
  for (size_t i = 0; i < in.size(); ++i) layout.files[in.tensors()[i].shard].tensors.push_back(i);
  return layout;
}

std::vector<std::string> input_files(const TensorFiles& in) {
  std::vector<std::string> inputs = {in.source()};
  for (size_t i = 0; i < in.shard_count(); ++i) inputs.push_back(in.shard_path(i));
  return inputs;
}

}  // namespace fpg::app::convert
