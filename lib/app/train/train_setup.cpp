#include "app/train/train_setup.h"

#include <algorithm>
#include <string>

#include "comm/group.h"
#include "core/error.h"
#include "pipeline/fp8_params.h"
#include "app/train/fp32_params.h"

namespace fpg::app::train {

model::ModelSpec training_spec(const TrainOptions& o) {
  if (!o.spec.network) throw UsageError("train: the model spec does not describe the built-in network");
  if (o.dp == 0) throw UsageError("train: dp must be at least 1");
  if (o.steps > kMaxTrainSteps)
    throw UsageError("train: steps must be at most " + std::to_string(kMaxTrainSteps) + ", not " + std::to_string(o.steps));
  if (o.micro_batch < 1 || o.micro_batch > kMaxMicroBatch)
    throw UsageError("train: micro-batch must be from 1 to " + std::to_string(kMaxMicroBatch) + " rows");
  if (o.accumulation < 1 || o.accumulation > kMaxAccumulation)
    throw UsageError("train: accumulation must be from 1 to " + std::to_string(kMaxAccumulation));
  const model::NetworkDims& d = *o.spec.network;
  const uint64_t widest = std::max({d.input, d.hidden, 2 * d.ffn, d.output, uint64_t{1}});
  if (static_cast<uint64_t>(o.micro_batch) > kMaxActivationElements / widest)
    throw UsageError("train: a micro-batch of " + std::to_string(o.micro_batch) + " rows of the widest layer (" +
                     std::to_string(widest) + ") is more than " + std::to_string(kMaxActivationElements) +
                     " elements an activation; at most " + std::to_string(kMaxActivationElements / widest) + " rows");
  if (o.overlap_grad_reduce || o.overlap_param_gather)  // the CPU pipeline's phases run one after another
    throw UsageError(Message("train: ", Field{"overlap_grad_reduce"}, " and ", Field{"overlap_param_gather"}, " need ",
                             Field{"device"}, " cuda"));
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
