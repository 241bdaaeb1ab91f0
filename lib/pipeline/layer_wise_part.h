// The matrices of the layer-wise distributed optimizer (Megatron-Core's
// LayerWiseDistributedOptimizer, optimizer/layer_wise_optimizer.py): each Muon-managed
// matrix is owned whole by one rank (layout::LayerWiseLayout), every rank holds every matrix's
// parameter as gathered.
//
// Gradient path: all matrices' grads sit in one fp32 buffer on every rank, ALL-REDUCED (SUM, rank
// order) — Megatron's decoupled compact path (c), which all-reduces Muon grads. Every rank then has
// the same summed grads; only the owner reads its matrices' grads (scales, norms, clips, updates).
//
// Gather path (after the owner's update), as Megatron's allgather_params with the compact FP8
// gather of PR #5470/#5479:
//   - bf16 matrices, and FP8 matrices "staged": the owner writes bf16(master) into its slab of a bf16
//     transport buffer; one uneven all_gather_v (in place, empty ranks send 0 bytes);
//   - fp32 matrices (keep_in_fp32): a separate fp32 all_gather_v, never through bf16;
//   - FP8 matrices "compact" (when FP8 bytes + amax grids are fewer than 2 bytes per element and
//     compact_fp8_gather is on): the owner quantizes Q(bf16(master)) in one batched pass and ships the
//     bytes plus the amax grids (all_gather_v of bytes, all_gather_v of floats); receivers derive
//     the scales from the grids (or record the delayed amax).
//   Then every rank re-quantizes every staged FP8 matrix from the gathered bf16 in ONE batched
//   copy-back (whole tensors, so the amax is local). Both transports give Q(bf16(master)), bit for
//   bit (MXFP8 with both directions always stages: its two byte copies are not smaller than bf16).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/thread_pool.h"
#include "layout/layer_wise_layout.h"
#include "model/model_spec.h"
#include "pipeline/config.h"
#include "pipeline/fp8_params.h"
#include "pipeline/grad_norm.h"
#include "pipeline/layer_wise_matrices.h"
#include "pipeline/optimizer_step.h"
#include "pipeline/param_storage.h"
#include "pipeline/rank_state.h"

namespace fpg::pipeline {

class LayerWisePart {
 public:
  LayerWisePart(const model::ModelSpec& spec, const layout::LayerWiseLayout& layout, const PipelineConfig& cfg,
                comm::Communicator& comm, OptimizerState& state, std::vector<Fp8ParamState>& fp8_states,
                const std::vector<Fp8Tensor>& fp8, const std::vector<int32_t>& fp8_index, ThreadPool& pool);

  bool holds(uint32_t param) const { return matrix_of_[param] >= 0; }
  float* grad_of(uint32_t param);
  void materialize(uint32_t param, float* out) const;
  std::vector<uint8_t> stored_bytes(uint32_t param) const;
  // Where param's values lie in this rank's buffers (RankPipeline::param_storage).
  ParamStorage storage(uint32_t param);
  // How param travels after the update (for reports and tests).
  Transport transport(uint32_t param) const;

  template <class InitFn>
  void init_masters(const InitFn& init);

  void all_reduce(std::vector<comm::WorkPtr>& works);
  // Divides the owned grads by divisor and folds their max |g| into n (one pass).
  void scale_grads(float divisor, GradNorm& n);
  void add_squares(GradNorm& n) const;
  void clip(float coef);
  void step_optimizer(const Hypers& h);
  void copy_back();                                // owner: stage / quantize its matrices
  void gather(std::vector<comm::WorkPtr>& works);  // uneven all-gathers
  void requantize();                               // every rank: after the gather has completed

 private:
  using Matrix = LayerWiseMatrix;
  const Fp8Tensor& tensor(const Matrix& m) const { return fp8_[static_cast<size_t>(m.fp8)]; }
  Fp8ParamState& fstate(const Matrix& m) const { return fp8_states_[tensor(m).state]; }

  const model::ModelSpec& spec_;
  const PipelineConfig& cfg_;
  comm::Communicator& comm_;
  OptimizerState& st_;
  std::vector<Fp8ParamState>& fp8_states_;
  const std::vector<Fp8Tensor>& fp8_;
  ThreadPool& pool_;
  std::vector<Matrix> mats_;          // registration order
  std::vector<int32_t> matrix_of_;    // spec param -> index in mats_, or -1
  std::vector<uint32_t> owned_;       // indices in mats_ this rank owns, registration order
  std::vector<float> grad_;
  std::vector<uint16_t> bf16_xfer_;
  std::vector<float> f32_xfer_;
  std::vector<uint8_t> fp8_data_, fp8_col_;
  std::vector<float> amax_xfer_, amax_;
  // Bytes per rank of each uneven all-gather.
  std::vector<size_t> bf16_bytes_, f32_bytes_, fp8_bytes_, amax_bytes_;
};

template <class InitFn>
void LayerWisePart::init_masters(const InitFn& init) {
  for (uint32_t i : owned_) {
    const Matrix& m = mats_[i];
    init(m.param, st_.master.data() + st_.fragments[static_cast<size_t>(m.frag)].offset);
  }
}

}  // namespace fpg::pipeline
