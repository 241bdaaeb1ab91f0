#include "pipeline/rank_plan.h"

#include "pipeline/pipeline_layout.h"

namespace fpg::pipeline {

optim::OptimizerKind bucketed_optimizer(const PipelineConfig& cfg) {
  if (cfg.optimizer != optim::OptimizerKind::muon) return cfg.optimizer;
  return cfg.scalar_optimizer == optim::ScalarOptimizer::lion ? optim::OptimizerKind::lion
                                                               : optim::OptimizerKind::adamw;
}

RankPlan plan_rank(const model::ModelSpec& spec, const PipelineConfig& cfg, uint32_t rank, uint32_t dp) {
  validate_config(cfg);
  model::validate_spec(spec);
  RankPlan plan;
  plan.state.rank = rank;
  plan.state.dp = dp;
  plan.fp8 = make_fp8_tensors(spec, cfg, plan.state.fp8, plan.fp8_index);
  plan.state.bucketed.kind = bucketed_optimizer(cfg);
  const layout::BucketedOptions bo = bucketed_options(spec, cfg, dp);
  if (cfg.dist_opt == DistOpt::layerwise) {
    plan.layer_wise = std::make_unique<layout::LayerWiseLayout>(
        layout::build_layer_wise_layout(spec, bo, layer_wise_options(cfg)));
    plan.state.layer_wise.kind = cfg.optimizer;
    plan.bucketed = plan.layer_wise->scalar;
  } else {
    plan.bucketed = layout::build_bucketed_layout(spec, bo);
  }
  return plan;
}

}  // namespace fpg::pipeline
