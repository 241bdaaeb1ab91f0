// Delayed FP8 scaling (fp8/delayed.h) of n tensors on the device, one "slot" each, in packed arenas:
// per slot its DelayedState (amax history [L], scale, scale_inv) and the one-cell Scales its casts
// read (what its bytes were cast with). The GPU form of pipeline/fp8_params.h's load_delayed_scales
// and record_delayed, over a run of consecutive slots at once: one device copy, resp. one
// delayed_update launch (kernels/fp8_delayed.cu, the FPG_HD rule the CPU uses). Host copies are the
// CPU's own Fp8ParamState fields (checkpoints, tests).
//
// Used by the bucketed FP8 copy-back (device_fp8_params.h: slot t = tensor t, one run) and the
// layer-wise part (device_layer_wise_part.h), whose compact and staged FP8 matrices are two runs of
// slots, each run's step amaxes one contiguous array (their packed amax buffers).
// Plain C++ header.
#pragma once

#if defined(FPGATHER_HAVE_CUDA)

#include <cstddef>
#include <vector>

#include "pipeline/device/device_buffer.h"
#include "fp8/delayed.h"
#include "fp8/shard.h"
#include "kernels/stream.h"
#include "pipeline/config.h"
#include "pipeline/fp8_params.h"

namespace fpg::device {

class DelayedSlots {
 public:
  DelayedSlots() = default;
  // Slot i starts as *states[i] (its Scales one cell, its history of the configured length: else an
  // InternalError), uploaded on `stream`.
  DelayedSlots(const pipeline::Fp8Config& cfg, const std::vector<const pipeline::Fp8ParamState*>& states,
               cudaStream_t stream);

  size_t size() const { return n_; }
  // The scales slot's bytes are cast with (device pointers, one cell).
  fp8::ScaleView view(size_t slot) const;
  // load_delayed_scales of slots [first, first + count): the cast scales <- the delayed scales.
  void load(size_t first, size_t count, cudaStream_t stream);
  // record_delayed of slots [first, first + count), amax[i] (device) being slot first + i's step amax.
  void record(size_t first, size_t count, const float* amax, cudaStream_t stream);

  // Host copies: slot's Scales and DelayedState into `out` (its other fields untouched), after
  // `stream`'s pending work; every slot's into *out[slot]; and every slot's from *states[slot] (a
  // checkpoint load).
  void download(size_t slot, pipeline::Fp8ParamState& out, cudaStream_t stream) const;
  void download(const std::vector<pipeline::Fp8ParamState*>& out, cudaStream_t stream) const;
  void upload(const std::vector<const pipeline::Fp8ParamState*>& states, cudaStream_t stream);

 private:
  // Host copies of slots [first, first + count) into *out[0 .. count).
  void download_run(size_t first, size_t count, pipeline::Fp8ParamState* const* out, cudaStream_t stream) const;

  fp8::DelayedConfig cfg_;
  size_t n_ = 0, len_ = 0;
  DeviceBuffer history_, scale_, scale_inv_;    // DelayedState per slot
  DeviceBuffer cast_scale_, cast_scale_inv_;    // Scales per slot
};

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
