// What `reshard` asks of a checkpoint, whatever its format (the capability Checkpoint::reshard):
// the target by field, and what was done — typed fields every format fills, and the format's own view
// as a JSON document and lines of text (as checkpoint_report.h's reports).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fpg::ckpt {

// Unset or "" keeps the source's. A format refuses (UsageError naming the field) what it does not take.
struct ReshardTarget {
  uint32_t dp = 0;           // required, >= 1
  std::string dist_opt;      // fpgather: bucketed or layerwise
  std::string state_layout;  // fpgather: bucket or model
  std::string compression;   // fpgather: zstd[:LEVEL][+shuffle] or none
  std::string megatron_form; // Megatron: dp_reshardable or fully_reshardable
  uint32_t tp = 0, pp = 0, ep = 0;  // Megatron: target tensor-, pipeline- and expert-parallel sizes; 0 keeps the source's
  // Megatron: layers of the first and last pipeline stage (num_layers_in_first/last_pipeline_stage); both
  // unset: the source's stages at its own PP, else an even split
  std::optional<uint64_t> first_stage_layers, last_stage_layers;
  std::string bucket_size;   // a positive number of elements, or none (one bucket per buffer)
  std::optional<bool> pad_for_nccl;
  std::optional<uint64_t> accumulation;  // fpgather: micro-batches per rank per step
  uint64_t chunk_bytes = 0;              // fpgather; 0: the source's largest chunk
  bool dry_run = false;                  // plan only
  bool progress = false;
};

// The layout a checkpoint's optimizer state is stored for.
struct ReshardLayout {
  uint32_t dp = 0;           // 0 where the source does not say
  std::string dist_opt;      // fpgather: bucketed or layerwise
  std::string state_layout;  // fpgather: bucket or model; Megatron: dp_reshardable or fully_reshardable
  std::optional<uint64_t> bucket_size;  // unset: one bucket per buffer (or not known)
  bool pad_for_nccl = false;
  uint64_t accumulation = 1;
};

struct ReshardReport {
  std::string source, target;  // source: the directory read (after resolving `latest`)
  bool dry_run = false;
  ReshardLayout from, to;
  uint64_t tensors = 0;        // keys written (planned, with dry_run)
  uint64_t bytes_read = 0;     // stored bytes read
  uint64_t bytes_written = 0;  // logical bytes written (planned, with dry_run)
  nlohmann::json document;     // what `reshard --json` prints
  std::vector<std::string> text;
};

// ReshardTarget::bucket_size: "none" gives nullopt (one bucket per buffer), a count from 1 to
// pipeline::kMaxBucketSize itself; UsageError naming bucket_size otherwise.
std::optional<uint64_t> parse_bucket_size(const std::string& text);

}  // namespace fpg::ckpt
