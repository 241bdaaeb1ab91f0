// What every step pipeline (the host RankPipeline, the device DeviceRankPipeline) builds one DP rank
// from: the checked config and spec, the rank's state skeleton (rank, dp, optimizer kinds, the FP8
// scale states at their initial values), the FP8 plans and the layouts. One function, so that both
// pipelines partition, route and quantize a model alike.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "layout/bucketed_layout.h"
#include "layout/layer_wise_layout.h"
#include "model/model_spec.h"
#include "optim/routing.h"
#include "pipeline/config.h"
#include "pipeline/fp8_params.h"
#include "pipeline/rank_state.h"

namespace fpg::pipeline {

struct RankPlan {
  RankState state;                  // rank, dp, kinds and FP8 scale states; no arenas yet
  std::vector<Fp8Tensor> fp8;       // every FP8 param of the spec
  std::vector<int32_t> fp8_index;   // spec param -> fp8 entry, or -1
  // --dist-opt layerwise: the matrices' layout; null for the bucketed pipeline.
  std::unique_ptr<layout::LayerWiseLayout> layer_wise;
  // The bucketed part's layout: the whole model, or the layer-wise layout's scalar part.
  layout::BucketedLayout bucketed;
};

// The optimizer of the bucketed part: the configured one, or with Muon (layer-wise) the scalar
// optimizer that takes everything Muon does not.
optim::OptimizerKind bucketed_optimizer(const PipelineConfig& cfg);

// Throws UsageError for a config or spec the pipeline cannot run (validate_config, validate_spec,
// FP8 shapes the recipe cannot take).
RankPlan plan_rank(const model::ModelSpec& spec, const PipelineConfig& cfg, uint32_t rank, uint32_t dp);

}  // namespace fpg::pipeline
