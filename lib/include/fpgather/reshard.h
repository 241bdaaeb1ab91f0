// A checkpoint rewritten for another data-parallel layout, as `fpgather reshard` does: an fpgather
// checkpoint for another DP size, distributed optimizer, state layout, bucket size or padding (what a
// run of that configuration would have saved); a Megatron torch_dist checkpoint's distributed-optimizer
// state re-bucketed for another DP size, bucket size, padding or form. The target is committed
// atomically and must not exist.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <fpgather/checkpoint.h>
#include <fpgather/progress.h>

namespace fpgather {

struct ReshardOptions {
  uint32_t dp = 0;  // the target's data-parallel size (required)
  std::optional<uint64_t> bucket_size;  // elements per bucket, 0 for one bucket per buffer; unset: the source's
  std::optional<bool> pad_for_nccl;     // bucket ends padded to lcm(dp, 128, 65536); unset: the source's
  // fpgather checkpoints only; "" keeps the source's:
  std::string dist_opt;      // bucketed or layerwise
  std::string state_layout;  // bucket or model
  std::optional<uint64_t> accumulation;  // micro-batches per rank per step; unset: keep the global batch
  std::string compression;   // zstd[:LEVEL][+shuffle] or none; "": the source's filters
  // Megatron torch_dist checkpoints only: dp_reshardable or fully_reshardable; "" keeps the source's.
  std::string megatron_form;
  // Megatron torch_dist checkpoints only: the target tensor-, pipeline- and expert-parallel sizes of
  // a dp_reshardable target; 0 keeps the source's.
  uint32_t tp = 0, pp = 0, ep = 0;
  // Megatron: the layers of the first and last pipeline stage at a new PP, as the loading run's
  // num_layers_in_first/last_pipeline_stage; both unset: the source's stages at its own PP, else the
  // layers split evenly.
  std::optional<uint64_t> first_stage_layers, last_stage_layers;
  bool dry_run = false;  // plan only: nothing is written
  ProgressCallback progress;  // the bytes written
};

// The layout a checkpoint's optimizer state is stored for.
struct ReshardLayout {
  uint32_t dp = 0;            // 0 where the source does not say
  std::string dist_opt;       // fpgather: bucketed or layerwise; "" for Megatron
  std::string state_layout;   // fpgather: bucket or model; Megatron: dp_reshardable or fully_reshardable
  std::optional<uint64_t> bucket_size;  // unset: one bucket per buffer (or not known)
  bool pad_for_nccl = false;
  uint64_t accumulation = 1;  // fpgather: micro-batches per rank per step of the run it resumes
};

struct ReshardReport {
  std::string source, target;  // source: the directory read (after resolving `latest`)
  bool dry_run = false;
  ReshardLayout from, to;
  uint64_t tensors = 0;        // keys written
  uint64_t bytes_read = 0;     // fpgather: stored bytes of the source chunks read (planned, with dry_run)
  uint64_t bytes_written = 0;  // logical bytes of the tensors written (planned, with dry_run)
};

// Error(usage) for options the source cannot serve or a target that exists, Error(check_failed) for
// a source that fails validation, Error(format) for one that cannot be read.
ReshardReport reshard(const Checkpoint& source, const std::string& target, const ReshardOptions& options);

}  // namespace fpgather
