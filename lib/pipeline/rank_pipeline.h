// One DP rank of a distributed-optimizer step pipeline on the host (lib/ARCHITECTURE.md): the bucketed one (ZeRO-1 over every param) or the layer-wise one (whole matrices per
// owner, chained with a bucketed part for the rest). It is the host backend of the step
// orchestrator (step_orchestrator.h: the phases of a step and the scaling convention) and the
// bit-exact reference of the device backend. Every rank of a group builds one from the same spec
// and config on its own thread and calls step() in lockstep.
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
#include "pipeline/step_orchestrator.h"

namespace fpg::pipeline {

class BucketedPart;
class LayerWisePart;
struct Fp8Tensor;

class RankPipeline : private StepBackend {
 public:
  // threads: this rank's ThreadPool for the batched FP8 passes (1: the rank's own thread only; the
  // results do not depend on it).
  RankPipeline(const model::ModelSpec& spec, const PipelineConfig& cfg, comm::Communicator& comm,
               const InitFn& init, size_t threads = 1);
  ~RankPipeline() override;
  RankPipeline(const RankPipeline&) = delete;
  RankPipeline& operator=(const RankPipeline&) = delete;

  // micro_batches: M of the scaling convention (dp · accumulation). micro_batches = 1 on any number
  // of ranks applies the rank-order SUM of the grads unscaled (x / 1.0f == x for every float, NaN
  // and -0.0 included): `fpgather step` feeds its gradient on rank 0 and -0.0 elsewhere
  // (g + -0.0 == g, bitwise, +0.0 included) so the replayed gradient reaches the optimizer as given.
  StepReport step(const GradFn& grad_fn, uint64_t micro_batches);

  const model::ModelSpec& spec() const { return spec_; }
  const PipelineConfig& config() const override { return cfg_; }
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
  // StepBackend: the phases over the bucketed part, then the layer-wise one.
  comm::Communicator& communicator() override { return comm_; }
  void forward_backward(const GradFn& grad_fn) override;
  void reduce_grads() override;
  void scale_grads(float divisor, GradNorm& norm) override;
  float all_reduce_max(float local) override;
  void add_squares(GradNorm& norm) override;
  void clip(float coef) override;
  void step_optimizer() override;
  int64_t optimizer_steps() const override { return state_.bucketed.step; }
  void copy_back() override;
  void gather() override;
  void requantize() override;
  bool decode() override;

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
