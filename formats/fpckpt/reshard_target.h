// `fpgather reshard` planning: from a training checkpoint's index (its documents say what run wrote
// it) and the target options, the target layout — computed by the same layout engine `train` uses
// (pipeline/pipeline_layout.h) — and the plan (ckpt/reshard_plan.h) that writes, per target rank,
// exactly what a DP-M run of that configuration would save (what app/checkpoint/state_save.h saves): its optimizer-state
// fragments in the chosen state layout with the layout's padding, its matrices whole (layer-wise),
// the weights over the same ranges, each FP8 param's scale state by the owner of element 0. Every
// source value is addressed through its own layout as (param, state, element), so bucket <-> model
// layouts, bucketed <-> layer-wise, DP sizes and bucket sizes all go through one path.
//
// Documents: `layout` is the target layout; `optimizer` gets the target dist_opt, state_layout and
// matrix_states; `data` gets the target DP and an accumulation that keeps the global batch
// (dp x accumulation micro-batches per step), so the resumed run draws the same data; the model
// spec, hyperparameters, step, FP8 recipe state and RNG are carried over unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ckpt/index.h"
#include "ckpt/key_names.h"
#include "ckpt/reshard_plan.h"
#include "model/model_spec.h"
#include "pipeline/config.h"
#include "pipeline/pipeline_layout.h"

namespace fpg::fpckpt {

// What to change; nullopt keeps the source's value.
struct ReshardOptions {
  uint32_t dp = 0;                                      // --dp M (required, >= 1)
  std::optional<pipeline::DistOpt> dist_opt;            // --dist-opt
  std::optional<ckpt::StateLayout> state_layout;        // --ckpt-layout
  std::optional<std::optional<uint64_t>> bucket_size;   // --bucket-size N|none
  std::optional<bool> pad_for_nccl;                     // --pad-for-nccl / --no-pad-for-nccl
  std::optional<uint64_t> accumulation;                 // --accumulation K
};

// The run a checkpoint describes, as far as its layout is concerned.
struct RecordedRun {
  model::ModelSpec spec;
  pipeline::PipelineConfig config;  // optimizer, dist-opt, FP8 on/off, layout options (not hyperparameters)
  uint32_t dp = 1;
  ckpt::StateLayout state_layout = ckpt::StateLayout::model;
  pipeline::PipelineLayout layout;
  std::vector<std::string> states, matrix_states;  // saved names (matrix_states: layer-wise matrices)
  uint64_t accumulation = 1;                       // from the data cursor (1 if none)
};

// Reads the documents of a training checkpoint (FormatError naming `dir` and the document if one is
// missing or malformed, or if the recorded layout is not the one this fpgather computes from the
// recorded options).
RecordedRun recorded_run(const ckpt::Documents& docs, const std::string& dir);

struct ReshardTarget {
  RecordedRun source, target;
  ckpt::ReshardPlan plan;
};

// The plan from `source` (a validated index of the checkpoint at `dir`) to `opts`. UsageError with
// the reason when the target cannot hold the state (Muon with --dist-opt bucketed, a global batch
// that does not split over M ranks without --accumulation, dp 0).
ReshardTarget plan_reshard(const ckpt::Index& source, const std::string& dir, const ReshardOptions& opts);

}  // namespace fpg::fpckpt
