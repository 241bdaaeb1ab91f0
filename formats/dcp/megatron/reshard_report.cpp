#include "formats/dcp/megatron/reshard_report.h"

#include <chrono>

#include <fmt/printf.h>

#include "ckpt/checkpoint_report.h"
#include "core/printable.h"
#include "core/units.h"
#include "core/error.h"
#include "formats/dcp/megatron/megatron_reshard.h"
#include "layout/describe.h"

namespace fpg::dcp {
namespace {

MegatronReshardOptions options_of(const std::string& source, const ckpt::ReshardTarget& t) {
  if (!t.dist_opt.empty() || !t.state_layout.empty() || t.accumulation || !t.compression.empty() || t.chunk_bytes)
    throw UsageError(source + " is a Megatron torch_dist checkpoint: dist_opt, state_layout, accumulation, "
                     "compression and chunk_bytes apply to fpgather checkpoints");
  if (t.dp == 0) throw UsageError("dp must be at least 1");
  MegatronReshardOptions o;
  o.dp = t.dp;
  if (t.tp) o.tp = t.tp;
  if (t.pp) o.pp = t.pp;
  if (t.ep) o.ep = t.ep;
  o.first_stage_layers = t.first_stage_layers;
  o.last_stage_layers = t.last_stage_layers;
  if (!t.bucket_size.empty()) o.bucket_size = ckpt::parse_bucket_size(t.bucket_size);
  o.pad_for_nccl = t.pad_for_nccl;
  o.dry_run = t.dry_run;
  o.progress = t.progress;
  if (!t.megatron_form.empty()) {
    o.to = parse_megatron_form(t.megatron_form);
    if (!o.to) throw UsageError("megatron_form must be dp_reshardable or fully_reshardable, not " + quoted_name(t.megatron_form));
  }
  return o;
}

}  // namespace

ckpt::ReshardReport megatron_reshard_report(const std::string& source, const std::string& target,
                                            const ckpt::ReshardTarget& t) {
  const MegatronReshardOptions o = options_of(source, t);
  const auto t0 = std::chrono::steady_clock::now();
  const MegatronReshardSummary s = reshard_megatron(source, target, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ckpt::ReshardReport r;
  r.source = source;
  r.target = target;
  r.dry_run = t.dry_run;
  r.from.state_layout = s.source_form;
  r.to.state_layout = s.target_form;
  r.to.dp = o.dp;
  if (!s.target.buffers.empty()) {
    r.to.bucket_size = s.target.bucket_size;
    r.to.pad_for_nccl = s.target.pad_for_nccl;
  }
  r.tensors = s.keys;
  r.bytes_read = s.plan_read;  // the plan reads every stored item once
  r.bytes_written = s.bytes_written;

  nlohmann::json& j = r.document;
  j = {{"source", source}, {"target", target}, {"dry_run", t.dry_run}, {"from", s.source_form},
       {"to", s.target_form}, {"dp", o.dp},
       {"tp", o.tp ? nlohmann::json(*o.tp) : nlohmann::json(nullptr)},
       {"pp", o.pp ? nlohmann::json(*o.pp) : nlohmann::json(nullptr)},
       {"ep", o.ep ? nlohmann::json(*o.ep) : nlohmann::json(nullptr)}, {"groups", s.groups}, {"plan", {{"bytes_read", s.plan_read}, {"bytes_written", s.plan_written}, {"peak_bytes", s.plan_peak}}}, {"keys", s.keys}, {"chunks", s.chunks},
       {"bytes_written", s.bytes_written}, {"grad_dtype_assumed", s.grad_dtype_assumed},
       {"first_padding_only_rank", s.first_padding_only_rank ? nlohmann::json(*s.first_padding_only_rank)
                                                            : nlohmann::json(nullptr)},
       {"seconds", secs}};
  if (!s.target.buffers.empty()) {
    j["bucket_size"] = s.target.bucket_size ? nlohmann::json(*s.target.bucket_size) : nlohmann::json();  // null: one bucket per buffer
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
  auto& text = r.text;
  std::string sizes;
  if (o.tp) sizes += fmt::sprintf("tp %u, ", *o.tp);
  if (o.pp) sizes += fmt::sprintf("pp %u, ", *o.pp);
  if (o.ep) sizes += fmt::sprintf("ep %u, ", *o.ep);
  text.push_back(fmt::sprintf("%s %s (%s) -> %s (%s, %sdp %u)", t.dry_run ? "reshard plan (dry run):" : "resharded",
                              source, s.source_form, target, s.target_form, sizes, o.dp));
  if (s.groups > 1)
    text.push_back(fmt::sprintf("%u optimizer groups (one per model-parallel rank), each over its local parameters; "
                                "the first:", s.groups));
  if (!s.target.buffers.empty()) ckpt::append_lines(text, layout::describe(s.target));
  if (s.grad_dtype_assumed)
    text.push_back("note: the source records no grad dtype; buckets are named for float32 grads (grad_reduce_in_fp32)");
  if (s.first_padding_only_rank)
    text.push_back(fmt::sprintf(
        "note: from rank %u on, some ranks' shards of a bucket hold only tail padding and store nothing; "
        "Megatron-Core 0.19 stops with 'empty bucket encountered' when it saves such a layout, so the run "
        "that loads this checkpoint may not be able to save it again; a smaller DP or bucket ends without NCCL "
        "padding keep every rank in every bucket",
        *s.first_padding_only_rank));
  text.push_back(fmt::sprintf("plan: reads %s, writes %s of data, holds at most %s at once", byte_size(s.plan_read),
                              byte_size(s.plan_written), byte_size(s.plan_peak)));
  if (!t.dry_run)
    text.push_back(fmt::sprintf("%llu keys, %llu chunks, %llu bytes written in %.2f s", s.keys, s.chunks,
                                s.bytes_written, secs));
  return r;
}

}  // namespace fpg::dcp
