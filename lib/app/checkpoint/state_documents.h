// The documents of a training checkpoint (man 5 fpgather-format, "TRAINING STATE"): what the run
// was, so that a loader can check it resumes the same run, and so that validate, inspect and
// reshard can read the state without the program that wrote it. Each is written and read here (the
// stored-state fields of `optimizer`: ckpt/stored_states.h; model and layout: their JSON modules).
//   model      the spec (model/spec_json.h), fp32-kept params marked
//   layout     the bucketed or layer-wise layout (layout/layout_json.h): DP size, bucket size,
//              padding rules; its kind is the distributed optimizer
//   optimizer  {"name", "scalar_optimizer" (muon), "dist_opt", "hyperparameters": {...}, "step",
//              "state_layout", "states", "matrix_states" (layer-wise)}
//   fp8        {"enabled", "recipe": {...}, "delayed": {...}, "params": [{"name", "keys": [...]}]}
//   data       {"cursor": {seed, next_step, micro_batch, accumulation, dp}, "order": ...}
//   rng        {"generator": "philox4x32-10", "seed", "stateless": true, ...}
#pragma once

#include <string>
#include <vector>

#include "ckpt/documents.h"
#include "ckpt/key_names.h"
#include "pipeline/rank_pipeline.h"
#include "app/checkpoint/rank_state_access.h"
#include "app/train/trainer.h"

namespace fpg::app::checkpoint {

// The state names a part saves: "master" and the optimizer's (pipeline::state_keys).
std::vector<std::string> saved_states(optim::OptimizerKind kind);

// The documents describing `rank`'s run (any rank: they are alike) at `cursor`, with optimizer
// state stored in layout `state_layout`.
ckpt::Documents state_documents(const RankStateAccess& rank, const train::TrainCursor& cursor,
                                ckpt::StateLayout state_layout);
ckpt::Documents state_documents(const pipeline::RankPipeline& rank, const train::TrainCursor& cursor,
                                ckpt::StateLayout state_layout);

// Refuses (UsageError, exit 2) to resume the run described by `run` from the checkpoint at `dir`
// whose documents are `saved`, naming the first difference: the model, the layout (another DP size
// or layout is the job of `fpgather reshard`), the optimizer and its hyperparameters, the FP8 recipe,
// the data stream (seed, micro-batch, accumulation). The state layout, the step, the lr, the weight
// decay and the clipping threshold may differ.
void check_resumable(const ckpt::Documents& saved, const ckpt::Documents& run, const std::string& dir);

// The saved cursor (FormatError naming `dir` if the data document is missing or malformed).
train::TrainCursor saved_cursor(const ckpt::Documents& saved, const std::string& dir);

// Optimizer steps taken by the saved run (the optimizer document's "step": Adam's bias correction).
int64_t saved_optimizer_step(const ckpt::Documents& saved, const std::string& dir);

// The run the documents describe: the model spec, DP size, distributed optimizer and layout
// options, optimizer and hyperparameters, FP8 recipe, data stream; steps = the saved cursor's
// next_step. Offline tools that rebuild the pipelines of a saved run (re-encoding a checkpoint with
// another FP8 recipe) start from it, and prove the rebuild by comparing the documents the rebuilt
// run would write with the saved ones. FormatError naming `dir`, the document and the field on a
// missing or malformed field.
train::TrainOptions run_from_documents(const ckpt::Documents& docs, const std::string& dir);

}  // namespace fpg::app::checkpoint
