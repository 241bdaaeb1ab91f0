// What `fpgather train` checks and shows before it runs: the spec it trains (options applied and
// validated up front, so a bad configuration fails on the calling thread with a UsageError before
// any rank starts) and the layout its ranks build (`--print-layout`).
#pragma once

#include <string>
#include <vector>

#include "model/model_spec.h"
#include "pipeline/pipeline_layout.h"
#include "app/train/trainer.h"

namespace fpg::app::train {

// The spec with --keep-fp32 and --fp32-matrices applied, after checking the options (dp, comm, micro-batch, accumulation),
// the pipeline config and whether the FP8 recipe can take every FP8 param's shape (MXFP8 needs
// multiples of 32). Throws UsageError with the reason.
model::ModelSpec training_spec(const TrainOptions& o);

// What the user should hear about the options before the run (app/train/fp32_params.h); UsageError as
// training_spec for a bad regex.
std::vector<std::string> training_warnings(const TrainOptions& o);

// The layout the ranks of this run build (pipeline/pipeline_layout.h).
pipeline::PipelineLayout training_layout(const TrainOptions& o);

}  // namespace fpg::app::train
