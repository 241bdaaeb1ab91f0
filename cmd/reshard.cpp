// fpgather reshard SRC DST --dp M [...]: a training checkpoint rewritten for another DP size,
// distributed optimizer, state layout, bucket size or padding (app/reshard/reshard_target.h plans it,
// formats/fpckpt/reshard.h streams it); a Megatron torch_dist checkpoint's distributed-optimizer
// state re-bucketed for another DP size, bucket size, padding or form (app/reshard/megatron_reshard.h). Exit 0 done, 1 a source that fails validation, 2 usage (a
// target that cannot hold the state, DST exists), 3 an unreadable source.
#include <chrono>
#include <nlohmann/json.hpp>

#include "app/reshard/megatron_reshard.h"
#include "cli.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fpckpt/rank_writer.h"
#include "app/train/trainer.h"
#include "option_range.h"
#include "pipeline/config.h"
#include "formats/dcp/reader.h"
#include "layout/describe.h"
#include "app/reshard/reshard.h"

namespace fpg::cli {
namespace {

// The largest target DP size: well above any data-parallel group, far below what would make the
// plan's per-rank tables large.
constexpr uint64_t kMaxReshardDp = 65536;

struct ReshardArgs {
  std::string src, dst;
  uint32_t dp = 0;
  std::string dist_opt, ckpt_layout, bucket_size, compress;
  bool pad = false, no_pad = false;
  uint64_t accumulation = 0, chunk_bytes = 0;
  std::string to;
  bool dry_run = false;
};

std::string describe(const app::reshard::RecordedRun& r) {
  std::string s = "DP " + std::to_string(r.dp) + ", " + pipeline::dist_opt_name(r.config.dist_opt) + ", " +
                  std::string(ckpt::state_layout_name(r.state_layout)) + " layout, bucket size " +
                  (r.config.bucket_size ? std::to_string(*r.config.bucket_size) : std::string("none")) +
                  (r.config.pad_for_nccl ? ", NCCL padding" : "") + ", accumulation " + std::to_string(r.accumulation);
  return s;
}

app::reshard::ReshardOptions reshard_options(const ReshardArgs& a) {
  app::reshard::ReshardOptions o;
  o.dp = a.dp;
  if (!a.dist_opt.empty()) {
    o.dist_opt = pipeline::parse_dist_opt(a.dist_opt);
    if (!o.dist_opt) throw UsageError("--dist-opt must be bucketed or layerwise, not '" + a.dist_opt + "'");
  }
  if (!a.ckpt_layout.empty()) {
    o.state_layout = ckpt::parse_state_layout(a.ckpt_layout);
    if (!o.state_layout) throw UsageError("--ckpt-layout must be bucket or model, not '" + a.ckpt_layout + "'");
  }
  if (!a.bucket_size.empty()) {
    if (a.bucket_size == "none") {
      o.bucket_size = std::optional<uint64_t>{};
    } else {
      // std::stoull would take "-5" as 2^64 - 5.
      if (!integer_range_error(a.bucket_size, 1, pipeline::kMaxBucketSize).empty())
        throw UsageError("--bucket-size must be none or a number of elements from 1 to " +
                         std::to_string(pipeline::kMaxBucketSize) + ", not '" + a.bucket_size + "'");
      o.bucket_size = std::optional<uint64_t>{std::stoull(a.bucket_size)};
    }
  }
  if (a.pad && a.no_pad) throw UsageError("--pad-for-nccl and --no-pad-for-nccl contradict each other");
  if (a.pad) o.pad_for_nccl = true;
  if (a.no_pad) o.pad_for_nccl = false;
  if (a.accumulation) o.accumulation = a.accumulation;
  return o;
}

std::string mib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  return buf;
}

// A Megatron torch_dist source: its distributed-optimizer state re-bucketed for the target (app/reshard/megatron_reshard.h).
int run_reshard_megatron(const ReshardArgs& a, const GlobalOptions& g) {
  if (!a.dist_opt.empty() || !a.ckpt_layout.empty() || a.accumulation || !a.compress.empty() || a.chunk_bytes)
    throw UsageError(a.src + " is a Megatron torch_dist checkpoint: --dist-opt, --ckpt-layout, --accumulation, "
                     "--compress and --chunk-bytes apply to fpgather checkpoints");
  const app::reshard::ReshardOptions ro = reshard_options(a);
  app::reshard::MegatronReshardOptions o;
  o.dp = ro.dp;
  o.bucket_size = ro.bucket_size;
  o.pad_for_nccl = ro.pad_for_nccl;
  o.dry_run = a.dry_run;
  if (!a.to.empty()) {
    o.to = app::reshard::parse_megatron_form(a.to);
    if (!o.to) throw UsageError("--to must be dp_reshardable or fully_reshardable, not '" + a.to + "'");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const app::reshard::MegatronReshardSummary s = app::reshard::reshard_megatron(a.src, a.dst, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g.json) {
    nlohmann::json j = {{"source", a.src}, {"target", a.dst}, {"dry_run", a.dry_run}, {"from", s.source_form},
                        {"to", s.target_form}, {"dp", o.dp}, {"keys", s.keys}, {"chunks", s.chunks},
                        {"bytes_written", s.bytes_written}, {"grad_dtype_assumed", s.grad_dtype_assumed},
                        {"first_padding_only_rank", s.first_padding_only_rank ? nlohmann::json(*s.first_padding_only_rank)
                                                                             : nlohmann::json(nullptr)},
                        {"seconds", secs}};
    if (!s.target.buffers.empty()) {
      j["bucket_size"] = s.target.bucket_size ? nlohmann::json(*s.target.bucket_size) : nlohmann::json("none");
      j["pad_for_nccl"] = s.target.pad_for_nccl;
      j["buffers"] = nlohmann::json::array();
      for (const auto& b : s.target.buffers) {
        nlohmann::json sizes = nlohmann::json::array(), unpadded = nlohmann::json::array();
        for (const auto& k : b.buckets) {
          sizes.push_back(k.numel());
          unpadded.push_back(k.numel_unpadded);
        }
        j["buffers"].push_back({{"dtype", layout::to_string(b.key)}, {"per_bucket_numel", sizes},
                                {"per_bucket_numel_unpadded", unpadded}});
      }
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s %s (%s) -> %s (%s, dp %u)\n", a.dry_run ? "reshard plan (dry run):" : "resharded", a.src.c_str(),
              s.source_form.c_str(), a.dst.c_str(), s.target_form.c_str(), o.dp);
  if (!s.target.buffers.empty()) std::printf("%s", layout::describe(s.target).c_str());
  if (s.grad_dtype_assumed)
    std::printf("note: the source records no grad dtype; buckets are named for float32 grads (grad_reduce_in_fp32)\n");
  if (s.first_padding_only_rank)
    std::printf("note: from rank %u on, some ranks' shards of a bucket hold only tail padding and store nothing; "
                "Megatron-Core 0.19 stops with 'empty bucket encountered' when it saves such a layout, so the run "
                "that loads this checkpoint may not be able to save it again; a smaller DP or no --pad-for-nccl keeps "
                "every rank in every bucket\n",
                *s.first_padding_only_rank);
  if (!a.dry_run)
    std::printf("%llu keys, %llu chunks, %llu bytes written in %.2f s\n", static_cast<unsigned long long>(s.keys),
                static_cast<unsigned long long>(s.chunks), static_cast<unsigned long long>(s.bytes_written), secs);
  return 0;
}

int run_reshard(const ReshardArgs& a, const GlobalOptions& g) {
  if (dcp::is_dcp_directory(a.src)) return run_reshard_megatron(a, g);
  if (!a.to.empty()) throw UsageError("--to applies to Megatron torch_dist checkpoints; " + a.src + " is not one");
  app::reshard::ReshardRequest q;
  q.source = a.src;
  q.target = a.dst;
  q.options = reshard_options(a);
  if (!a.compress.empty()) q.compression = ckpt::parse_compression(a.compress);
  q.chunk_bytes = a.chunk_bytes;
  q.dry_run = a.dry_run;
  q.progress = progress_enabled(g);
  const app::reshard::ReshardOutcome out = app::reshard::reshard(q);
  const app::reshard::ReshardTarget& t = out.target;
  const ckpt::PlanSummary& s = out.summary;
  const fpckpt::ReshardRunOptions& ro = out.run_options;
  const bool json = g.json;
  const std::string resume = "fpgather train --load " + a.dst + " --dp " + std::to_string(t.target.dp) +
                             " --accumulation " + std::to_string(t.target.accumulation) + " --dist-opt " +
                             pipeline::dist_opt_name(t.target.config.dist_opt);

  nlohmann::json j = {{"source", out.source_dir},
                      {"target", a.dst},
                      {"dry_run", a.dry_run},
                      {"from", describe(t.source)},
                      {"to", describe(t.target)},
                      {"compression", ckpt::to_string(ro.write.compression)},
                      {"chunk_bytes", ro.write.chunk_bytes},
                      {"threads", ThreadPool::global().size()},
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
  if (a.dry_run) {
    if (json) {
      nlohmann::json keys = nlohmann::json::array();
      std::vector<uint64_t> runs(t.plan.keys.size()), bytes(t.plan.keys.size());
      std::vector<std::vector<std::string>> from(t.plan.keys.size());
      for (const auto& rp : t.plan.ranks)
        for (const auto& r : rp.runs) {
          runs[r.key] += 1;
          bytes[r.key] += dtype_bytes(t.plan.keys[r.key].dtype, r.numel);
          const std::string& sk = out.source_keys.at(r.src_key);
          if (std::find(from[r.key].begin(), from[r.key].end(), sk) == from[r.key].end()) from[r.key].push_back(sk);
        }
      for (size_t k = 0; k < t.plan.keys.size(); ++k)
        keys.push_back({{"key", t.plan.keys[k].name}, {"dtype", dtype_name(t.plan.keys[k].dtype)},
                        {"shape", t.plan.keys[k].shape}, {"runs", runs[k]}, {"bytes", bytes[k]}, {"from", from[k]}});
      j["plan"] = keys;
      std::printf("%s\n", j.dump(2).c_str());
      return 0;
    }
    std::printf("reshard plan (dry run): %s -> %s\n", out.source_dir.c_str(), a.dst.c_str());
    std::printf("  from: %s\n  to:   %s\n", describe(t.source).c_str(), describe(t.target).c_str());
    std::printf("  keys %llu, runs %llu, files %llu, padding intervals %llu\n", static_cast<unsigned long long>(s.keys),
                static_cast<unsigned long long>(s.runs), static_cast<unsigned long long>(s.files),
                static_cast<unsigned long long>(s.padding));
    std::printf("  read:  %llu bytes (%llu source chunks, %llu chunk reads)\n",
                static_cast<unsigned long long>(s.bytes_read), static_cast<unsigned long long>(s.source_chunks),
                static_cast<unsigned long long>(s.chunk_reads));
    std::printf("  write: %llu bytes (logical), %s, chunks of %llu bytes\n",
                static_cast<unsigned long long>(s.bytes_written), ckpt::to_string(ro.write.compression).c_str(),
                static_cast<unsigned long long>(ro.write.chunk_bytes));
    for (size_t r = 0; r < s.rank_bytes.size(); ++r)
      std::printf("    rank %zu: %llu bytes%s\n", r, static_cast<unsigned long long>(s.rank_bytes[r]),
                  s.rank_bytes[r] ? "" : " (no data file)");
    std::printf("  peak memory estimate: %s (%zu threads)\n", mib(s.peak_memory).c_str(), ThreadPool::global().size());
    return 0;
  }
  const fpckpt::ReshardResult& res = *out.result;
  const double secs = out.seconds;
  if (json) {
    j["seconds"] = secs;
    j["bytes_stored"] = res.bytes_stored;
    j["chunks_decoded"] = res.chunks_decoded;
    j["bytes_read"] = res.bytes_read;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("resharded %s (%s)\n       -> %s (%s)\n", out.source_dir.c_str(), describe(t.source).c_str(), a.dst.c_str(),
              describe(t.target).c_str());
  std::printf("%llu keys, %llu files, %llu bytes read, %llu bytes written (%llu stored) in %.2f s\n",
              static_cast<unsigned long long>(s.keys), static_cast<unsigned long long>(s.files),
              static_cast<unsigned long long>(res.bytes_read), static_cast<unsigned long long>(res.bytes_written),
              static_cast<unsigned long long>(res.bytes_stored), secs);
  std::printf("resume with: %s\n", resume.c_str());
  return 0;
}

}  // namespace

void register_reshard(CLI::App& app, const GlobalOptions& global, Runner& run) {
  auto a = std::make_shared<ReshardArgs>();
  auto* cmd = app.add_subcommand("reshard", "Rewrite a training checkpoint for another DP size, distributed "
                                            "optimizer, state layout or bucket size");
  cmd->add_option("SRC", a->src, "Source checkpoint (or a directory holding `latest`)")->required();
  cmd->add_option("DST", a->dst, "Target checkpoint directory (must not exist; committed atomically)")->required();
  // Each target rank gets a file of its own and a plan of its own.
  integer_range(cmd->add_option("--dp", a->dp, "Target data-parallel size"), 1, kMaxReshardDp)->required();
  cmd->add_option("--dist-opt", a->dist_opt, "bucketed or layerwise (default: the source's)");
  cmd->add_option("--ckpt-layout", a->ckpt_layout, "Optimizer state layout: bucket or model (default: the source's)");
  cmd->add_option("--bucket-size", a->bucket_size,
                  "Elements per bucket (1 to " + std::to_string(pipeline::kMaxBucketSize) +
                      "), or none (default: the source's)");
  cmd->add_flag("--pad-for-nccl", a->pad, "Pad bucket ends to lcm(dp, 128, 65536)");
  cmd->add_flag("--no-pad-for-nccl", a->no_pad, "Pad bucket ends to lcm(dp, 128) only");
  integer_range(cmd->add_option("--accumulation", a->accumulation,
                                "Micro-batches per rank per step of the resumed run (default: keep the global batch)"),
                1, app::train::kMaxAccumulation);
  cmd->add_option("--compress", a->compress, "zstd[:LEVEL][+shuffle] or none (default: the source's filters)");
  integer_range(cmd->add_option("--chunk-bytes", a->chunk_bytes, "Target chunk size in bytes (default: the source's)"), 1,
                fpckpt::kMaxChunkBytes);
  cmd->add_option("--to", a->to,
                  "Megatron torch_dist: the optimizer form to write, dp_reshardable or fully_reshardable "
                  "(default: the source's)");
  cmd->add_flag("--dry-run", a->dry_run, "Print the plan (keys, bytes read and written, files, peak memory) only");
  cmd->callback([a, &global, &run] { run = [a, &global] { return run_reshard(*a, global); }; });
}

}  // namespace fpg::cli
