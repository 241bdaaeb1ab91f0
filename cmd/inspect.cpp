// fpgather inspect PATH [--keys | --key NAME | --layouts]: what any checkpoint fpgather reads holds — an fpgather
// checkpoint, a PyTorch DCP / Megatron torch_dist directory, a safetensors model — as its format
// describes it (app/inspect/inspect.h); --key, one key's chunks and storage.
#include <nlohmann/json.hpp>

#include "app/inspect/inspect.h"
#include "cli.h"
#include "json_output.h"
#include "core/error.h"
#include "core/printable.h"

namespace fpg::cli {
namespace {

struct InspectArgs {
  std::string path;
  bool keys = false;
  bool layouts = false;
  std::string key;
};

void print(const nlohmann::json& document, const std::vector<std::string>& text, bool json) {
  if (json) {
    print_json(document);
    return;
  }
  // The formats escape the names they put into lines; printable() again (it leaves its own output as
  // it is) keeps any line that missed it from starting another.
  for (const auto& line : text) std::printf("%s\n", printable(line).c_str());
}

int run_inspect(const InspectArgs& a, const GlobalOptions& g) {
  if (!a.key.empty()) {
    ckpt::KeyReport k;
    try {
      k = app::inspect::inspect_key(a.path, a.key);
    } catch (const UsageError& e) {
      throw UsageError(std::string(e.what()) + " (see inspect --keys)");
    }
    print(k.document, k.text, g.json);
    return 0;
  }
  ckpt::SummaryOptions o;
  o.keys = a.keys;
  o.layouts = a.layouts;
  o.progress = progress_enabled(g);
  const ckpt::CheckpointSummary s = app::inspect::inspect(a.path, o);
  for (const auto& w : s.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  print(s.document, s.text, g.json);
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect", "Show what a safetensors model, an fpgather checkpoint or a PyTorch DCP / Megatron torch_dist checkpoint holds");
  cmd->add_option("PATH", args->path,
                  "A .safetensors file, an index .json, a directory holding one, a checkpoint directory "
                  "(or one holding `latest`), or a DCP / Megatron torch_dist directory (holding .metadata)")->required();
  cmd->add_flag("--keys", args->keys, "List every key");
  cmd->add_flag("--layouts", args->layouts,
                "Every optimizer group's buckets and shards (a model-parallel Megatron checkpoint gets one line per "
                "group without it)");
  cmd->add_option("--key", args->key, "One key's chunks and padding (a safetensors tensor's file and offset)");
  cmd->callback([args, &global, &run] { run = [args, &global] { return run_inspect(*args, global); }; });
}

}  // namespace fpg::cli
