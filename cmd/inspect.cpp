// fpgather inspect: what a safetensors model holds (tensors, dtypes, shapes, bytes, metadata).
#include <map>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "core/dtype.h"
#include "formats/safetensors/model.h"

namespace fpg::cli {
namespace {

struct InspectArgs {
  std::string path;
};

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int run_inspect(const InspectArgs& a, const GlobalOptions& g) {
  const auto model = safetensors::Model::open(a.path);
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_dtype;  // dtype -> (tensors, bytes)
  uint64_t numel = 0;
  for (const auto& e : model.tensors()) {
    auto& d = by_dtype[std::string(dtype_name(e.info->dtype))];
    d.first += 1;
    d.second += e.info->nbytes();
    numel += e.info->numel;
  }
  if (g.json) {
    nlohmann::json j;
    j["path"] = a.path;
    j["format"] = "safetensors";
    j["sharded"] = model.sharded();
    j["files"] = nlohmann::json::array();
    for (size_t s = 0; s < model.shard_count(); ++s)
      j["files"].push_back({{"path", model.shard(s).path()}, {"bytes", model.shard(s).file_size()},
                            {"header_bytes", model.shard(s).header_size()}});
    j["metadata"] = model.metadata();
    j["tensors"] = nlohmann::json::array();
    for (const auto& e : model.tensors()) {
      nlohmann::json t = {{"name", e.info->name}, {"dtype", dtype_name(e.info->dtype)},
                          {"shape", e.info->shape},  {"numel", e.info->numel},
                          {"bytes", e.info->nbytes()}};
      if (model.sharded()) t["file"] = model.shard(e.shard).path();
      j["tensors"].push_back(t);
    }
    j["totals"] = {{"tensors", model.size()}, {"numel", numel}, {"bytes", model.total_bytes()}};
    for (const auto& [dt, v] : by_dtype) j["totals"]["by_dtype"][dt] = {{"tensors", v.first}, {"bytes", v.second}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s: safetensors, %zu file%s, %zu tensors, %llu elements, %.2f MB\n", a.path.c_str(),
              model.shard_count(), model.shard_count() == 1 ? "" : "s", model.size(),
              static_cast<unsigned long long>(numel), model.total_bytes() / 1e6);
  if (!model.metadata().empty()) {
    std::printf("metadata:\n");
    for (const auto& [k, v] : model.metadata()) std::printf("  %s: %s\n", k.c_str(), v.c_str());
  }
  size_t width = 4;
  for (const auto& e : model.tensors()) width = std::max(width, e.info->name.size());
  std::printf("%-*s  %-8s  %-20s  %12s%s\n", static_cast<int>(width), "name", "dtype", "shape", "bytes",
              model.sharded() ? "  file" : "");
  for (const auto& e : model.tensors()) {
    std::string file;
    if (model.sharded()) {
      const std::string& p = model.shard(e.shard).path();
      file = "  " + p.substr(p.find_last_of('/') + 1);
    }
    std::printf("%-*s  %-8s  %-20s  %12llu%s\n", static_cast<int>(width), e.info->name.c_str(),
                std::string(dtype_name(e.info->dtype)).c_str(), shape_text(e.info->shape).c_str(),
                static_cast<unsigned long long>(e.info->nbytes()), file.c_str());
  }
  std::printf("totals by dtype:\n");
  for (const auto& [dt, v] : by_dtype)
    std::printf("  %-8s %6llu tensors %14llu bytes\n", dt.c_str(), static_cast<unsigned long long>(v.first),
                static_cast<unsigned long long>(v.second));
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect", "Show what a safetensors model holds");
  cmd->add_option("PATH", args->path, "A .safetensors file, an index .json, or a directory holding one")->required();
  cmd->callback([args, &global, &run] { run = [args, &global] { return run_inspect(*args, global); }; });
}

}  // namespace fpg::cli
