#include "app/train/train_setup.h"

#include "comm/group.h"
#include "core/error.h"
#include "pipeline/fp8_params.h"
#include "app/train/fp32_params.h"

namespace fpg::app::train {

model::ModelSpec training_spec(const TrainOptions& o) {
  if (!o.spec.network) throw UsageError("train: the model spec does not describe the built-in network");
  if (o.dp == 0) throw UsageError("train: dp must be at least 1");
  if (o.micro_batch < 1) throw UsageError("train: micro-batch must be at least 1");
  if (o.accumulation < 1) throw UsageError("train: accumulation must be at least 1");
  if (o.overlap_grad_reduce || o.overlap_param_gather)  // the CPU pipeline's phases run one after another
    throw UsageError("train: --overlap-grad-reduce and --overlap-param-gather need --device cuda");
  (void)comm::make_host_group(o.comm, static_cast<int>(o.dp));  // refuses nccl, threads under mpirun, …
  pipeline::validate_config(o.pipeline);
  model::ModelSpec spec = o.spec;
  apply_fp32_params(spec, o.keep_fp32, o.fp32_matrices, o.pipeline);
  model::validate_spec(spec);
  // The FP8 plans of every param: a shape the recipe cannot take is refused here, naming the param.
  std::vector<pipeline::Fp8ParamState> states;
  std::vector<int32_t> index;
  pipeline::make_fp8_tensors(spec, o.pipeline, states, index);
  return spec;
}

std::vector<std::string> training_warnings(const TrainOptions& o) {
  model::ModelSpec spec = o.spec;
  return apply_fp32_params(spec, o.keep_fp32, o.fp32_matrices, o.pipeline);
}

pipeline::PipelineLayout training_layout(const TrainOptions& o) {
  return pipeline::build_pipeline_layout(training_spec(o), o.pipeline, o.dp);
}

}  // namespace fpg::app::train
