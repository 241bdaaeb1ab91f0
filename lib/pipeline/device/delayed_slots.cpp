#include "pipeline/device/delayed_slots.h"

#if defined(FPGATHER_HAVE_CUDA)

#include <cuda_runtime.h>

#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_shard.h"

namespace fpg::device {

DelayedSlots::DelayedSlots(const pipeline::Fp8Config& cfg, const std::vector<const pipeline::Fp8ParamState*>& states,
                           cudaStream_t stream)
    : cfg_(pipeline::delayed_config(cfg)), n_(states.size()), len_(cfg_.history_len ? cfg_.history_len : 1) {
  history_ = DeviceBuffer(n_ * len_ * 4, stream);
  scale_ = DeviceBuffer(n_ * 4, stream);
  scale_inv_ = DeviceBuffer(n_ * 4, stream);
  cast_scale_ = DeviceBuffer(n_ * 4, stream);
  cast_scale_inv_ = DeviceBuffer(n_ * 4, stream);
  upload(states, stream);
}

fp8::ScaleView DelayedSlots::view(size_t slot) const {
  fp8::ScaleView v;
  v.scale = cast_scale_.as<float>() + slot;
  v.scale_inv = cast_scale_inv_.as<float>() + slot;
  return v;
}

void DelayedSlots::load(size_t first, size_t count, cudaStream_t stream) {
  if (!count) return;
  FPG_CUDA_CHECK(cudaMemcpyAsync(cast_scale_.as<float>() + first, scale_.as<float>() + first, count * 4,
                                 cudaMemcpyDeviceToDevice, stream));
  FPG_CUDA_CHECK(cudaMemcpyAsync(cast_scale_inv_.as<float>() + first, scale_inv_.as<float>() + first, count * 4,
                                 cudaMemcpyDeviceToDevice, stream));
}

void DelayedSlots::record(size_t first, size_t count, const float* amax, cudaStream_t stream) {
  if (!count) return;
  cuda::fp8::delayed_update(cfg_, count, amax, history_.as<float>() + first * len_, scale_.as<float>() + first,
                            scale_inv_.as<float>() + first, stream);
}

void DelayedSlots::download(size_t slot, pipeline::Fp8ParamState& out, cudaStream_t stream) const {
  if (slot >= n_) throw InternalError("device delayed FP8: no slot " + std::to_string(slot));
  pipeline::Fp8ParamState* one = &out;
  download_run(slot, 1, &one, stream);
}

void DelayedSlots::download(const std::vector<pipeline::Fp8ParamState*>& out, cudaStream_t stream) const {
  if (out.size() != n_) throw InternalError("device delayed FP8: states do not match the slots");
  download_run(0, n_, out.data(), stream);
}

void DelayedSlots::download_run(size_t first, size_t count, pipeline::Fp8ParamState* const* out,
                                cudaStream_t stream) const {
  if (!count) return;
  const std::vector<float> hist = device::download(history_.as<float>() + first * len_, count * len_, stream);
  const std::vector<float> ds = device::download(scale_.as<float>() + first, count, stream);
  const std::vector<float> dsi = device::download(scale_inv_.as<float>() + first, count, stream);
  const std::vector<float> cs = device::download(cast_scale_.as<float>() + first, count, stream);
  const std::vector<float> csi = device::download(cast_scale_inv_.as<float>() + first, count, stream);
  for (size_t i = 0; i < count; ++i) {
    pipeline::Fp8ParamState& s = *out[i];
    s.delayed.amax_history.assign(hist.begin() + i * len_, hist.begin() + (i + 1) * len_);
    s.delayed.scale = ds[i];
    s.delayed.scale_inv = dsi[i];
    s.scales.scale.assign(1, cs[i]);
    s.scales.scale_inv.assign(1, csi[i]);
  }
}

void DelayedSlots::upload(const std::vector<const pipeline::Fp8ParamState*>& states, cudaStream_t stream) {
  if (states.size() != n_) throw InternalError("device delayed FP8: states do not match the slots");
  std::vector<float> hist, ds, dsi, cs, csi;
  for (const pipeline::Fp8ParamState* s : states) {
    if (s->delayed.amax_history.size() != len_ || s->scales.scale.size() != 1 || s->scales.scale_inv.size() != 1)
      throw InternalError("device delayed FP8: a state of another history length or scale grid");
    hist.insert(hist.end(), s->delayed.amax_history.begin(), s->delayed.amax_history.end());
    ds.push_back(s->delayed.scale);
    dsi.push_back(s->delayed.scale_inv);
    cs.push_back(s->scales.scale[0]);
    csi.push_back(s->scales.scale_inv[0]);
  }
  if (!n_) return;
  copy_to_device(history_.get(), hist.data(), history_.bytes(), stream);
  copy_to_device(scale_.get(), ds.data(), scale_.bytes(), stream);
  copy_to_device(scale_inv_.get(), dsi.data(), scale_inv_.bytes(), stream);
  copy_to_device(cast_scale_.get(), cs.data(), cast_scale_.bytes(), stream);
  copy_to_device(cast_scale_inv_.get(), csi.data(), cast_scale_inv_.bytes(), stream);
}

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
