// fpgather validate CKPT [--data]: the index checksum, the coverage contract and file checks from the
// index alone, the layout check where the index records one, and with --data every chunk re-read and
// decoded.
// A PyTorch DCP / Megatron torch_dist directory gets DCP's rules with interval precision instead
// (validate_dcp.h). Exit 0 valid, 1 invalid, 3 unreadable.
#include <nlohmann/json.hpp>

#include "ckpt/version.h"
#include "cli.h"
#include "formats/dcp/reader.h"
#include "validate_dcp.h"
#include "core/error.h"
#include "formats/fpckpt/validate.h"

namespace fpg::cli {
namespace {

struct ValidateArgs {
  std::string path;
  bool data = false;
};

int run_validate(const ValidateArgs& a, const GlobalOptions& g) {
  if (dcp::is_dcp_directory(a.path)) return validate_dcp(a.path, a.data, g.json);
  fpckpt::ValidateOptions o;
  o.data = a.data;
  o.progress = progress_enabled(g);
  const auto rep = fpckpt::validate_checkpoint(a.path, o);
  const int code = !rep.readable ? static_cast<int>(ExitCode::io) : rep.problems.empty() ? 0 : 1;
  if (g.json) {
    nlohmann::json j = {{"path", rep.dir},
                        {"format_version", ckpt::to_string(rep.version)},
                        {"readable", rep.readable},
                        {"valid", code == 0},
                        {"data_checked", a.data},
                        {"layout_checked", rep.layout_checked},
                        {"index_checksum", std::string(ckpt::index_checksum_name(rep.index_checksum))},
                        {"chunk_checksums_bound", rep.chunk_checksums_bound},
                        {"keys", rep.keys},
                        {"chunks", rep.chunks},
                        {"padding_intervals", rep.padding},
                        {"files", rep.files},
                        {"chunks_read", rep.chunks_read},
                        {"bytes_read", rep.bytes_read},
                        {"problems", nlohmann::json::array()}};
    for (const auto& p : rep.problems)
      j["problems"].push_back({{"kind", ckpt::problem_kind_name(p.kind)}, {"key", p.key}, {"lo", p.lo}, {"hi", p.hi},
                               {"file", p.file}, {"message", p.message}});
    std::printf("%s\n", j.dump(2).c_str());
    return code;
  }
  for (const auto& p : rep.problems) std::printf("%s\n", ckpt::to_string(p).c_str());
  if (!rep.readable) {
    std::printf("%s: unreadable\n", rep.dir.c_str());
    return code;
  }
  if (const std::string note = fpckpt::integrity_note(rep.version); !note.empty()) std::printf("note: %s\n", note.c_str());
  std::printf("%s: %s: format %s, %llu keys, %llu chunks, %llu padding intervals, %llu files%s%s; %zu problem%s\n",
              rep.dir.c_str(), code == 0 ? "valid" : "INVALID", ckpt::to_string(rep.version).c_str(),
              static_cast<unsigned long long>(rep.keys), static_cast<unsigned long long>(rep.chunks),
              static_cast<unsigned long long>(rep.padding), static_cast<unsigned long long>(rep.files),
              rep.layout_checked ? ", layout checked" : "",
              a.data ? (", " + std::to_string(rep.chunks_read) + " chunks read").c_str() : "", rep.problems.size(),
              rep.problems.size() == 1 ? "" : "s");
  return code;
}

}  // namespace

void register_validate(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto args = std::make_shared<ValidateArgs>();
  auto* cmd = app.add_subcommand("validate", "Check a checkpoint's index checksum, coverage, files, layout and (--data) chunk checksums");
  cmd->add_option("CKPT", args->path, "A checkpoint directory, a directory holding `latest`, or a PyTorch DCP / Megatron torch_dist directory")->required();
  cmd->add_flag("--data", args->data, "Also re-read every chunk, verify its checksums and decode it");
  cmd->callback([args, &global, &run] { run = [args, &global] { return run_validate(*args, global); }; });
}

}  // namespace fpg::cli
