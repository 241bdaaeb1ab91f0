#include "pipeline/rank_pipeline.h"

#include <chrono>
#include <string>

#include "core/error.h"
#include "pipeline/bucketed_part.h"
#include "pipeline/fp8_params.h"
#include "pipeline/grad_norm.h"
#include "pipeline/layer_wise_part.h"
#include "pipeline/optimizer_step.h"
#include "pipeline/pipeline_layout.h"

namespace fpg::pipeline {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

optim::OptimizerKind bucketed_kind(const PipelineConfig& c) {
  if (c.optimizer != optim::OptimizerKind::muon) return c.optimizer;
  return c.scalar_optimizer == optim::ScalarOptimizer::lion ? optim::OptimizerKind::lion
                                                             : optim::OptimizerKind::adamw;
}

}  // namespace

RankPipeline::RankPipeline(const model::ModelSpec& spec, const PipelineConfig& cfg, comm::Communicator& comm,
                           const InitFn& init, size_t threads)
    : spec_(spec), cfg_(cfg), comm_(comm), pool_(threads == 0 ? 1 : threads) {
  validate_config(cfg_);
  model::validate_spec(spec_);
  const uint32_t dp = static_cast<uint32_t>(comm_.size());
  state_.rank = static_cast<uint32_t>(comm_.rank());
  state_.dp = dp;
  fp8_ = make_fp8_tensors(spec_, cfg_, state_.fp8, fp8_index_);

  const layout::BucketedOptions bo = bucketed_options(spec_, cfg_, dp);
  state_.bucketed.kind = bucketed_kind(cfg_);
  if (cfg_.dist_opt == DistOpt::layerwise) {
    lw_layout_ = std::make_unique<layout::LayerWiseLayout>(
        layout::build_layer_wise_layout(spec_, bo, layer_wise_options(cfg_)));
    state_.layer_wise.kind = cfg_.optimizer;
    layer_wise_ = std::make_unique<LayerWisePart>(spec_, *lw_layout_, cfg_, comm_, state_.layer_wise, state_.fp8,
                                                  fp8_, fp8_index_, pool_);
    bucketed_ = std::make_unique<BucketedPart>(spec_, lw_layout_->scalar, cfg_, comm_, state_.bucketed, state_.fp8,
                                               fp8_, fp8_index_, pool_);
  } else {
    bucketed_ = std::make_unique<BucketedPart>(spec_, layout::build_bucketed_layout(spec_, bo), cfg_, comm_,
                                               state_.bucketed, state_.fp8, fp8_, fp8_index_, pool_);
  }

  // Seed the masters from the initial values, then release them.
  {
    std::vector<float> scratch;
    bucketed_->init_masters(init, scratch);
    if (layer_wise_) layer_wise_->init_masters(init);
  }

  values_.resize(spec_.params.size());
  param_ptrs_.resize(spec_.params.size());
  grad_ptrs_.resize(spec_.params.size());
  for (uint32_t p = 0; p < spec_.params.size(); ++p) {
    values_[p].assign(spec_.params[p].numel(), 0.0f);
    param_ptrs_[p] = values_[p].data();
    if (layer_wise_ && layer_wise_->holds(p)) grad_ptrs_[p] = layer_wise_->grad_of(p);
    else if (bucketed_->holds(p)) grad_ptrs_[p] = bucketed_->grad_of(p);
    else throw InternalError("pipeline: no layout holds param " + spec_.params[p].name);
  }
  PhaseTimes t;
  copy_back_and_gather(t);
}

RankPipeline::~RankPipeline() = default;

const layout::BucketedLayout& RankPipeline::bucketed_layout() const { return bucketed_->layout(); }

bool RankPipeline::is_fp8(uint32_t param) const { return fp8_index_[param] >= 0; }

bool RankPipeline::layer_wise_managed(uint32_t param) const { return layer_wise_ && layer_wise_->holds(param); }

