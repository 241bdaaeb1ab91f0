// fpgather/reshard.h over the use case `fpgather reshard` runs (app/reshard/reshard.h), which opens
// any checkpoint and runs its format's reshard.
#include <fpgather/reshard.h>

#include "api/boundary.h"
#include "app/reshard/reshard.h"

namespace fpgather {
namespace {

ReshardLayout public_layout(const fpg::ckpt::ReshardLayout& l) {
  ReshardLayout p;
  p.dp = l.dp;
  p.dist_opt = l.dist_opt;
  p.state_layout = l.state_layout;
  p.bucket_size = l.bucket_size;
  p.pad_for_nccl = l.pad_for_nccl;
  p.accumulation = l.accumulation;
  return p;
}

}  // namespace

ReshardReport reshard(const Checkpoint& source, const std::string& target, const ReshardOptions& options) {
  return api::with_progress(options.progress, [&] {
    return api::at_boundary([&] {
      fpg::ckpt::ReshardTarget t;
      t.dp = options.dp;
      if (options.bucket_size) t.bucket_size = *options.bucket_size == 0 ? "none" : std::to_string(*options.bucket_size);
      t.pad_for_nccl = options.pad_for_nccl;
      t.dist_opt = options.dist_opt;
      t.state_layout = options.state_layout;
      t.accumulation = options.accumulation;
      t.compression = options.compression;
      t.megatron_form = options.megatron_form;
      t.tp = options.tp;
      t.pp = options.pp;
      t.ep = options.ep;
      t.first_stage_layers = options.first_stage_layers;
      t.last_stage_layers = options.last_stage_layers;
      t.dry_run = options.dry_run;
      const fpg::ckpt::ReshardReport r = fpg::app::reshard::reshard(source.path(), target, t);
      ReshardReport out;
      out.source = r.source;
      out.target = r.target;
      out.dry_run = r.dry_run;
      out.from = public_layout(r.from);
      out.to = public_layout(r.to);
      out.tensors = r.tensors;
      out.bytes_read = r.bytes_read;
      out.bytes_written = r.bytes_written;
      return out;
    });
  });
}

}  // namespace fpgather
