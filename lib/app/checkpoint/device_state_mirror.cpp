#include "app/checkpoint/device_state_mirror.h"

#if defined(FPGATHER_HAVE_CUDA)

#include <string>

#include "core/error.h"

namespace fpg::app::checkpoint {

DeviceStateMirror::DeviceStateMirror(device::DeviceRankPipeline& pipe) : pipe_(pipe) {
  const size_t n = pipe.spec().params.size();
  data_.resize(n);
  col_.resize(n);
  for (uint32_t p = 0; p < n; ++p) {
    const device::DeviceRankPipeline::StoredForm f = pipe.stored_form(p);
    const size_t bytes = f.numel * static_cast<size_t>(dtype_bits(f.dtype) / 8);
    if (f.data) data_[p].resize(bytes);
    if (f.col) col_[p].resize(bytes);
  }
}

pipeline::ParamStorage DeviceStateMirror::host_storage(uint32_t param) const {
  if (param >= data_.size()) throw InternalError("pipeline: no param #" + std::to_string(param));
  const device::DeviceRankPipeline::StoredForm f = pipe_.stored_form(param);
  pipeline::ParamStorage s;
  s.dtype = f.dtype;
  s.numel = f.numel;
  s.data = data_[param].empty() ? nullptr : data_[param].data();
  s.col = col_[param].empty() ? nullptr : col_[param].data();
  return s;
}

void DeviceStateMirror::refresh() const {
  if (fresh_) return;
  state_ = pipe_.download_state();
  for (uint32_t p = 0; p < data_.size(); ++p) pipe_.download_param(p, host_storage(p));
  fresh_ = true;
}

const pipeline::RankState& DeviceStateMirror::state() const {
  refresh();
  return state_;
}

pipeline::ParamStorage DeviceStateMirror::param_storage(uint32_t param) const {
  refresh();
  return host_storage(param);
}

pipeline::RankState& DeviceStateMirror::state() {
  refresh();
  return state_;
}

pipeline::ParamStorage DeviceStateMirror::param_storage(uint32_t param) {
  refresh();
  return host_storage(param);
}

void DeviceStateMirror::params_loaded() {
  std::vector<pipeline::ParamStorage> host;
  for (uint32_t p = 0; p < data_.size(); ++p) host.push_back(host_storage(p));
  pipe_.upload(state_, host);
  fresh_ = true;  // the device now holds what the mirror holds
}

}  // namespace fpg::app::checkpoint

#endif  // FPGATHER_HAVE_CUDA
