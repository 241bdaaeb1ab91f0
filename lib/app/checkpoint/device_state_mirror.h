// A GPU rank as a checkpoint sees it (app/checkpoint/rank_state_access.h): a host mirror of a
// DeviceRankPipeline's state and stored param bytes, so that app/checkpoint/state_save.h, state_load.h and
// state_documents.h write and read exactly the keys and bytes of a CPU run of the same state.
//   save: the first read after a step downloads the rank (download_state(), every param's stored
//         bytes) into the mirror; steps between saves cost nothing (invalidate() only marks it stale)
//   load: the loader overwrites the mirror's state and param bytes, then params_loaded() uploads
//         them and decodes the params on the device (DeviceRankPipeline::upload)
// The staging is host memory the mirror owns (one copy of the rank's params and its arenas, as the
// CPU pipeline holds them), filled by stream-ordered copies (pipeline/device/device_buffer.h).
#pragma once

#if defined(FPGATHER_HAVE_CUDA)

#include <cstdint>
#include <vector>

#include "pipeline/device/device_rank_pipeline.h"
#include "app/checkpoint/rank_state_access.h"

namespace fpg::app::checkpoint {

class DeviceStateMirror final : public checkpoint::RankStateAccess {
 public:
  explicit DeviceStateMirror(device::DeviceRankPipeline& pipe);

  // The device state changed (a step): the next read downloads it again.
  void invalidate() { fresh_ = false; }

  const model::ModelSpec& spec() const override { return pipe_.spec(); }
  const pipeline::PipelineConfig& config() const override { return pipe_.config(); }
  bool is_fp8(uint32_t param) const override { return pipe_.is_fp8(param); }
  const layout::BucketedLayout& bucketed_layout() const override { return pipe_.bucketed_layout(); }
  const layout::LayerWiseLayout* layer_wise_layout() const override { return pipe_.layer_wise_layout(); }
  const pipeline::RankState& state() const override;
  pipeline::ParamStorage param_storage(uint32_t param) const override;
  pipeline::RankState& state() override;
  pipeline::ParamStorage param_storage(uint32_t param) override;
  void params_loaded() override;

 private:
  void refresh() const;  // download when stale
  pipeline::ParamStorage host_storage(uint32_t param) const;

  device::DeviceRankPipeline& pipe_;
  // The mirror is a cache of the device: const reads fill it.
  mutable bool fresh_ = false;
  mutable pipeline::RankState state_;
  mutable std::vector<std::vector<uint8_t>> data_, col_;  // per param: rowwise / MXFP8 columnwise bytes
};

}  // namespace fpg::app::checkpoint

#endif  // FPGATHER_HAVE_CUDA
