#include "formats/fpckpt/reshard_report.h"

#include <algorithm>

#include <fmt/printf.h>

#include "ckpt/chunk_codec.h"
#include "ckpt/key_names.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fpckpt/reshard_checkpoint.h"
#include "pipeline/config.h"

namespace fpg::fpckpt {
namespace {

std::string describe(const RecordedRun& r) {
  return "DP " + std::to_string(r.dp) + ", " + pipeline::dist_opt_name(r.config.dist_opt) + ", " +
         std::string(ckpt::state_layout_name(r.state_layout)) + " layout, bucket size " +
         (r.config.bucket_size ? std::to_string(*r.config.bucket_size) : std::string("none")) +
         (r.config.pad_for_nccl ? ", NCCL padding" : "") + ", accumulation " + std::to_string(r.accumulation);
}

ckpt::ReshardLayout layout_of(const RecordedRun& run) {
  ckpt::ReshardLayout l;
  l.dp = run.dp;
  l.dist_opt = pipeline::dist_opt_name(run.config.dist_opt);
  l.state_layout = std::string(ckpt::state_layout_name(run.state_layout));
  l.bucket_size = run.config.bucket_size;
  l.pad_for_nccl = run.config.pad_for_nccl;
  l.accumulation = run.accumulation;
  return l;
}

nlohmann::json layout_json(const ckpt::ReshardLayout& l) {
  return {{"dp", l.dp}, {"dist_opt", l.dist_opt}, {"state_layout", l.state_layout},
          {"bucket_size", l.bucket_size ? nlohmann::json(*l.bucket_size) : nlohmann::json()},
          {"pad_for_nccl", l.pad_for_nccl}, {"accumulation", l.accumulation}};
}

ReshardRequest request_of(const std::string& source, const std::string& target, const ckpt::ReshardTarget& t) {
  if (!t.megatron_form.empty())
    throw UsageError("megatron_form applies to Megatron torch_dist checkpoints; " + source + " is not one");
  if (t.tp || t.pp)
    throw UsageError("tp and pp apply to Megatron torch_dist checkpoints; " + source +
                     " is an fpgather checkpoint, whose state is data-parallel only");
  if (t.dp == 0) throw UsageError("dp must be at least 1");
  ReshardRequest q;
  q.source = source;
  q.target = target;
  q.options.dp = t.dp;
  if (!t.bucket_size.empty()) q.options.bucket_size = ckpt::parse_bucket_size(t.bucket_size);
  q.options.pad_for_nccl = t.pad_for_nccl;
  if (!t.dist_opt.empty()) {
    q.options.dist_opt = pipeline::parse_dist_opt(t.dist_opt);
    if (!q.options.dist_opt) throw UsageError("dist_opt must be bucketed or layerwise, not " + quoted_name(t.dist_opt));
  }
  if (!t.state_layout.empty()) {
    q.options.state_layout = ckpt::parse_state_layout(t.state_layout);
    if (!q.options.state_layout) throw UsageError("state_layout must be bucket or model, not " + quoted_name(t.state_layout));
  }
  q.options.accumulation = t.accumulation;
  if (!t.compression.empty()) q.compression = ckpt::parse_compression(t.compression, "compression");
  q.chunk_bytes = t.chunk_bytes;
  q.dry_run = t.dry_run;
  q.progress = t.progress;
  return q;
}

}  // namespace

ckpt::ReshardReport reshard_report(const std::string& source, const std::string& target, const ckpt::ReshardTarget& t) {
  const ReshardOutcome out = reshard_checkpoint(request_of(source, target, t));
  const ReshardTarget& plan = out.target;
  const ckpt::PlanSummary& s = out.summary;
  const ReshardRunOptions& ro = out.run_options;
  ckpt::ReshardReport r;
  r.source = out.source_dir;
  r.target = target;
  r.dry_run = t.dry_run;
  r.from = layout_of(plan.source);
  r.to = layout_of(plan.target);
  r.tensors = s.keys;
  r.bytes_read = out.result ? out.result->bytes_read : s.bytes_read;
  r.bytes_written = out.result ? out.result->bytes_written : s.bytes_written;

  const size_t threads = ThreadPool::global().size();
  // `train --load` takes the run's configuration (DP size, accumulation, layout …) from the target;
  // a user adds --steps and --save as for any resume.
  const std::string resume = "fpgather train --load " + shell_word(target);
  nlohmann::json& j = r.document;
  j = {{"source", out.source_dir},
       {"target", target},
       {"dry_run", t.dry_run},
       {"from", layout_json(r.from)},
       {"to", layout_json(r.to)},
       {"compression", ckpt::to_string(ro.write.compression)},
       {"chunk_bytes", ro.write.chunk_bytes},
       {"threads", threads},
       {"keys", s.keys},
       {"runs", s.runs},
       {"files", s.files},
       {"padding_intervals", s.padding},
       {"bytes_read", s.bytes_read},
       {"source_chunks", s.source_chunks},
       {"chunk_reads", s.chunk_reads},
       {"bytes_written", s.bytes_written},
       {"peak_memory_estimate", s.peak_memory},
       {"rank_bytes", s.rank_bytes},
       {"resume", resume}};
  auto& text = r.text;
  if (t.dry_run) {
    nlohmann::json keys = nlohmann::json::array();
    std::vector<uint64_t> runs(plan.plan.keys.size()), bytes(plan.plan.keys.size());
    std::vector<std::vector<std::string>> from(plan.plan.keys.size());
    for (const auto& rp : plan.plan.ranks)
      for (const auto& run : rp.runs) {
        runs[run.key] += 1;
        bytes[run.key] += dtype_bytes(plan.plan.keys[run.key].dtype, run.numel);
        const std::string& sk = out.source_keys.at(run.src_key);
        if (std::find(from[run.key].begin(), from[run.key].end(), sk) == from[run.key].end()) from[run.key].push_back(sk);
      }
    for (size_t k = 0; k < plan.plan.keys.size(); ++k)
      keys.push_back({{"key", plan.plan.keys[k].name}, {"dtype", dtype_name(plan.plan.keys[k].dtype)},
                      {"shape", plan.plan.keys[k].shape}, {"runs", runs[k]}, {"bytes", bytes[k]}, {"from", from[k]}});
    j["plan"] = keys;
    j["seconds"] = j["bytes_stored"] = j["chunks_decoded"] = nullptr;  // nothing was written
    text.push_back("reshard plan (dry run): " + out.source_dir + " -> " + target);
    text.push_back("  from: " + describe(plan.source));
    text.push_back("  to:   " + describe(plan.target));
    text.push_back(fmt::sprintf("  keys %llu, runs %llu, files %llu, padding intervals %llu", s.keys, s.runs, s.files,
                                s.padding));
    text.push_back(fmt::sprintf("  read:  %llu bytes (%llu source chunks, %llu chunk reads)", s.bytes_read,
                                s.source_chunks, s.chunk_reads));
    text.push_back(fmt::sprintf("  write: %llu bytes (logical), %s, chunks of %llu bytes", s.bytes_written,
                                ckpt::to_string(ro.write.compression), ro.write.chunk_bytes));
    for (size_t k = 0; k < s.rank_bytes.size(); ++k)
      text.push_back(fmt::sprintf("    rank %zu: %llu bytes%s", k, s.rank_bytes[k], s.rank_bytes[k] ? "" : " (no data file)"));
    text.push_back(fmt::sprintf("  peak memory estimate: %.1f MiB (%zu threads)", s.peak_memory / 1048576.0, threads));
    return r;
  }
  const ReshardResult& res = *out.result;
  j["plan"] = nullptr;  // listed with --dry-run
  j["seconds"] = out.seconds;
  j["bytes_stored"] = res.bytes_stored;
  j["chunks_decoded"] = res.chunks_decoded;
  j["bytes_read"] = res.bytes_read;
  text.push_back("resharded " + out.source_dir + " (" + describe(plan.source) + ")");
  text.push_back("       -> " + target + " (" + describe(plan.target) + ")");
  text.push_back(fmt::sprintf("%llu keys, %llu files, %llu bytes read, %llu bytes written (%llu stored) in %.2f s", s.keys,
                              s.files, res.bytes_read, res.bytes_written, res.bytes_stored, out.seconds));
  text.push_back("resume with: " + resume);
  return r;
}

}  // namespace fpg::fpckpt
