// fpgather inspect: what a safetensors model holds (tensors, dtypes, shapes, bytes, metadata), or
// what an fpgather checkpoint holds (summary, --keys, --key NAME).
#include <sys/stat.h>

#include <map>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "inspect_dcp.h"
#include "core/dtype.h"
#include "core/error.h"
#include "formats/dcp/reader.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/summary.h"
#include "formats/fpckpt/validate.h"
#include "formats/safetensors/model.h"

namespace fpg::cli {
namespace {

struct InspectArgs {
  std::string path;
  bool keys = false;
  std::string key;
};

bool is_checkpoint(const std::string& path) {
  struct stat st {};
  return stat((path + "/" + fpckpt::kIndexFile).c_str(), &st) == 0 ||
         stat((path + "/" + fpckpt::kLatestFile).c_str(), &st) == 0;
}

std::string mb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
  return buf;
}

nlohmann::json sizes_json(const fpckpt::KindSizes& k) {
  return {{"keys", k.keys}, {"numel", k.numel}, {"logical_bytes", k.logical_bytes}, {"stored_bytes", k.stored_bytes},
          {"chunks", k.chunks}, {"padding_elements", k.padding_elems}};
}

std::string flags_text(uint32_t f) {
  std::string s;
  if (f & ckpt::kFilterShuffle) s += "shuffle+";
  s += (f & ckpt::kFilterZstd) ? "zstd" : "raw";
  return s;
}

int inspect_key(const fpckpt::CheckpointReader& r, const std::string& name, bool json) {
  const ckpt::Index& ix = r.index();
  const long k = r.find_key(name);
  if (k < 0) throw UsageError(r.dir() + ": no key named '" + name + "' (see inspect --keys)");
  const ckpt::Key& key = ix.keys[k];
  const fpckpt::KeyDetail d = fpckpt::describe_key(ix, static_cast<uint32_t>(k));
  if (json) {
    nlohmann::json j = {{"key", key.name}, {"kind", ckpt::kind_name(key.kind)}, {"dtype", dtype_name(key.dtype)},
                        {"shape", key.shape}, {"numel", key.numel()}, {"chunks", nlohmann::json::array()},
                        {"padding", nlohmann::json::array()}};
    for (const auto& c : d.chunks) {
      j["chunks"].push_back({{"lo", c.lo}, {"hi", c.hi}, {"file", c.file},
                             {"dataset", "/" + std::to_string(c.dataset)},
                             {"chunk", c.chunk ? nlohmann::json(*c.chunk) : nlohmann::json()},
                             {"stored_bytes", c.stored_bytes}, {"encoding", flags_text(c.flags)},
                             {"xxh3_stored", c.checksum_stored}, {"xxh3_logical", c.checksum_logical}});
    }
    for (const auto& [lo, hi] : d.padding) j["padding"].push_back({{"lo", lo}, {"hi", hi}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s: %s %s %s, %llu elements, %zu chunks, %zu padding intervals\n", key.name.c_str(),
              std::string(ckpt::kind_name(key.kind)).c_str(), std::string(dtype_name(key.dtype)).c_str(),
              shape_string(key.shape).c_str(), static_cast<unsigned long long>(key.numel()), d.chunks.size(),
              d.padding.size());
  std::printf("%-24s  %-16s  %-12s  %12s  %-12s  %s\n", "range", "file", "location", "stored", "encoding", "xxh3 stored/logical");
  for (const auto& c : d.chunks) {
    const std::string range = "[" + std::to_string(c.lo) + ", " + std::to_string(c.hi) + ")";
    const std::string loc = "/" + std::to_string(c.dataset) + "#" + (c.chunk ? std::to_string(*c.chunk) : "?");
    std::printf("%-24s  %-16s  %-12s  %12u  %-12s  %016llx/%016llx\n", range.c_str(), c.file.empty() ? "?" : c.file.c_str(),
                loc.c_str(), c.stored_bytes, flags_text(c.flags).c_str(),
                static_cast<unsigned long long>(c.checksum_stored), static_cast<unsigned long long>(c.checksum_logical));
  }
  for (const auto& [lo, hi] : d.padding)
    std::printf("[%llu, %llu)  padding\n", static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi));
  return 0;
}

// How far the checkpoint's own checksums vouch for it.
std::string integrity_text(const ckpt::Index& ix) {
  switch (ix.index_checksum) {
    case ckpt::IndexChecksum::mismatch: return "INDEX ALTERED: " + ix.index_checksum_detail;
    case ckpt::IndexChecksum::absent: return fpckpt::integrity_note(ix.version);
    case ckpt::IndexChecksum::verified: break;
  }
  return "index checksum verified, chunk checksums bound to key and offset";
}

int inspect_checkpoint(const InspectArgs& a, bool json) {
  // An altered index is shown, not refused: inspect is where one looks at a broken checkpoint.
  const fpckpt::CheckpointReader r(a.path, fpckpt::ChunkReads::direct, fpckpt::IndexCheck::report);
  if (r.index().index_checksum == ckpt::IndexChecksum::mismatch)
    std::fprintf(stderr, "warning: %s/%s does not match its checksum (%s): it was changed after it was written\n",
                 r.dir().c_str(), fpckpt::kIndexFile, r.index().index_checksum_detail.c_str());
  if (!a.key.empty()) return inspect_key(r, a.key, json);
  const auto s = fpckpt::summarize(r.index());
  if (json) {
    nlohmann::json j = {{"path", r.dir()}, {"format", "fpgather checkpoint"}, {"format_version", s.format_version},
                        {"producer", s.producer},
                        {"index_checksum", std::string(ckpt::index_checksum_name(r.index().index_checksum))},
                        {"chunk_checksums_bound", ckpt::binds_chunk_checksums(r.index().version)}, {"step", s.step}, {"model", s.model}, {"layout", s.layout},
                        {"optimizer", s.optimizer}, {"fp8", s.fp8}, {"documents", s.documents},
                        {"files", s.files}, {"file_bytes", s.file_bytes}, {"runs", s.runs},
                        {"compression_ratio", s.compression_ratio}, {"totals", sizes_json(s.total)}};
    for (int k = 0; k < ckpt::kKeyKindCount; ++k)
      if (s.by_kind[k].keys) j["by_kind"][std::string(ckpt::kind_name(static_cast<ckpt::KeyKind>(k)))] = sizes_json(s.by_kind[k]);
    if (a.keys) {
      j["keys"] = nlohmann::json::array();
      for (const auto& kr : s.keys)
        j["keys"].push_back({{"name", kr.name}, {"kind", ckpt::kind_name(kr.kind)}, {"dtype", dtype_name(kr.dtype)},
                             {"shape", kr.shape}, {"numel", kr.numel}, {"chunks", kr.chunks},
                             {"padding_intervals", kr.padding_intervals}, {"padding_elements", kr.padding_elems},
                             {"logical_bytes", kr.logical_bytes}, {"stored_bytes", kr.stored_bytes}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  auto line = [](const char* what, const std::string& v) { std::printf("%-12s %s\n", what, v.empty() ? "-" : v.c_str()); };
  std::printf("%s: fpgather checkpoint\n", r.dir().c_str());
  line("format", s.format_version);
  line("producer", s.producer);
  line("integrity", integrity_text(r.index()));
  line("step", s.step);
  line("model", s.model);
  line("layout", s.layout);
  line("optimizer", s.optimizer);
  line("fp8 recipe", s.fp8);
  std::string docs;
  for (const auto& d : s.documents) docs += (docs.empty() ? "" : ", ") + d;
  line("documents", docs);
  char ratio[64];
  std::snprintf(ratio, sizeof ratio, "%.3fx (%s logical, %s stored)", s.compression_ratio, mb(s.total.logical_bytes).c_str(),
                mb(s.total.stored_bytes).c_str());
  line("compression", ratio);
  line("files", std::to_string(s.files) + " data files, " + mb(s.file_bytes) + ", " + std::to_string(s.runs) + " runs");
  std::printf("%-16s %6s %14s %14s %14s %8s %12s\n", "kind", "keys", "elements", "logical bytes", "stored bytes", "chunks", "padding");
  auto row = [](const std::string& name, const fpckpt::KindSizes& k) {
    std::printf("%-16s %6llu %14llu %14llu %14llu %8llu %12llu\n", name.c_str(), static_cast<unsigned long long>(k.keys),
                static_cast<unsigned long long>(k.numel), static_cast<unsigned long long>(k.logical_bytes),
                static_cast<unsigned long long>(k.stored_bytes), static_cast<unsigned long long>(k.chunks),
                static_cast<unsigned long long>(k.padding_elems));
  };
  for (int k = 0; k < ckpt::kKeyKindCount; ++k)
    if (s.by_kind[k].keys) row(std::string(ckpt::kind_name(static_cast<ckpt::KeyKind>(k))), s.by_kind[k]);
  row("total", s.total);
  if (a.keys) {
    size_t width = 4;
    for (const auto& kr : s.keys) width = std::max(width, kr.name.size());
    std::printf("\n%-*s  %-15s  %-8s  %-16s  %7s  %9s  %12s\n", static_cast<int>(width), "key", "kind", "dtype", "shape",
                "chunks", "padding", "stored");
    for (const auto& kr : s.keys)
      std::printf("%-*s  %-15s  %-8s  %-16s  %7llu  %9llu  %12llu\n", static_cast<int>(width), kr.name.c_str(),
                  std::string(ckpt::kind_name(kr.kind)).c_str(), std::string(dtype_name(kr.dtype)).c_str(),
                  shape_string(kr.shape).c_str(), static_cast<unsigned long long>(kr.chunks),
                  static_cast<unsigned long long>(kr.padding_elems), static_cast<unsigned long long>(kr.stored_bytes));
  }
  return 0;
}

int run_inspect(const InspectArgs& a, const GlobalOptions& g) {
  if (is_checkpoint(a.path)) return inspect_checkpoint(a, g.json);
  if (dcp::is_dcp_directory(a.path)) return inspect_dcp(a.path, a.keys, a.key, g.json);
  if (a.keys || !a.key.empty()) throw UsageError(a.path + ": --keys and --key apply to checkpoints");
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
                std::string(dtype_name(e.info->dtype)).c_str(), shape_string(e.info->shape).c_str(),
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
  auto* cmd = app.add_subcommand("inspect", "Show what a safetensors model, an fpgather checkpoint or a PyTorch DCP / Megatron torch_dist checkpoint holds");
  cmd->add_option("PATH", args->path,
                  "A .safetensors file, an index .json, a directory holding one, a checkpoint directory "
                  "(or one holding `latest`), or a DCP / Megatron torch_dist directory (holding .metadata)")->required();
  cmd->add_flag("--keys", args->keys, "Checkpoint: list every key");
  cmd->add_option("--key", args->key, "Checkpoint: one key's chunks and padding");
  cmd->callback([args, &global, &run] { run = [args, &global] { return run_inspect(*args, global); }; });
}

}  // namespace fpg::cli
