// One DP rank of a distributed-optimizer step pipeline (DESIGN.md, "The step pipelines"): the
// bucketed one (ZeRO-1 over every param) or the layer-wise one (whole matrices per owner, chained
// with a bucketed part for the rest). Every rank of a group builds one from the same spec and config
// on its own thread and calls step() in lockstep.
//
// A step:
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
//
// FP8 masters are seeded from the high-precision initial values (init), which are released after
// construction; the initial params come out of a regular copy-back and gather. Delayed scaling
// starts at TE's initial scale 1 and learns its scale from the recorded amaxes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "core/thread_pool.h"
#include "layout/bucketed_layout.h"
#include "layout/layer_wise_layout.h"
#include "model/model_spec.h"
#include "pipeline/config.h"
#include "pipeline/param_storage.h"
#include "pipeline/rank_state.h"

namespace fpg::pipeline {

class BucketedPart;
class LayerWisePart;
struct Fp8Tensor;

// Initial fp32 values of spec param `param` (all its numel elements) into out. Called only for the
// params (or parts of them) the rank updates.
using InitFn = std::function<void(uint32_t param, float* out)>;
// Step 1 above: params[i] / grads[i] are spec param i, flattened row-major.
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

class RankPipeline {
 public:
  // threads: this rank's ThreadPool for the batched FP8 passes (1: the rank's own thread only; the
  // results do not depend on it).
  RankPipeline(const model::ModelSpec& spec, const PipelineConfig& cfg, comm::Communicator& comm,
               const InitFn& init, size_t threads = 1);
  ~RankPipeline();
  RankPipeline(const RankPipeline&) = delete;
  RankPipeline& operator=(const RankPipeline&) = delete;

  // micro_batches: M of the scaling convention (dp · accumulation). micro_batches = 1 on any number
  // of ranks applies the rank-order SUM of the grads unscaled (x / 1.0f == x for every float, NaN
  // and -0.0 included): `fpgather step` feeds its gradient on rank 0 and -0.0 elsewhere
  // (g + -0.0 == g, bitwise, +0.0 included) so the replayed gradient reaches the optimizer as given.
  StepReport step(const GradFn& grad_fn, uint64_t micro_batches);

  const model::ModelSpec& spec() const { return spec_; }
  const PipelineConfig& config() const { return cfg_; }
  // Every param as fp32, as the network reads it (spec order).
  const std::vector<const float*>& params() const { return param_ptrs_; }
  // Param p's stored bytes (bf16 bits, fp32, or FP8 data + columnwise + scale state).
  std::vector<uint8_t> stored_bytes(uint32_t param) const;
  bool is_fp8(uint32_t param) const;
  // Whether the layer-wise part holds param (a whole-owned matrix), and its owner's transport.
  bool layer_wise_managed(uint32_t param) const;
  // How a layer-wise matrix travels after its owner's update; nothing for bucketed params.
  std::optional<Transport> transport(uint32_t param) const;

  // The param's storage, for a checkpoint loader to overwrite (then call params_loaded()) or a saver
  // to read (it must not write).
  ParamStorage param_storage(uint32_t param);
  ParamStorage param_storage(uint32_t param) const;
  // After a loader overwrote state() and every param's storage with a saved state: decode the params
  // for the next forward. No collective and no re-quantization, so the state continues bit for bit
  // (re-deriving params by a copy-back would re-record a delayed-scaling amax).
  void params_loaded();

  RankState& state() { return state_; }
  const RankState& state() const { return state_; }
  const layout::BucketedLayout& bucketed_layout() const;  // the scalar layout in layer-wise mode
  const layout::LayerWiseLayout* layer_wise_layout() const { return lw_layout_.get(); }

 private:
  void publish_params();
  void copy_back_and_gather(PhaseTimes& t);

  model::ModelSpec spec_;
  PipelineConfig cfg_;
  comm::Communicator& comm_;
  ThreadPool pool_;
  RankState state_;
  std::vector<Fp8Tensor> fp8_;
  std::vector<int32_t> fp8_index_;
  std::unique_ptr<layout::LayerWiseLayout> lw_layout_;
  std::unique_ptr<BucketedPart> bucketed_;
  std::unique_ptr<LayerWisePart> layer_wise_;
  std::vector<std::vector<float>> values_;
  std::vector<const float*> param_ptrs_;
  std::vector<float*> grad_ptrs_;
};

}  // namespace fpg::pipeline
