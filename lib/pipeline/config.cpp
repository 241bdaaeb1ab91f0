#include "pipeline/config.h"

#include <cmath>

#include "core/error.h"

namespace fpg::pipeline {

const char* dist_opt_name(DistOpt d) { return d == DistOpt::bucketed ? "bucketed" : "layerwise"; }

std::optional<DistOpt> parse_dist_opt(const std::string& name) {
  if (name == "bucketed") return DistOpt::bucketed;
  if (name == "layerwise" || name == "layer-wise") return DistOpt::layerwise;
  return std::nullopt;
}

DistOpt resolve_dist_opt(std::optional<DistOpt> requested, optim::OptimizerKind optimizer) {
  if (requested) return *requested;
  return optimizer == optim::OptimizerKind::muon ? DistOpt::layerwise : DistOpt::bucketed;
}

void validate_config(const PipelineConfig& c) {
  if (c.optimizer == optim::OptimizerKind::muon && c.dist_opt == DistOpt::bucketed)
    throw UsageError(Message(
        "muon needs each matrix whole on one rank (Newton-Schulz orthogonalizes the full matrix), but the "
        "bucketed distributed optimizer cuts params into equal shards across ranks; use ",
        Field{"dist_opt"}, " layerwise"));
  if (!(c.lr > 0) || !std::isfinite(c.lr)) throw UsageError("lr must be a positive finite number");
  if (!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1))
    throw UsageError("betas must lie in [0, 1)");
  if (!(c.eps >= 0)) throw UsageError("eps must be non-negative");
  if (!(c.weight_decay >= 0)) throw UsageError("weight decay must be non-negative");
  if (c.torch_vec_width < 1) throw UsageError("torch vector width must be at least 1");
  if (c.muon_ns_steps < 0 || c.muon_ns_steps > kMaxNsSteps)
    throw UsageError("Newton-Schulz steps must be from 0 to " + std::to_string(kMaxNsSteps));
  if (!(c.muon_momentum >= 0 && c.muon_momentum < 1)) throw UsageError("Muon momentum must lie in [0, 1)");
  if (c.bucket_size && *c.bucket_size == 0) throw UsageError("bucket size must be positive");
  if (c.bucket_size && *c.bucket_size > kMaxBucketSize)
    throw UsageError("bucket size must be at most " + std::to_string(kMaxBucketSize) + " elements");
  if (c.fp8.enabled) {
    const fp8::Recipe& r = c.fp8.recipe;
    if (r.scaling == fp8::Scaling::mxfp8 && !r.mx_rowwise && !r.mx_columnwise)
      throw UsageError("mxfp8 needs rowwise or columnwise scaling (or both)");
    if (r.scaling == fp8::Scaling::delayed && c.fp8.amax_history_len == 0)
      throw UsageError("delayed scaling needs an amax history of at least 1");
    if (c.fp8.amax_history_len > kMaxAmaxHistory)
      throw UsageError("amax history must be at most " + std::to_string(kMaxAmaxHistory));
  }
}

}  // namespace fpg::pipeline
