// fpgather/reshard.h over the use cases `fpgather reshard` runs: app/reshard/reshard.h for fpgather
// checkpoints, app/reshard/megatron_reshard.h for DCP directories (Megatron torch_dist).
#include <fpgather/reshard.h>

#include "api/boundary.h"
#include "app/reshard/megatron_reshard.h"
#include "app/reshard/reshard.h"
#include "ckpt/chunk_codec.h"
#include "ckpt/key_names.h"
#include "pipeline/config.h"

namespace fpgather {
namespace {

// The options both kinds of checkpoint take, as app::reshard::ReshardOptions holds them.
fpg::app::reshard::ReshardOptions common_options(const ReshardOptions& options) {
  fpg::app::reshard::ReshardOptions o;
  o.dp = options.dp;
  if (options.bucket_size)
    o.bucket_size = *options.bucket_size == 0 ? std::optional<uint64_t>{} : std::optional<uint64_t>{*options.bucket_size};
  o.pad_for_nccl = options.pad_for_nccl;
  return o;
}

ReshardLayout layout_of(const fpg::app::reshard::RecordedRun& run) {
  ReshardLayout l;
  l.dp = run.dp;
  l.dist_opt = fpg::pipeline::dist_opt_name(run.config.dist_opt);
  l.state_layout = std::string(fpg::ckpt::state_layout_name(run.state_layout));
  l.bucket_size = run.config.bucket_size;
  l.pad_for_nccl = run.config.pad_for_nccl;
  l.accumulation = run.accumulation;
  return l;
}

ReshardReport reshard_fpckpt(const std::string& source, const std::string& target, const ReshardOptions& options) {
  if (!options.megatron_form.empty())
    throw fpg::UsageError("reshard: megatron_form applies to Megatron torch_dist checkpoints; " + source +
                          " is an fpgather checkpoint");
  fpg::app::reshard::ReshardRequest q;
  q.source = source;
  q.target = target;
  q.options = common_options(options);
  if (!options.dist_opt.empty()) {
    q.options.dist_opt = fpg::pipeline::parse_dist_opt(options.dist_opt);
    if (!q.options.dist_opt)
      throw fpg::UsageError("reshard: dist_opt must be bucketed or layerwise, not '" + options.dist_opt + "'");
  }
  if (!options.state_layout.empty()) {
    q.options.state_layout = fpg::ckpt::parse_state_layout(options.state_layout);
    if (!q.options.state_layout)
      throw fpg::UsageError("reshard: state_layout must be bucket or model, not '" + options.state_layout + "'");
  }
  q.options.accumulation = options.accumulation;
  if (!options.compression.empty()) q.compression = fpg::ckpt::parse_compression(options.compression);
  q.dry_run = options.dry_run;
  const fpg::app::reshard::ReshardOutcome out = fpg::app::reshard::reshard(q);
  ReshardReport r;
  r.source = out.source_dir;
  r.target = target;
  r.dry_run = options.dry_run;
  r.from = layout_of(out.target.source);
  r.to = layout_of(out.target.target);
  r.tensors = out.summary.keys;
  r.bytes_read = out.result ? out.result->bytes_read : out.summary.bytes_read;
  r.bytes_written = out.result ? out.result->bytes_written : out.summary.bytes_written;
  return r;
}

ReshardReport reshard_megatron(const std::string& source, const std::string& target, const ReshardOptions& options) {
  if (!options.dist_opt.empty() || !options.state_layout.empty() || options.accumulation || !options.compression.empty())
    throw fpg::UsageError("reshard: " + source + " is a Megatron torch_dist checkpoint: dist_opt, state_layout, "
                          "accumulation and compression apply to fpgather checkpoints");
  const fpg::app::reshard::ReshardOptions common = common_options(options);
  fpg::app::reshard::MegatronReshardOptions o;
  o.dp = common.dp;
  o.bucket_size = common.bucket_size;
  o.pad_for_nccl = common.pad_for_nccl;
  o.dry_run = options.dry_run;
  if (!options.megatron_form.empty()) {
    o.to = fpg::app::reshard::parse_megatron_form(options.megatron_form);
    if (!o.to)
      throw fpg::UsageError("reshard: megatron_form must be dp_reshardable or fully_reshardable, not '" +
                            options.megatron_form + "'");
  }
  const fpg::app::reshard::MegatronReshardSummary s = fpg::app::reshard::reshard_megatron(source, target, o);
  ReshardReport r;
  r.source = source;
  r.target = target;
  r.dry_run = options.dry_run;
  r.from.state_layout = s.source_form;
  r.to.state_layout = s.target_form;
  r.to.dp = o.dp;
  if (!s.target.buffers.empty()) {
    r.to.bucket_size = s.target.bucket_size;
    r.to.pad_for_nccl = s.target.pad_for_nccl;
  }
  r.tensors = s.keys;
  r.bytes_written = s.bytes_written;
  return r;
}

}  // namespace

ReshardReport reshard(const Checkpoint& source, const std::string& target, const ReshardOptions& options) {
  return api::at_boundary([&] {
    return source.format() == CheckpointFormat::fpgather ? reshard_fpckpt(source.path(), target, options)
                                                         : reshard_megatron(source.path(), target, options);
  });
}

}  // namespace fpgather
