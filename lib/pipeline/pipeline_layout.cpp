#include "pipeline/pipeline_layout.h"

#include "layout/describe.h"
#include "pipeline/fp8_params.h"

namespace fpg::pipeline {

layout::BucketedOptions bucketed_options(const model::ModelSpec& spec, const PipelineConfig& cfg, uint32_t dp) {
  layout::BucketedOptions bo;
  bo.dp = dp;
  bo.bucket_size = cfg.bucket_size;
  bo.pad_for_nccl = cfg.pad_for_nccl;
  bo.grad_reduce_in_fp32 = true;
  bo.fp8 = fp8_flags(spec, cfg);
  return bo;
}

layout::LayerWiseOptions layer_wise_options(const PipelineConfig& cfg) {
  layout::LayerWiseOptions lo;
  lo.fp32_matrices = cfg.fp32_matrices;
  return lo;
}

PipelineLayout build_pipeline_layout(const model::ModelSpec& spec, const PipelineConfig& cfg, uint32_t dp) {
  PipelineLayout l;
  const layout::BucketedOptions bo = bucketed_options(spec, cfg, dp);
  if (cfg.dist_opt == DistOpt::layerwise) l.layer_wise = layout::build_layer_wise_layout(spec, bo, layer_wise_options(cfg));
  else l.bucketed = layout::build_bucketed_layout(spec, bo);
  return l;
}

std::string describe(const PipelineLayout& l) {
  return l.layer_wise ? layout::describe(*l.layer_wise) : layout::describe(*l.bucketed);
}

}  // namespace fpg::pipeline
