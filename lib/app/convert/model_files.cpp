#include "app/convert/model_files.h"

#include <filesystem>

#include "formats/safetensors/index.h"

namespace fpg::app::convert {
namespace fs = std::filesystem;

OutputLayout plan_output_files(const safetensors::Model& in, const std::string& out) {
  OutputLayout layout;
  layout.kind = output_kind(out);
  std::vector<size_t> all(in.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;

  if (layout.kind == OutputKind::file) {
    layout.files.push_back({fs::path(out).filename().string(), all});
    return layout;
  }
  if (layout.kind == OutputKind::directory && !in.sharded()) {
    layout.files.push_back({"model.safetensors", all});
    return layout;
  }
  layout.index_name = layout.kind == OutputKind::index ? fs::path(out).filename().string()
                                                       : std::string(safetensors::kIndexFileName);
  layout.files.resize(in.shard_count());
  for (size_t s = 0; s < in.shard_count(); ++s)
    layout.files[s].name = fs::path(in.shard(s).path()).filename().string();
  for (size_t i = 0; i < in.size(); ++i) layout.files[in.tensors()[i].shard].tensors.push_back(i);
  return layout;
}

std::vector<std::string> input_files(const safetensors::Model& in) {
  std::vector<std::string> inputs = {in.source()};
  for (size_t i = 0; i < in.shard_count(); ++i) inputs.push_back(in.shard(i).path());
  return inputs;
}

}  // namespace fpg::app::convert