std::optional<Transport> RankPipeline::transport(uint32_t param) const {
  if (!layer_wise_managed(param)) return std::nullopt;
  return layer_wise_->transport(param);
}

std::vector<uint8_t> RankPipeline::stored_bytes(uint32_t param) const {
  return layer_wise_managed(param) ? layer_wise_->stored_bytes(param) : bucketed_->stored_bytes(param);
}

ParamStorage RankPipeline::param_storage(uint32_t param) {
  if (param >= spec_.params.size()) throw InternalError("pipeline: no param #" + std::to_string(param));
  return layer_wise_managed(param) ? layer_wise_->storage(param) : bucketed_->storage(param);
}

ParamStorage RankPipeline::param_storage(uint32_t param) const {
  return const_cast<RankPipeline*>(this)->param_storage(param);
}

void RankPipeline::params_loaded() { publish_params(); }

void RankPipeline::publish_params() {
  for (uint32_t p = 0; p < spec_.params.size(); ++p) {
    if (layer_wise_managed(p)) layer_wise_->materialize(p, values_[p].data());
    else bucketed_->materialize(p, values_[p].data());
  }
}

void RankPipeline::copy_back_and_gather(PhaseTimes& t) {
  auto t0 = Clock::now();
  bucketed_->copy_back();
  if (layer_wise_) layer_wise_->copy_back();
  t.copy_back += since(t0);

  t0 = Clock::now();
  std::vector<comm::WorkPtr> works;
  bucketed_->gather(works);
  if (layer_wise_) layer_wise_->gather(works);
  comm::wait_all(works);
  t.gather += since(t0);

  if (layer_wise_) {
    t0 = Clock::now();
    layer_wise_->requantize();
    t.copy_back += since(t0);
  }
  t0 = Clock::now();
  publish_params();
  t.decode += since(t0);
}

StepReport RankPipeline::step(const GradFn& grad_fn, uint64_t micro_batches) {
  if (micro_batches == 0) throw UsageError("pipeline: a step needs at least one micro-batch");
  StepReport rep;
  auto t0 = Clock::now();
  grad_fn(param_ptrs_, grad_ptrs_);
  rep.times.forward_backward = since(t0);

  t0 = Clock::now();
  {
    std::vector<comm::WorkPtr> works;
    bucketed_->reduce_scatter(works);
    if (layer_wise_) layer_wise_->all_reduce(works);
    comm::wait_all(works);
  }
  rep.times.reduce_scatter = since(t0);

  t0 = Clock::now();
  const float divisor = static_cast<float>(micro_batches);
  GradNorm norm;
  bucketed_->scale_grads(divisor, norm);
  if (layer_wise_) layer_wise_->scale_grads(divisor, norm);
  norm.reduce_max(comm_);
  if (!norm.finite) {
    rep.grad_norm = norm.norm;
    rep.skipped = true;
    rep.optimizer_step = state_.bucketed.step;
    rep.times.optimizer = since(t0);
    return rep;
  }
  bucketed_->add_squares(norm);
  if (layer_wise_) layer_wise_->add_squares(norm);
  norm.reduce_sum(comm_);
  rep.grad_norm = norm.norm;
  if (cfg_.clip_grad > 0) {
    rep.clip_coef = clip_coefficient(norm.norm, cfg_.clip_grad);
    if (rep.clip_coef < 1.0f) {
      bucketed_->clip(rep.clip_coef);
      if (layer_wise_) layer_wise_->clip(rep.clip_coef);
    }
  }
  bucketed_->step_optimizer(make_hypers(cfg_, state_.bucketed.kind));
  if (layer_wise_) layer_wise_->step_optimizer(make_hypers(cfg_, state_.layer_wise.kind));
  rep.optimizer_step = state_.bucketed.step;
  rep.times.optimizer = since(t0);

  copy_back_and_gather(rep.times);
  return rep;
}

}  // namespace fpg::pipeline
