// The FP8 half of the device copy-back (the GPU form of BucketedPart::copy_back's FP8 branch): every
// FP8 tensor's scale state in packed device arenas, the packed amax arena, and the descriptor tables
// of the batched kernels (kernels/fp8_batch.h), built once.
//
// One copy-back, every rank alike (the CPU order, pipeline/bucketed_part.h):
//   current scaling  zero amax -> ONE partial-amax launch over every owned fragment that cannot be
//                    fused, ONE fused launch (amax + cast in one read, kernels/fp8_job.h can_fuse) over
//                    those that can -> ONE all-reduce MAX of the packed amax arena -> ONE scale launch
//                    for every tensor -> ONE cast launch for the unfused fragments
//   delayed          scales <- the delayed state's scale (load_delayed_scales) -> ONE cast launch that
//                    folds the step's amax -> ONE all-reduce MAX -> ONE delayed_update launch (record,
//                    new scale, roll) for every tensor
// Plain C++ header.
#pragma once

#if defined(FPGATHER_HAVE_CUDA)

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "pipeline/device/delayed_slots.h"
#include "pipeline/device/device_buffer.h"
#include "fp8/shard.h"
#include "kernels/stream.h"
#include "pipeline/config.h"
#include "pipeline/fp8_params.h"
#include "pipeline/rank_state.h"

namespace fpg::cuda::fp8 {
class DeviceBatch;
class ScaleBatch;
}  // namespace fpg::cuda::fp8

namespace fpg::device {

// One owned fragment of an FP8 tensor, device pointers at the fragment's first element.
struct Fp8Fragment {
  uint32_t tensor = 0;  // index in the Fp8Tensor list
  uint64_t start = 0, count = 0;
  const float* master = nullptr;
  uint8_t* out = nullptr;      // rowwise bytes (null without rowwise data)
  uint8_t* out_col = nullptr;  // MX columnwise bytes (null without)
};

class DeviceFp8Params {
 public:
  // Uploads `states` (RankState::fp8, as make_fp8_tensors made them) on `stream`.
  DeviceFp8Params(const pipeline::PipelineConfig& cfg, const std::vector<pipeline::Fp8Tensor>& tensors,
                  const std::vector<pipeline::Fp8ParamState>& states, cudaStream_t stream);
  ~DeviceFp8Params();
  DeviceFp8Params(const DeviceFp8Params&) = delete;
  DeviceFp8Params& operator=(const DeviceFp8Params&) = delete;

  // The descriptor tables of the owned fragments (once, before the first copy_back).
  void build(const std::vector<Fp8Fragment>& frags);

  // The copy-back above; every rank calls it, owning FP8 fragments or not. Leaves the casts and the
  // scale state enqueued on `stream` (the all-reduce's wait makes the stream wait, not the host).
  void copy_back(comm::Communicator& comm, cudaStream_t stream);

  // Tensor t's current scale grids (device pointers): what its bytes were cast with.
  fp8::ScaleView view(uint32_t t) const;
  // Host copies of every tensor's state (the same structs the CPU keeps), after syncing `stream`.
  std::vector<pipeline::Fp8ParamState> download(const std::vector<pipeline::Fp8ParamState>& like,
                                                cudaStream_t stream) const;
  // Overwrites every tensor's state with `states` (download()'s form; a checkpoint load).
  void upload(const std::vector<pipeline::Fp8ParamState>& states, cudaStream_t stream);
  size_t size() const { return tensors_.size(); }

 private:
  const pipeline::PipelineConfig& cfg_;
  const std::vector<pipeline::Fp8Tensor>& tensors_;
  bool delayed_ = false;
  // Per tensor: offsets into the arenas below (cells).
  std::vector<uint64_t> scale_off_, e8m0_off_, e8m0_col_off_, amax_off_, amax_col_off_;
  DeviceBuffer scale_, scale_inv_, e8m0_, e8m0_col_;  // the grids casts read (Scales); delayed: slots_'s
  DelayedSlots slots_;                                // delayed: tensor t's state in slot t
  DeviceBuffer amax_;                                 // the packed amax arena of the all-reduce
  uint64_t amax_cells_ = 0;
  std::unique_ptr<cuda::fp8::DeviceBatch> batch_;
  std::unique_ptr<cuda::fp8::DeviceBatch> fused_;  // fragments of whole blocks / tiles (current scaling)
  std::unique_ptr<cuda::fp8::ScaleBatch> scales_;
};

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
