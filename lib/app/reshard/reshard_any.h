// `fpgather reshard SRC DST` over any checkpoint that can be resharded: the source is opened through
// the format seam (ckpt/format_registry.h) and the reshard of its format runs — an fpgather checkpoint
// (reshard.h: DP size, distributed optimizer, state layout, bucket size, padding, accumulation,
// compression, chunk size) or a Megatron torch_dist one (megatron_reshard.h: DP size, bucket size,
// padding, form). Options are named by field, as text where they are choices; a field the source's
// format does not take, or a value it cannot hold, is a UsageError naming the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "app/reshard/megatron_reshard.h"
#include "app/reshard/reshard.h"

namespace fpg::app::reshard {

struct AnyReshardRequest {
  std::string source, target;
  uint32_t dp = 0;  // required, >= 1
  // "" keeps the source's:
  std::string dist_opt;      // fpgather: bucketed or layerwise
  std::string state_layout;  // fpgather: bucket or model
  std::string compression;   // fpgather: zstd[:LEVEL][+shuffle] or none
  std::string megatron_form;  // Megatron: dp_reshardable or fully_reshardable
  std::string bucket_size;   // a positive number of elements, or none (one bucket per buffer)
  std::optional<bool> pad_for_nccl;
  std::optional<uint64_t> accumulation;  // fpgather
  uint64_t chunk_bytes = 0;              // fpgather; 0: the source's largest chunk
  bool dry_run = false;
  bool progress = false;
};

struct AnyReshardOutcome {
  // An fpgather checkpoint's outcome, or a Megatron checkpoint's.
  std::variant<ReshardOutcome, MegatronReshardSummary> result;
  uint32_t dp = 0;  // the target's
};

AnyReshardOutcome reshard_any(const AnyReshardRequest& request);

}  // namespace fpg::app::reshard
