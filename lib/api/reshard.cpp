// fpgather/reshard.h over the use case `fpgather reshard` runs (app/reshard/reshard_any.h), which
// opens any checkpoint and runs its format's reshard.
#include <fpgather/reshard.h>

#include "api/boundary.h"
#include "app/reshard/reshard_any.h"
#include "ckpt/key_names.h"
#include "pipeline/config.h"

namespace fpgather {
namespace {

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

ReshardReport report_of(const std::string& target, bool dry_run, const fpg::app::reshard::ReshardOutcome& out) {
  ReshardReport r;
  r.source = out.source_dir;
  r.target = target;
  r.dry_run = dry_run;
  r.from = layout_of(out.target.source);
  r.to = layout_of(out.target.target);
  r.tensors = out.summary.keys;
  r.bytes_read = out.result ? out.result->bytes_read : out.summary.bytes_read;
  r.bytes_written = out.result ? out.result->bytes_written : out.summary.bytes_written;
  return r;
}

ReshardReport report_of(const std::string& source, const std::string& target, bool dry_run, uint32_t dp,
                        const fpg::app::reshard::MegatronReshardSummary& s) {
  ReshardReport r;
  r.source = source;
  r.target = target;
  r.dry_run = dry_run;
  r.from.state_layout = s.source_form;
  r.to.state_layout = s.target_form;
  r.to.dp = dp;
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
    fpg::app::reshard::AnyReshardRequest q;
    q.source = source.path();
    q.target = target;
    q.dp = options.dp;
    if (options.bucket_size) q.bucket_size = *options.bucket_size == 0 ? "none" : std::to_string(*options.bucket_size);
    q.pad_for_nccl = options.pad_for_nccl;
    q.dist_opt = options.dist_opt;
    q.state_layout = options.state_layout;
    q.accumulation = options.accumulation;
    q.compression = options.compression;
    q.megatron_form = options.megatron_form;
    q.dry_run = options.dry_run;
    const fpg::app::reshard::AnyReshardOutcome out = fpg::app::reshard::reshard_any(q);
    if (const auto* m = std::get_if<fpg::app::reshard::MegatronReshardSummary>(&out.result))
      return report_of(source.path(), target, options.dry_run, out.dp, *m);
    return report_of(target, options.dry_run, std::get<fpg::app::reshard::ReshardOutcome>(out.result));
  });
}

}  // namespace fpgather
