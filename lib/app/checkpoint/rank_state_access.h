// What a training checkpoint reads and writes of one rank, whichever pipeline holds it: the CPU
// pipeline::RankPipeline in place (PipelineAccess below), or the host mirror of a GPU rank
// (app/checkpoint/device_state_mirror.h: device -> host staging before a save, host -> device after a
// load). state_save.h, state_load.h and state_documents.h work on this interface only, so a
// checkpoint's keys and bytes do not depend on where the run trained: one saved by a GPU run loads
// into a CPU run and the other way round.
#pragma once

#include <cstdint>

#include "layout/bucketed_layout.h"
#include "layout/layer_wise_layout.h"
#include "model/model_spec.h"
#include "pipeline/config.h"
#include "pipeline/param_storage.h"
#include "pipeline/rank_pipeline.h"
#include "pipeline/rank_state.h"

namespace fpg::app::checkpoint {

class RankStateAccess {
 public:
  virtual ~RankStateAccess() = default;
  virtual const model::ModelSpec& spec() const = 0;
  virtual const pipeline::PipelineConfig& config() const = 0;
  virtual bool is_fp8(uint32_t param) const = 0;
  virtual const layout::BucketedLayout& bucketed_layout() const = 0;
  virtual const layout::LayerWiseLayout* layer_wise_layout() const = 0;
  // Host views: the state (arenas, steps, FP8 scale state) and each param's stored bytes.
  virtual const pipeline::RankState& state() const = 0;
  virtual pipeline::ParamStorage param_storage(uint32_t param) const = 0;
  // A loader overwrites state() and every param's storage, then calls params_loaded() (decode the
  // params; no collective, no re-quantization: RankPipeline::params_loaded).
  virtual pipeline::RankState& state() = 0;
  virtual pipeline::ParamStorage param_storage(uint32_t param) = 0;
  virtual void params_loaded() = 0;
};

// The CPU pipeline, in place. Built from a const pipeline it is read-only (the mutating calls are
// an InternalError).
class PipelineAccess final : public RankStateAccess {
 public:
  explicit PipelineAccess(pipeline::RankPipeline& p) : read_(&p), write_(&p) {}
  explicit PipelineAccess(const pipeline::RankPipeline& p) : read_(&p) {}

  const model::ModelSpec& spec() const override { return read_->spec(); }
  const pipeline::PipelineConfig& config() const override { return read_->config(); }
  bool is_fp8(uint32_t param) const override { return read_->is_fp8(param); }
  const layout::BucketedLayout& bucketed_layout() const override { return read_->bucketed_layout(); }
  const layout::LayerWiseLayout* layer_wise_layout() const override { return read_->layer_wise_layout(); }
  const pipeline::RankState& state() const override { return read_->state(); }
  pipeline::ParamStorage param_storage(uint32_t param) const override { return read_->param_storage(param); }
  pipeline::RankState& state() override { return writable().state(); }
  pipeline::ParamStorage param_storage(uint32_t param) override { return writable().param_storage(param); }
  void params_loaded() override { writable().params_loaded(); }

 private:
  pipeline::RankPipeline& writable();
  const pipeline::RankPipeline* read_;
  pipeline::RankPipeline* write_ = nullptr;
};

}  // namespace fpg::app::checkpoint
