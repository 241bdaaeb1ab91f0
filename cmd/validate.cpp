// fpgather validate CKPT [--data]: each format's checks, from the index (metadata, header) alone, and
// with --data every chunk (item, tensor) re-read and decoded (app/inspect/validate.h). Exit 0 valid,
// 1 invalid, 3 unreadable.
#include <nlohmann/json.hpp>

#include "app/inspect/validate.h"
#include "cli.h"
#include "json_output.h"
#include "core/error.h"
#include "core/printable.h"

namespace fpg::cli {
namespace {

struct ValidateArgs {
  std::string path;
  bool data = false;
};

int run_validate(const ValidateArgs& a, const GlobalOptions& g) {
  ckpt::ValidateOptions o;
  o.data = a.data;
  o.progress = progress_enabled(g);
  const ckpt::ValidationReport rep = app::inspect::validate(a.path, o);
  const int code = !rep.readable ? static_cast<int>(ExitCode::io) : rep.problems.empty() ? 0 : 1;
  if (g.json) {
    nlohmann::json j = rep.document;
    j["path"] = rep.path;
    j["format"] = rep.format;
    j["readable"] = rep.readable;
    j["valid"] = code == 0;
    j["data_checked"] = a.data;
    j["problems"] = nlohmann::json::array();
    for (const auto& p : rep.problems)
      j["problems"].push_back({{"kind", ckpt::problem_kind_name(p.kind)}, {"key", p.key}, {"lo", p.lo}, {"hi", p.hi},
                               {"file", p.file}, {"message", p.message}});
    print_json(j);
    return code;
  }
  for (const auto& p : rep.problems) std::printf("%s\n", ckpt::to_string(p).c_str());
  if (!rep.readable) {
    std::printf("%s: unreadable\n", rep.path.c_str());
    return code;
  }
  for (const auto& n : rep.notes) std::printf("note: %s\n", printable(n).c_str());
  std::string facts;
  for (const auto& f : rep.facts) facts += (facts.empty() ? "" : ", ") + f;
  std::printf("%s: %s: %s; %zu problem%s\n", rep.path.c_str(), code == 0 ? "valid" : "INVALID", facts.c_str(),
              rep.problems.size(), rep.problems.size() == 1 ? "" : "s");
  return code;
}

}  // namespace

void register_validate(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto args = std::make_shared<ValidateArgs>();
  auto* cmd = app.add_subcommand("validate", "Check a checkpoint's index checksum, coverage, files, layout and (--data) chunk checksums");
  cmd->add_option("CKPT", args->path,
                  "A checkpoint directory, a directory holding `latest`, a PyTorch DCP / Megatron torch_dist "
                  "directory, or a safetensors model (file, index or directory)")->required();
  cmd->add_flag("--data", args->data, "Also re-read every chunk, verify its checksums and decode it");
  cmd->callback([args, &global, &run] { run = [args, &global] { return run_validate(*args, global); }; });
}

}  // namespace fpg::cli
