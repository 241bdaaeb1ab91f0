// `fpgather reshard SRC DST --dp M` for Megatron-Core torch_dist checkpoints: the distributed
// optimizer's state moved into the buffer layout Megatron builds for M ranks with the given bucket
// size and padding (layout/bucketed_layout.h), written as a torch_dist checkpoint Megatron-Core loads;
// at another TP × PP × EP (and any MoE model's) through model_parallel_reshard.h.
//
// The source's optimizer state is read per parameter (DcpParams: dp_reshardable buckets through
// the recovered layout, or fully_reshardable model-space keys). The target is written in either form:
//   dp_reshardable     one 1-D key per (buffer, bucket, state) of extent numel_unpadded; each target
//                      rank's shard written as Megatron writes it, one chunk per parameter fragment and
//                      one per gap (zeros), clipped to numel_unpadded; per_bucket_numel and
//                      per_bucket_numel_unpadded rewritten; the optimizer's param_groups object kept;
//   fully_reshardable  "optimizer.state.{param,exp_avg,…}.<model key>" in the model key's shape and
//                      chunks, param_groups moved into the common state.
// The common state's sharding type and content metadata follow the target form. Model keys and the
// other bytes entries are carried over unchanged, each decoded first (a bytes item the restricted
// unpickler refuses stops the reshard with a FormatError naming its key, and a model chunk is read
// through the checks of every chunk read). Memory: the largest stored chunk or parameter, twice.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "formats/dcp/reader.h"
#include "layout/bucketed_layout.h"

namespace fpg::dcp {

enum class MegatronForm : uint8_t { dp_reshardable, fully_reshardable };

// "dp_reshardable" or "fully_reshardable"; nullopt otherwise.
std::optional<MegatronForm> parse_megatron_form(const std::string& name);

struct MegatronReshardOptions {
  uint32_t dp = 0;
  // Target tensor-, pipeline- and expert-parallel sizes (dp_reshardable targets; unset: the source's).
  std::optional<uint32_t> tp, pp, ep;
  // The layers of the first and last pipeline stage, as Megatron's num_layers_in_first/last_pipeline_stage
  // (the others split the rest evenly); unset: the source's stages at its own PP, else an even split.
  std::optional<uint64_t> first_stage_layers, last_stage_layers;
  // Unset: the source's (recovered) bucket size; set to nullopt: one bucket per buffer.
  std::optional<std::optional<uint64_t>> bucket_size;
  std::optional<bool> pad_for_nccl;        // unset: the source's
  std::optional<MegatronForm> to;          // unset: the source's form
  bool dry_run = false;
  bool validate = true;                    // refuse a source that fails validation
  bool progress = false;                   // the terminal's progress line (core/progress.h)
};

struct MegatronReshardSummary {
  std::string source_form, target_form;
  layout::BucketedLayout target;  // dp_reshardable targets (at model parallelism: the first group's)
  uint32_t groups = 1;            // optimizer groups written (one per model-parallel rank)
  uint64_t keys = 0, chunks = 0, bytes_written = 0;
  // The plan (a dry run too): every stored byte is read once; what is written (tensor and bytes data,
  // not torch.save's framing); the largest buffer held at once (a carried item, read whole, or a
  // write block of the optimizer state).
  uint64_t plan_read = 0, plan_written = 0, plan_peak = 0;
  bool grad_dtype_assumed = false;  // a fully_reshardable source records no grad dtype: float32 taken
  // dp_reshardable targets: the lowest rank whose shard of some bucket is all tail padding. Nothing
  // is stored for such a shard (DCP's cover check needs none); Megatron-Core 0.19 itself stops with
  // "empty bucket encountered" when it saves such a layout.
  std::optional<uint32_t> first_padding_only_rank;
};

// Fills the plan figures of `sum`: the stored bytes, the carried entries (all but `optimizer` ones)
// plus `optimizer_bytes` written, the largest carried item or a write block. For group_reshard.h too.
void add_plan_figures(const Reader& r, const std::function<bool(const Entry&)>& optimizer, uint64_t optimizer_bytes,
                      MegatronReshardSummary& sum);

// UsageError for options the source cannot serve (a form other than Megatron's distributed optimizer,
// DST existing); InvalidCheckpoint (exit 1) for an invalid source.
MegatronReshardSummary reshard_megatron(const std::string& src, const std::string& dst,
                                        const MegatronReshardOptions& opts);

}  // namespace fpg::dcp
