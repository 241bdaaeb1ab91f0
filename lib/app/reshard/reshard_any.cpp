#include "app/reshard/reshard_any.h"

#include "ckpt/chunk_codec.h"
#include "ckpt/format_registry.h"
#include "ckpt/key_names.h"
#include "core/error.h"
#include "pipeline/config.h"

namespace fpg::app::reshard {
namespace {

// "none" or a positive element count.
std::optional<uint64_t> parse_bucket_size(const std::string& s) {
  if (s == "none") return std::nullopt;
  try {
    size_t used = 0;
    const unsigned long long n = std::stoull(s, &used);
    if (used == s.size() && n > 0 && s.find_first_not_of("0123456789") == std::string::npos) return n;
  } catch (const std::exception&) {
  }
  throw UsageError("bucket_size must be a positive number of elements or none, not '" + s + "'");
}

// What both kinds of checkpoint take.
ReshardOptions common_options(const AnyReshardRequest& q) {
  if (q.dp == 0) throw UsageError("dp must be at least 1");
  ReshardOptions o;
  o.dp = q.dp;
  if (!q.bucket_size.empty()) o.bucket_size = parse_bucket_size(q.bucket_size);
  o.pad_for_nccl = q.pad_for_nccl;
  return o;
}

ReshardOutcome reshard_fpckpt(const AnyReshardRequest& q) {
  if (!q.megatron_form.empty()) throw UsageError("megatron_form applies to Megatron torch_dist checkpoints; " + q.source + " is not one");
  ReshardRequest r;
  r.source = q.source;
  r.target = q.target;
  r.options = common_options(q);
  if (!q.dist_opt.empty()) {
    r.options.dist_opt = pipeline::parse_dist_opt(q.dist_opt);
    if (!r.options.dist_opt) throw UsageError("dist_opt must be bucketed or layerwise, not '" + q.dist_opt + "'");
  }
  if (!q.state_layout.empty()) {
    r.options.state_layout = ckpt::parse_state_layout(q.state_layout);
    if (!r.options.state_layout) throw UsageError("state_layout must be bucket or model, not '" + q.state_layout + "'");
  }
  r.options.accumulation = q.accumulation;
  if (!q.compression.empty()) r.compression = ckpt::parse_compression(q.compression);
  r.chunk_bytes = q.chunk_bytes;
  r.dry_run = q.dry_run;
  r.progress = q.progress;
  return reshard(r);
}

MegatronReshardSummary reshard_dcp(const AnyReshardRequest& q) {
  if (!q.dist_opt.empty() || !q.state_layout.empty() || q.accumulation || !q.compression.empty() || q.chunk_bytes)
    throw UsageError(q.source + " is a Megatron torch_dist checkpoint: dist_opt, state_layout, accumulation, "
                     "compression and chunk_bytes apply to fpgather checkpoints");
  const ReshardOptions common = common_options(q);
  MegatronReshardOptions o;
  o.dp = common.dp;
  o.bucket_size = common.bucket_size;
  o.pad_for_nccl = common.pad_for_nccl;
  o.dry_run = q.dry_run;
  if (!q.megatron_form.empty()) {
    o.to = parse_megatron_form(q.megatron_form);
    if (!o.to) throw UsageError("megatron_form must be dp_reshardable or fully_reshardable, not '" + q.megatron_form + "'");
  }
  return reshard_megatron(q.source, q.target, o);
}

}  // namespace

AnyReshardOutcome reshard_any(const AnyReshardRequest& q) {
  const std::string format(ckpt::open_checkpoint(q.source)->format());
  AnyReshardOutcome out;
  out.dp = q.dp;
  if (format == "fpgather") {
    out.result = reshard_fpckpt(q);
  } else if (format == "megatron_torch_dist" || format == "torch_dcp") {
    out.result = reshard_dcp(q);
  } else {
    throw UsageError(q.source + " is a " + format + " model: it holds no optimizer state to reshard");
  }
  return out;
}

}  // namespace fpg::app::reshard
