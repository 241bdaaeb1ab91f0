// The ZeRO-1 machinery over one bucketed layout (Megatron-Core's DistributedOptimizer,
// optimizer/distrib_optimizer.py, over layout/bucketed_layout.h): the whole bucketed
// pipeline, or the scalar-optimizer half of the layer-wise one (chained, as Megatron chains a
// DistributedOptimizer with the LayerWiseDistributedOptimizer).
//
// Per rank and per layout buffer: the full param buffer in the buffer's dtype (BF16 as uint16 bits,
// F32 for fp32-kept params, U8 for FP8 params plus a U8 columnwise twin for MXFP8 columnwise) and the
// full fp32 grad buffer (grad_reduce_in_fp32); fp32 masters and optimizer state only for the rank's
// fragments (OptimizerState, explicit param -> fragment map).
//
// Step phases (run_step, pipeline/step_orchestrator.h, calls them through RankPipeline in this order,
// every rank alike):
//   reduce_scatter   per bucket, in place, SUM in rank order (threads backend: deterministic)
//   scale_grads      owned fragments /= micro_batches (one fp32 division; see step_orchestrator.h), and
//                    their max |g| in the same pass
//   add_squares / clip   the exact grad norm's second pass and the clip over owned fragments
//   step_optimizer   one multi-tensor call over every owned fragment
//   copy_back        one pass over owned fragments: bf16 cast, fp32 copy, or FP8 through a FragmentJob
//                    table (batched partial amax -> ONE packed all-reduce MAX of every FP8 tensor's
//                    amax grids -> scales -> batched cast; delayed: cast with the current scale, then
//                    the packed MAX of the step's amaxes is recorded and the scale updated)
//   gather           per bucket, equal in-place all-gather of the param buffer (and columnwise twin)
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/thread_pool.h"
#include "layout/bucketed_layout.h"
#include "model/model_spec.h"
#include "pipeline/config.h"
#include "pipeline/fp8_params.h"
#include "pipeline/grad_norm.h"
#include "pipeline/optimizer_step.h"
#include "pipeline/param_storage.h"
#include "pipeline/rank_state.h"

namespace fpg::pipeline {

// One layout buffer's storage on a rank.
struct BufferStorage {
  std::vector<uint16_t> bf16;   // BF16 params (bits)
  std::vector<float> f32;       // fp32-kept params
  std::vector<uint8_t> u8;      // FP8 params: rowwise data
  std::vector<uint8_t> u8_col;  // FP8 params: MXFP8 columnwise data (when the recipe makes it)
  std::vector<float> grad;      // fp32 grads of the whole buffer
};

class BucketedPart {
 public:
  // `state` (kind set by the caller) and `fp8_states` belong to the caller's RankState and must
  // outlive the part; fp8 describes every FP8 param of the spec (index: spec param -> entry or -1).
  BucketedPart(const model::ModelSpec& spec, layout::BucketedLayout layout, const PipelineConfig& cfg,
               comm::Communicator& comm, OptimizerState& state, std::vector<Fp8ParamState>& fp8_states,
               const std::vector<Fp8Tensor>& fp8, const std::vector<int32_t>& fp8_index, ThreadPool& pool);

  const layout::BucketedLayout& layout() const { return layout_; }
  bool holds(uint32_t param) const { return where_[param].buffer >= 0; }
  // Where the network writes param's gradient (its range of the grad buffer).
  float* grad_of(uint32_t param);
  // Param's values as this rank holds them, as fp32 (bf16 decoded, FP8 dequantized).
  void materialize(uint32_t param, float* out) const;
  // Where param's values lie in this rank's buffers (RankPipeline::param_storage).
  ParamStorage storage(uint32_t param);
  // Param's stored bytes: data (+ columnwise) and, for FP8, its scale state.
  std::vector<uint8_t> stored_bytes(uint32_t param) const;

  // Masters from the initial values: init(param, out) fills a whole param.
  template <class InitFn>
  void init_masters(const InitFn& init, std::vector<float>& scratch);

  void reduce_scatter(std::vector<comm::WorkPtr>& works);
  // Divides the owned grads by divisor and folds their max |g| into n (one pass).
  void scale_grads(float divisor, GradNorm& n);
  void add_squares(GradNorm& n) const;
  void clip(float coef);
  void step_optimizer(const Hypers& h);
  void copy_back();
  void gather(std::vector<comm::WorkPtr>& works);

 private:
  struct Where {
    int32_t buffer = -1;
    uint64_t begin = 0;  // buffer coordinates
  };
  const float* owned_grad(const StateFragment& f) const;

  const model::ModelSpec& spec_;
  layout::BucketedLayout layout_;
  const PipelineConfig& cfg_;
  comm::Communicator& comm_;
  OptimizerState& st_;
  std::vector<Fp8ParamState>& fp8_states_;
  const std::vector<Fp8Tensor>& fp8_;
  const std::vector<int32_t>& fp8_index_;
  ThreadPool& pool_;
  std::vector<BufferStorage> bufs_;
  std::vector<Where> where_;            // per spec param
  std::vector<uint64_t> frag_world_;    // per state fragment: buffer coordinates of its first element
  std::vector<uint32_t> frag_buffer_;   // per state fragment: its buffer
  // FP8: this part's FP8 params (indices into fp8_) and the packed amax arena.
  std::vector<uint32_t> fp8_mine_;
  std::vector<uint64_t> amax_off_, amax_col_off_;  // per fp8_mine_ entry
  std::vector<float> amax_;
};

template <class InitFn>
void BucketedPart::init_masters(const InitFn& init, std::vector<float>& scratch) {
  for (const auto& [param, ids] : st_.by_param) {
    scratch.resize(spec_.params[param].numel());
    init(param, scratch.data());
    for (uint32_t id : ids) {
      const StateFragment& f = st_.fragments[id];
      std::copy(scratch.begin() + static_cast<int64_t>(f.param_range.begin),
                scratch.begin() + static_cast<int64_t>(f.param_range.end), st_.master.begin() + static_cast<int64_t>(f.offset));
    }
  }
}

}  // namespace fpg::pipeline
