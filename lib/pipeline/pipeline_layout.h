// The layouts a RankPipeline builds from (spec, config, dp), as a pure function, so that tools
// (`fpgather train --print-layout`) show exactly the layout the pipeline runs on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "layout/bucketed_layout.h"
#include "layout/layer_wise_layout.h"
#include "model/model_spec.h"
#include "pipeline/config.h"

namespace fpg::pipeline {

// Bucket size, NCCL padding, fp32 grad reduction and the FP8 buffers of the config.
layout::BucketedOptions bucketed_options(const model::ModelSpec& spec, const PipelineConfig& cfg, uint32_t dp);
layout::LayerWiseOptions layer_wise_options(const PipelineConfig& cfg);

// Either the bucketed layout (--dist-opt bucketed) or the layer-wise one with its scalar part.
struct PipelineLayout {
  std::optional<layout::BucketedLayout> bucketed;
  std::optional<layout::LayerWiseLayout> layer_wise;
};
PipelineLayout build_pipeline_layout(const model::ModelSpec& spec, const PipelineConfig& cfg, uint32_t dp);

// layout::describe of it (the human tables).
std::string describe(const PipelineLayout& l);

}  // namespace fpg::pipeline
