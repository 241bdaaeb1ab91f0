#include "pipeline/rank_pipeline.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "pipeline/bucketed_part.h"
#include "pipeline/fp8_params.h"
#include "pipeline/layer_wise_part.h"
#include "pipeline/optimizer_step.h"
#include "pipeline/rank_plan.h"

namespace fpg::pipeline {

RankPipeline::RankPipeline(const model::ModelSpec& spec, const PipelineConfig& cfg, comm::Communicator& comm,
                           const InitFn& init, size_t threads)
    : spec_(spec), cfg_(cfg), comm_(comm), pool_(threads == 0 ? 1 : threads) {
  RankPlan plan = plan_rank(spec_, cfg_, static_cast<uint32_t>(comm_.rank()), static_cast<uint32_t>(comm_.size()));
  state_ = std::move(plan.state);
  fp8_ = std::move(plan.fp8);
  fp8_index_ = std::move(plan.fp8_index);
  lw_layout_ = std::move(plan.layer_wise);
  if (lw_layout_)
    layer_wise_ = std::make_unique<LayerWisePart>(spec_, *lw_layout_, cfg_, comm_, state_.layer_wise, state_.fp8,
                                                  fp8_, fp8_index_, pool_);
  bucketed_ = std::make_unique<BucketedPart>(spec_, std::move(plan.bucketed), cfg_, comm_, state_.bucketed,
                                             state_.fp8, fp8_, fp8_index_, pool_);

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
  // The initial params: a regular copy-back and gather of the seeded masters.
  copy_back();
  gather();
  requantize();
  decode();
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

void RankPipeline::params_loaded() { decode(); }

StepReport RankPipeline::step(const GradFn& grad_fn, uint64_t micro_batches) {
  return run_step(*this, grad_fn, micro_batches);
}

void RankPipeline::forward_backward(const GradFn& grad_fn) { grad_fn(param_ptrs_, grad_ptrs_); }

void RankPipeline::reduce_grads() {
  std::vector<comm::WorkPtr> works;
  bucketed_->reduce_scatter(works);
  if (layer_wise_) layer_wise_->all_reduce(works);
  comm::wait_all(works);
}

void RankPipeline::scale_grads(float divisor, GradNorm& norm) {
  bucketed_->scale_grads(divisor, norm);
  if (layer_wise_) layer_wise_->scale_grads(divisor, norm);
}

float RankPipeline::all_reduce_max(float local) {
  float m = local;
  comm_.all_reduce(&m, 1, DType::F32, comm::ReduceOp::max)->wait();
  return m;
}

void RankPipeline::add_squares(GradNorm& norm) {
  bucketed_->add_squares(norm);
  if (layer_wise_) layer_wise_->add_squares(norm);
}

void RankPipeline::clip(float coef) {
  bucketed_->clip(coef);
  if (layer_wise_) layer_wise_->clip(coef);
}

void RankPipeline::step_optimizer() {
  bucketed_->step_optimizer(make_hypers(cfg_, state_.bucketed.kind));
  if (layer_wise_) layer_wise_->step_optimizer(make_hypers(cfg_, state_.layer_wise.kind));
}

void RankPipeline::copy_back() {
  bucketed_->copy_back();
  if (layer_wise_) layer_wise_->copy_back();
}

void RankPipeline::gather() {
  std::vector<comm::WorkPtr> works;
  bucketed_->gather(works);
  if (layer_wise_) layer_wise_->gather(works);
  comm::wait_all(works);
}

void RankPipeline::requantize() {
  if (layer_wise_) layer_wise_->requantize();
}

bool RankPipeline::decode() {
  for (uint32_t p = 0; p < spec_.params.size(); ++p) {
    if (layer_wise_managed(p)) layer_wise_->materialize(p, values_[p].data());
    else bucketed_->materialize(p, values_[p].data());
  }
  return true;
}

}  // namespace fpg::pipeline
