#include "pipeline/step_orchestrator.h"

#include <chrono>

#include "core/error.h"

namespace fpg::pipeline {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

StepReport run_step(StepBackend& b, const GradFn& grad_fn, uint64_t micro_batches) {
  if (micro_batches == 0) throw UsageError("pipeline: a step needs at least one micro-batch");
  StepReport rep;
  auto t0 = Clock::now();
  b.forward_backward(grad_fn);
  b.end_phase();
  rep.times.forward_backward = since(t0);

  t0 = Clock::now();
  b.reduce_grads();
  b.end_phase();
  rep.times.reduce_scatter = since(t0);

  t0 = Clock::now();
  GradNorm norm;
  const float divisor = static_cast<float>(micro_batches);
  const bool squares_added = b.communicator().size() == 1 && b.scale_grads_and_add_squares(divisor, norm);
  if (!squares_added) b.scale_grads(divisor, norm);
  norm.set_global_max(b.all_reduce_max(norm.local_max));
  if (!norm.finite) {  // found_inf: no update, the step count stays
    rep.grad_norm = norm.norm;
    rep.skipped = true;
    rep.optimizer_step = b.optimizer_steps();
    rep.times.optimizer = since(t0);
    return rep;
  }
  if (!squares_added) b.add_squares(norm);
  norm.reduce_sum(b.communicator());
  rep.grad_norm = norm.norm;
  const double max_norm = b.config().clip_grad;
  if (max_norm > 0) {
    rep.clip_coef = clip_coefficient(norm.norm, max_norm);
    if (rep.clip_coef < 1.0f) b.clip(rep.clip_coef);
  }
  b.step_optimizer();
  rep.optimizer_step = b.optimizer_steps();
  b.end_phase();
  rep.times.optimizer = since(t0);

  t0 = Clock::now();
  b.copy_back();
  b.end_phase();
  rep.times.copy_back = since(t0);

  t0 = Clock::now();
  b.gather();
  b.end_phase();
  rep.times.gather = since(t0);

  t0 = Clock::now();
  b.requantize();
  rep.times.copy_back += since(t0);

  t0 = Clock::now();
  if (b.decode()) {
    b.end_phase();
    rep.times.decode = since(t0);
  }
  return rep;
}

}  // namespace fpg::pipeline
