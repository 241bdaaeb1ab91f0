#include "formats/dcp/megatron/parallel_report.h"

#include <map>

#include <fmt/format.h>
#include <fmt/printf.h>

#include "core/printable.h"
#include "formats/dcp/checkpoint_dir.h"
#include "layout/describe.h"
#include "layout/layout_json.h"

namespace fpg::dcp {

namespace {

// Per storage-file rank, the group ranks it holds: (group, DP rank).
std::map<uint64_t, std::vector<std::pair<const OptimizerGroup*, uint64_t>>> ranks_by_file(const DcpParams& params) {
  std::map<uint64_t, std::vector<std::pair<const OptimizerGroup*, uint64_t>>> out;
  for (const OptimizerGroup& g : params.groups()) {
    const std::vector<uint64_t>& f = g.rank_files;
    const uint64_t step = f.size() > 1 ? f[1] - f[0] : 1;
    for (uint64_t r : f)
      if ((r - f[0]) % step == 0) out[r].push_back({&g, (r - f[0]) / step});
  }
  return out;
}

// The name of each rank's data file, from one pass over the storage entries (consecutive entries
// mostly name the same file: each name is parsed once per run of them).
std::map<uint64_t, std::string> rank_file_names(const Reader& reader) {
  std::map<uint64_t, std::string> out;
  const std::string* last = nullptr;
  for (const StorageEntry& s : reader.metadata().storage) {
    if (last && *last == s.relative_path) continue;
    last = &s.relative_path;
    if (const auto r = storage_file_rank(s.relative_path)) out.emplace(*r, s.relative_path);
  }
  return out;
}

std::string file_of(const std::map<uint64_t, std::string>& names, uint64_t rank) {
  const auto it = names.find(rank);
  return it != names.end() ? it->second : "rank " + std::to_string(rank);
}

std::string coordinates(const OptimizerGroup& g, uint64_t dp) {
  return g.expert ? fmt::format("expert tp {}, ep {}, pp {}, expert dp {}", g.tp, g.ep, g.pp, dp)
                  : fmt::format("tp {}, pp {}, dp {}", g.tp, g.pp, dp);
}

std::string stages_string(const ParallelSizes& p) {
  std::string s;
  uint64_t first = 0;
  for (size_t i = 0; i < p.stage_layers.size(); ++i) {
    s += fmt::format("{}[{}, {})", i ? ", " : "", first, first + p.stage_layers[i]);
    first += p.stage_layers[i];
  }
  return s;
}

std::string layout_string(const OptimizerGroup& g) {
  const RecoveredLayout& L = g.layout;
  std::string l = fmt::format("dp {}{}, {} buffer{}", g.dp, g.dp_is_smallest ? " (the smallest the buckets allow)" : "",
                              L.layout.buffers.size(), L.layout.buffers.size() == 1 ? "" : "s");
  if (L.bucket_size_lo)
    l += fmt::format(", bucket_size in ({}, {}]", *L.bucket_size_lo,
                     L.bucket_size_hi ? std::to_string(*L.bucket_size_hi) : std::string("inf"));
  else
    l += ", one bucket per buffer";
  return l + (L.layout.pad_for_nccl ? ", bucket ends padded to lcm(dp, 128, 65536)" : ", bucket ends padded to lcm(dp, 128)");
}

}  // namespace

std::string parallel_sizes_string(const ParallelSizes& p) {
  std::string s = p.cp > 1 ? fmt::format("TP {} × PP {} × CP {} × DP {}, the optimizer sharded over DP × CP = {}",
                                         p.tp, p.pp, p.cp, p.dp / p.cp, p.dp)
                           : fmt::format("TP {} × PP {} × DP {}", p.tp, p.pp, p.dp);
  if (p.ep > 1 || p.expert_tp > 1 || p.expert_dp != p.dp)
    s += fmt::format(", experts EP {} × expert TP {} × expert DP {}", p.ep, p.expert_tp, p.expert_dp);
  return s;
}

std::vector<std::string> parallel_lines(const Reader& reader, const DcpParams& params) {
  std::vector<std::string> t;
  if (!params.parallel()) return t;
  const ParallelSizes& p = *params.parallel();
  t.push_back(fmt::format("  parallel layout: {} ({} optimizer group{}); pipeline stages hold layers {}",
                          parallel_sizes_string(p), params.groups().size(), params.groups().size() == 1 ? "" : "s",
                          stages_string(p)));
  const auto names = rank_file_names(reader);
  for (const auto& [rank, held] : ranks_by_file(params)) {
    std::string l = "    " + printable(file_of(names, rank)) + ":";
    for (size_t i = 0; i < held.size(); ++i) l += (i ? "; " : " ") + coordinates(*held[i].first, held[i].second);
    t.push_back(l);
  }
  return t;
}

std::vector<std::string> group_layout_lines(const DcpParams& params, bool full) {
  std::vector<std::string> t;
  for (const OptimizerGroup& g : params.groups()) {
    const std::string where = g.expert ? fmt::format("expert tp {}, ep {}, pp {}", g.tp, g.ep, g.pp)
                                       : fmt::format("tp {}, pp {}", g.tp, g.pp);
    t.push_back(fmt::format("optimizer group {} ({}): {}, {} local parameters", quoted_name(g.prefix), where,
                            layout_string(g), g.params.size()));
    if (!full) continue;
    const std::string d = layout::describe(g.layout.layout);
    size_t at = 0;
    while (at < d.size()) {
      const size_t nl = d.find('\n', at);
      t.push_back("  " + d.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  }
  return t;
}

nlohmann::json parallel_json(const Reader& reader, const DcpParams& params, bool layouts) {
  if (!params.parallel()) return nullptr;
  const ParallelSizes& p = *params.parallel();
  nlohmann::json j = {{"tp", p.tp}, {"pp", p.pp}, {"dp", p.dp}, {"cp", p.cp}, {"ep", p.ep}, {"expert_tp", p.expert_tp},
                      {"expert_dp", p.expert_dp}, {"stage_layers", p.stage_layers}};
  j["groups"] = nlohmann::json::array();
  for (const OptimizerGroup& g : params.groups()) {
    nlohmann::json gj = {{"prefix", g.prefix}, {"index", g.index}, {"expert", g.expert}, {"tp", g.tp}, {"pp", g.pp},
                         {"dp", g.dp}, {"dp_is_smallest", g.dp_is_smallest},
                         {"buffers", g.layout.layout.buffers.size()}, {"pad_for_nccl", g.layout.layout.pad_for_nccl},
                         {"local_parameters", g.params.size()}, {"rank_files", g.rank_files}};
    if (g.expert) gj["ep"] = g.ep;
    if (layouts) gj["layout"] = layout::to_json_value(g.layout.layout);
    if (g.layout.bucket_size_lo)
      gj["bucket_size_range"] = {*g.layout.bucket_size_lo,
                                 g.layout.bucket_size_hi ? nlohmann::json(*g.layout.bucket_size_hi) : nlohmann::json()};
    j["groups"].push_back(std::move(gj));
  }
  j["files"] = nlohmann::json::array();
  const auto names = rank_file_names(reader);
  for (const auto& [rank, held] : ranks_by_file(params)) {
    nlohmann::json fj = {{"file", file_of(names, rank)}, {"rank", rank}, {"holds", nlohmann::json::array()}};
    for (const auto& [g, dp] : held) {
      nlohmann::json h = {{"group", g->prefix}, {"tp", g->tp}, {"pp", g->pp}, {"dp", dp}, {"expert", g->expert}};
      if (g->expert) h["ep"] = g->ep;
      fj["holds"].push_back(std::move(h));
    }
    j["files"].push_back(std::move(fj));
  }
  return j;
}

}  // namespace fpg::dcp
