// fpgather reshard SRC DST --dp M [...]: any checkpoint that can be resharded, through
// app/reshard/reshard.h — a training checkpoint rewritten for another DP size, distributed
// optimizer, state layout, bucket size or padding; a Megatron torch_dist checkpoint's
// distributed-optimizer state re-bucketed for another DP size, bucket size, padding or form. Exit 0
// done, 1 a source that fails validation, 2 usage (a target that cannot hold the state, DST exists),
// 3 an unreadable source.
#include "app/reshard/reshard.h"
#include "app/train/trainer.h"
#include "ckpt/chunk_codec.h"
#include "cli.h"
#include "json_output.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "option_range.h"
#include "pipeline/config.h"

namespace fpg::cli {
namespace {

// The largest target DP size: well above any data-parallel group, far below what would make the
// plan's per-rank tables large.
constexpr uint64_t kMaxReshardDp = 65536;

struct ReshardArgs {
  std::string src, dst;
  uint32_t dp = 0, tp = 0, pp = 0, ep = 0;
  uint64_t first_stage_layers = 0, last_stage_layers = 0;  // 0: not given
  std::string dist_opt, ckpt_layout, bucket_size, compress;
  bool pad = false, no_pad = false;
  uint64_t accumulation = 0, chunk_bytes = 0;
  std::string to;
  bool dry_run = false;
};

int run_reshard(const ReshardArgs& a, const GlobalOptions& g) {
  if (a.pad && a.no_pad) throw UsageError("--pad-for-nccl and --no-pad-for-nccl contradict each other");
  ckpt::ReshardTarget t;
  t.dp = a.dp;
  t.tp = a.tp;
  t.pp = a.pp;
  t.ep = a.ep;
  if (a.first_stage_layers) t.first_stage_layers = a.first_stage_layers;
  if (a.last_stage_layers) t.last_stage_layers = a.last_stage_layers;
  t.dist_opt = a.dist_opt;
  t.state_layout = a.ckpt_layout;
  t.compression = a.compress;
  t.megatron_form = a.to;
  t.bucket_size = a.bucket_size;
  if (a.pad) t.pad_for_nccl = true;
  if (a.no_pad) t.pad_for_nccl = false;
  if (a.accumulation) t.accumulation = a.accumulation;
  t.chunk_bytes = a.chunk_bytes;
  t.dry_run = a.dry_run;
  t.progress = progress_enabled(g);
  const FlagNames flags = {{"dist_opt", "--dist-opt"},       {"state_layout", "--ckpt-layout"},
                           {"bucket_size", "--bucket-size"},   {"pad_for_nccl", "--pad-for-nccl"},
                           {"accumulation", "--accumulation"}, {"compression", "--compress"},
                           {"chunk_bytes", "--chunk-bytes"},   {"megatron_form", "--to"},
                           {"dp", "--dp"},                     {"tp", "--tp"},
                           {"pp", "--pp"},                     {"ep", "--ep"},
                           {"first_stage_layers", "--first-stage-layers"},
                           {"last_stage_layers", "--last-stage-layers"}};
  return with_flag_names(flags, [&] {
    if (!t.bucket_size.empty()) ckpt::parse_bucket_size(t.bucket_size);  // before anything is read
    install_interrupt_handlers();
    const ckpt::ReshardReport r = app::reshard::reshard(a.src, a.dst, t);
    if (g.json) {
      print_json(r.document);
    } else {
      for (const auto& line : r.text) std::printf("%s\n", line.c_str());
    }
    return 0;
  });
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
  with_values(cmd->add_option("--dist-opt", a->dist_opt, "bucketed or layerwise (default: the source's)"),
              {"bucketed", "layerwise"});
  with_values(cmd->add_option("--ckpt-layout", a->ckpt_layout, "Optimizer state layout: bucket or model (default: the source's)"),
              {"bucket", "model"});
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
                ckpt::kMaxChunkBytes);
  with_values(cmd->add_option("--to", a->to,
                  "Megatron torch_dist: the optimizer form to write, dp_reshardable or fully_reshardable "
                  "(default: the source's)"), {"dp_reshardable", "fully_reshardable"});
  // A tensor-parallel group lives inside one node: 8 GPUs today, a few times that in the largest.
  integer_range(cmd->add_option("--tp", a->tp,
                                "Megatron torch_dist: the target tensor-parallel size, written as dp_reshardable "
                                "(default: the source's)"), 1, 1024);
  integer_range(cmd->add_option("--pp", a->pp,
                                "Megatron torch_dist: the target pipeline-parallel size, written as dp_reshardable "
                                "(default: the source's)"), 1, 1024);
  integer_range(cmd->add_option("--ep", a->ep,
                                "Megatron torch_dist: the target expert-parallel size of a MoE model, written as "
                                "dp_reshardable (default: the source's)"), 1, 1024);
  integer_range(cmd->add_option("--first-stage-layers", a->first_stage_layers,
                                "Megatron torch_dist: layers of the first pipeline stage, as the loading run's "
                                "num_layers_in_first_pipeline_stage (default: SRC's stages at SRC's PP, else an "
                                "even split)"), 1, 100000);
  integer_range(cmd->add_option("--last-stage-layers", a->last_stage_layers,
                                "Megatron torch_dist: layers of the last pipeline stage, as the loading run's "
                                "num_layers_in_last_pipeline_stage (default: SRC's stages at SRC's PP, else an "
                                "even split)"), 1, 100000);
  cmd->add_flag("--dry-run", a->dry_run, "Print the plan (keys, bytes read and written, files, peak memory) only");
  cmd->callback([a, &global, &run] { run = [a, &global] { return run_reshard(*a, global); }; });
}

}  // namespace fpg::cli
