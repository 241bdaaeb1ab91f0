// One DP rank's distributed-optimizer step (lib/ARCHITECTURE.md), written once over the
// phases a backend runs where its buffers live: the host (pipeline::RankPipeline, the bit-exact
// reference) or a GPU (device::DeviceRankPipeline, which must equal it bitwise where the math is
// elementwise). run_step owns the order of the phases, the scaling convention, the non-finite skip,
// the clip decision and the phase timings; buffers, streams and collective overlap are the backend's.
//
// A step (every rank of a group in lockstep):
//   1. forward/backward  grad_fn(params, grads): params are every param as fp32, decoded from what
//      the rank holds after the last gather (FP8 dequantized); grads point into the grad buffers,
//      and grad_fn must OVERWRITE them with the sum over the rank's micro-batches of each
//      micro-batch's mean-loss gradient, accumulated starting from the first micro-batch's gradient
//      (GradMode::overwrite, then accumulate), never from zero (-0.0 must survive, bitwise).
//   2. gradient reduction  bucketed: reduce-scatter per bucket (SUM in rank order);
//      layer-wise matrices: one all-reduce SUM (rank order) of their grad buffer.
//   3. scaling convention  after the sum, every owned gradient element is divided ONCE by
//      float(M), M = the number of micro-batches of the step over all ranks (dp · accumulation):
//      g = fp32(Σ_ranks Σ_microbatches g_mb) / fp32(M), a correctly rounded division. The sum is
//      rank-major, micro-batch-minor, the same association as a DP=1 run accumulating the same
//      M micro-batches in order when each rank has one micro-batch; so DP=N (accumulation 1) equals
//      DP=1 (accumulation N) bitwise. (With accumulation A > 1 on N > 1 ranks the sum groups as
//      ((Σ_a g_0a) + (Σ_a g_1a)) + …, which equals DP=1 only up to fp32 association.)
//   4. grad norm and clipping (grad_norm.h: exact, DP-invariant; non-finite → the step is skipped).
//   5. optimizer step on the owned fp32 masters (one multi-tensor call; Muon per owned matrix).
//   6. copy-back: bf16 cast / fp32 copy / FP8 shard-aware quantization (bucketed_part.h), owners'
//      staging or compact quantization (layer_wise_part.h).
//   7. gather: per-bucket equal all-gathers; uneven all-gathers of owned matrices; then every rank
//      re-quantizes its staged FP8 matrices in one batched pass; params decoded for the next step.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "pipeline/config.h"
#include "pipeline/grad_norm.h"

namespace fpg::pipeline {

// Initial fp32 values of spec param `param` (all its numel elements) into out, in host memory.
// Called only for the params (or parts of them) the rank updates.
using InitFn = std::function<void(uint32_t param, float* out)>;
// Step 1 above, for every backend: params[i] / grads[i] are spec param i, flattened row-major, in
// the backend's memory (host vectors for RankPipeline; device memory for DeviceRankPipeline, whose
// grad_fn enqueues its work on the pipeline's stream()).
using GradFn = std::function<void(const std::vector<const float*>& params, const std::vector<float*>& grads)>;

// Seconds spent in each phase of one step on this rank.
struct PhaseTimes {
  double forward_backward = 0;  // grad_fn
  double reduce_scatter = 0;    // gradient reduce-scatter / all-reduce
  double optimizer = 0;         // scaling, grad norm, clipping, optimizer step
  double copy_back = 0;         // masters -> bf16/FP8 params (incl. layer-wise re-quantization)
  double gather = 0;            // param all-gathers, the collectives alone
  double decode = 0;            // the gathered params decoded to fp32 for the next forward (bf16, FP8)
  double total() const { return forward_backward + reduce_scatter + optimizer + copy_back + gather + decode; }
};

struct StepReport {
  double grad_norm = 0;    // after scaling, before clipping; inf/NaN when skipped
  float clip_coef = 1.0f;  // applied when < 1
  bool skipped = false;    // non-finite gradients: no update (found_inf)
  int64_t optimizer_step = 0;  // steps taken so far (the bucketed part's counter)
  PhaseTimes times;
};

// The phases of a step as one backend runs them, each over every part the rank holds (the bucketed
// part, then the layer-wise matrices when there are any). A device backend may only enqueue work;
// end_phase() then waits for it, so that the host clock times each phase.
class StepBackend {
 public:
  virtual ~StepBackend() = default;

  virtual comm::Communicator& communicator() = 0;
  virtual const PipelineConfig& config() const = 0;

  // 1. grad_fn on the backend's params and grad slots.
  virtual void forward_backward(const GradFn& grad_fn) = 0;
  // 2. The gradient reduction, complete on return.
  virtual void reduce_grads() = 0;
  // 3. Owned grads /= divisor (one correctly rounded fp32 division each), their max |g| folded into
  //    norm.local_max in the same pass.
  virtual void scale_grads(float divisor, GradNorm& norm) = 0;
  // 3 and 4 at once, for a group of one rank (its local max is the global max): scale_grads, then
  // add_squares at norm_exponent of the max, without returning to the host in between. False when
  // the backend does not (run_step then calls the two).
  virtual bool scale_grads_and_add_squares(float /*divisor*/, GradNorm& /*norm*/) { return false; }
  // All-reduce MAX of one float over the group (NaN-propagating).
  virtual float all_reduce_max(float local) = 0;
  // 4. Σ q(g) of the owned grads at norm.exponent into norm.local_sum (grad_norm.h, step 3).
  virtual void add_squares(GradNorm& norm) = 0;
  virtual void clip(float coef) = 0;  // owned grads *= coef
  // 5. The optimizer step on the owned masters.
  virtual void step_optimizer() = 0;
  virtual int64_t optimizer_steps() const = 0;  // the bucketed part's step counter
  // 6. Masters -> the rank's param bytes.
  virtual void copy_back() = 0;
  // 7. The param all-gathers: complete on return, or left in flight when the backend overlaps them
  //    with the next forward.
  virtual void gather() = 0;
  // After the gather: every rank re-quantizes the layer-wise FP8 matrices from the gathered bytes
  // (timed as copy-back). A backend that does it when it waits the gather does nothing here.
  virtual void requantize() = 0;
  // The gathered params decoded for the next forward. False when the backend decodes each param
  // on its first read instead (and did nothing here): the step then reports no decode time.
  virtual bool decode() = 0;

  // The work of the phase just issued is complete (a device synchronizes its stream).
  virtual void end_phase() {}
};

// Steps 1-7 on `backend`. micro_batches: M of the scaling convention; UsageError when 0.
StepReport run_step(StepBackend& backend, const GradFn& grad_fn, uint64_t micro_batches);

}  // namespace fpg::pipeline
