#include "pipeline/device/device_fp8_params.h"

#if defined(FPGATHER_HAVE_CUDA)

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_batch.h"

namespace fpg::device {
namespace {

// Packs one field of every tensor: offsets per tensor, total cells.
template <class Get>
uint64_t pack(const std::vector<pipeline::Fp8ParamState>& s, std::vector<uint64_t>& off, Get get) {
  uint64_t n = 0;
  for (const pipeline::Fp8ParamState& x : s) {
    off.push_back(n);
    n += get(x).size();
  }
  return n;
}

template <class T, class Get>
void upload_field(const std::vector<pipeline::Fp8ParamState>& s, const std::vector<uint64_t>& off,
                  const DeviceBuffer& dst, Get get, cudaStream_t stream) {
  std::vector<T> host(dst.bytes() / sizeof(T));
  for (size_t i = 0; i < s.size(); ++i) std::copy(get(s[i]).begin(), get(s[i]).end(), host.begin() + off[i]);
  copy_to_device(dst.get(), host.data(), dst.bytes(), stream);
}

template <class T>
const T* at(const DeviceBuffer& b, uint64_t off, bool has) {
  return has && !b.empty() ? b.as<T>() + off : nullptr;
}

}  // namespace

DeviceFp8Params::DeviceFp8Params(const pipeline::PipelineConfig& cfg, const std::vector<pipeline::Fp8Tensor>& tensors,
                                 const std::vector<pipeline::Fp8ParamState>& states, cudaStream_t stream)
    : cfg_(cfg), tensors_(tensors), delayed_(pipeline::is_delayed(cfg.fp8)) {
  if (states.size() != tensors.size()) throw InternalError("device pipeline: FP8 states do not match the tensors");
  const auto sc = [](const pipeline::Fp8ParamState& x) -> const std::vector<float>& { return x.scales.scale; };
  const auto si = [](const pipeline::Fp8ParamState& x) -> const std::vector<float>& { return x.scales.scale_inv; };
  const auto e8 = [](const pipeline::Fp8ParamState& x) -> const std::vector<uint8_t>& { return x.scales.e8m0; };
  const auto ec = [](const pipeline::Fp8ParamState& x) -> const std::vector<uint8_t>& { return x.scales.e8m0_col; };
  std::vector<uint64_t> inv_off;
  const uint64_t n_scale = pack(states, scale_off_, sc);
  if (pack(states, inv_off, si) != n_scale || inv_off != scale_off_)
    throw InternalError("device pipeline: FP8 scale and scale_inv grids differ in size");
  const uint64_t n_e8 = pack(states, e8m0_off_, e8);
  const uint64_t n_ec = pack(states, e8m0_col_off_, ec);
  scale_ = DeviceBuffer(n_scale * 4, stream);
  scale_inv_ = DeviceBuffer(n_scale * 4, stream);
  e8m0_ = DeviceBuffer(n_e8, stream);
  e8m0_col_ = DeviceBuffer(n_ec, stream);
  upload_field<float>(states, scale_off_, scale_, sc, stream);
  upload_field<float>(states, scale_off_, scale_inv_, si, stream);
  upload_field<uint8_t>(states, e8m0_off_, e8m0_, e8, stream);
  upload_field<uint8_t>(states, e8m0_col_off_, e8m0_col_, ec, stream);

  for (const pipeline::Fp8Tensor& t : tensors_) {
    amax_off_.push_back(amax_cells_);
    amax_cells_ += t.from_master.grid.size();
    amax_col_off_.push_back(amax_cells_);
    amax_cells_ += t.from_master.col_grid.size();
  }
  amax_ = DeviceBuffer(amax_cells_ * 4, stream);

  if (delayed_) {
    // One cell per tensor, packed in tensor order: the amax arena is the n-slot array the record takes.
    std::vector<const pipeline::Fp8ParamState*> at;
    for (size_t i = 0; i < states.size(); ++i) {
      if (scale_off_[i] != i || amax_off_[i] != i)
        throw InternalError("device pipeline: delayed FP8 state is not one cell per tensor");
      at.push_back(&states[i]);
    }
    slots_ = DelayedSlots(cfg.fp8, at, stream);
  }
}

DeviceFp8Params::~DeviceFp8Params() = default;

fp8::ScaleView DeviceFp8Params::view(uint32_t t) const {
  if (delayed_) return slots_.view(t);
  const bool mx = cfg_.fp8.recipe.scaling == fp8::Scaling::mxfp8;
  fp8::ScaleView v;
  v.scale = at<float>(scale_, scale_off_[t], !mx);
  v.scale_inv = at<float>(scale_inv_, scale_off_[t], !mx);
  v.e8m0 = at<uint8_t>(e8m0_, e8m0_off_[t], mx && tensors_[t].from_master.has_rowwise());
  v.e8m0_col = at<uint8_t>(e8m0_col_, e8m0_col_off_[t], mx && tensors_[t].from_master.has_columnwise());
  return v;
}

void DeviceFp8Params::build(const std::vector<Fp8Fragment>& frags) {
  std::vector<cuda::fp8::DeviceJob> jobs, fused;
  for (const Fp8Fragment& f : frags) {
    const fp8::Plan& p = tensors_[f.tensor].from_master;
    float* amax = amax_.as<float>() + amax_off_[f.tensor];
    float* amax_col = p.has_columnwise() ? amax_.as<float>() + amax_col_off_[f.tensor] : nullptr;
    // Whole blocks / tiles: amax and cast in one read, before the all-reduce (the scales, the same
    // on every rank, still come from the scale launch over the reduced arena, which the fused job
    // folded into; it writes no scales itself).
    if (!delayed_ && cuda::fp8::can_fuse(p, f.start, f.count, f.master, f.out, f.out_col)) {
      fused.push_back(cuda::fp8::make_fused_job(p, f.start, f.count, f.master, amax, amax_col, nullptr, nullptr,
                                                nullptr, nullptr, f.out, f.out_col));
      continue;
    }
    jobs.push_back(cuda::fp8::make_device_job(p, f.start, f.count, f.master, amax, amax_col, view(f.tensor), f.out,
                                              f.out_col));
  }
  batch_ = std::make_unique<cuda::fp8::DeviceBatch>(jobs);
  fused_ = std::make_unique<cuda::fp8::DeviceBatch>(fused);
  if (!delayed_) {
    std::vector<cuda::fp8::ScaleJob> sj;
    for (uint32_t t = 0; t < tensors_.size(); ++t) {
      const fp8::Plan& p = tensors_[t].from_master;
      const fp8::ScaleView v = view(t);
      sj.push_back(cuda::fp8::make_scale_job(p, amax_.as<float>() + amax_off_[t], amax_.as<float>() + amax_col_off_[t],
                                             const_cast<float*>(v.scale), const_cast<float*>(v.scale_inv),
                                             const_cast<uint8_t*>(v.e8m0), const_cast<uint8_t*>(v.e8m0_col)));
    }
    scales_ = std::make_unique<cuda::fp8::ScaleBatch>(sj);
  }
}

void DeviceFp8Params::copy_back(comm::Communicator& comm, cudaStream_t stream) {
  if (tensors_.empty()) return;
  if (!batch_) throw InternalError("device pipeline: FP8 copy-back before its tables were built");
  if (amax_cells_) FPG_CUDA_CHECK(cudaMemsetAsync(amax_.get(), 0, amax_.bytes(), stream));
  if (delayed_) {
    // Cast with the current scale (from the history up to the previous step), folding this step's
    // amax in the same pass; then the packed MAX is recorded and the scale updated.
    const size_t n = tensors_.size();
    slots_.load(0, n, stream);
    batch_->cast(stream);
    comm.all_reduce(amax_.get(), amax_cells_, DType::F32, comm::ReduceOp::max)->wait();
    slots_.record(0, n, amax_.as<float>(), stream);
    return;
  }
  batch_->partial_amax(stream);
  fused_->cast(stream);
  comm.all_reduce(amax_.get(), amax_cells_, DType::F32, comm::ReduceOp::max)->wait();
  scales_->run(stream);
  batch_->cast(stream);
}

std::vector<pipeline::Fp8ParamState> DeviceFp8Params::download(const std::vector<pipeline::Fp8ParamState>& like,
                                                               cudaStream_t stream) const {
  std::vector<pipeline::Fp8ParamState> out = like;
  const auto sc = device::download(scale_.as<float>(), scale_.bytes() / 4, stream);
  const auto si = device::download(scale_inv_.as<float>(), scale_inv_.bytes() / 4, stream);
  const auto e8 = device::download(e8m0_.as<uint8_t>(), e8m0_.bytes(), stream);
  const auto ec = device::download(e8m0_col_.as<uint8_t>(), e8m0_col_.bytes(), stream);
  for (size_t i = 0; i < out.size(); ++i) {
    fp8::Scales& s = out[i].scales;
    std::copy(sc.begin() + scale_off_[i], sc.begin() + scale_off_[i] + s.scale.size(), s.scale.begin());
    std::copy(si.begin() + scale_off_[i], si.begin() + scale_off_[i] + s.scale_inv.size(), s.scale_inv.begin());
    std::copy(e8.begin() + e8m0_off_[i], e8.begin() + e8m0_off_[i] + s.e8m0.size(), s.e8m0.begin());
    std::copy(ec.begin() + e8m0_col_off_[i], ec.begin() + e8m0_col_off_[i] + s.e8m0_col.size(), s.e8m0_col.begin());
  }
  if (delayed_) {  // the cast scales and the DelayedStates
    std::vector<pipeline::Fp8ParamState*> at;
    for (pipeline::Fp8ParamState& s : out) at.push_back(&s);
    slots_.download(at, stream);
  }
  return out;
}

void DeviceFp8Params::upload(const std::vector<pipeline::Fp8ParamState>& states, cudaStream_t stream) {
  if (states.size() != tensors_.size()) throw InternalError("device pipeline: FP8 states do not match the tensors");
  upload_field<float>(states, scale_off_, scale_, [](const pipeline::Fp8ParamState& x) -> const std::vector<float>& { return x.scales.scale; }, stream);
  upload_field<float>(states, scale_off_, scale_inv_, [](const pipeline::Fp8ParamState& x) -> const std::vector<float>& { return x.scales.scale_inv; }, stream);
  upload_field<uint8_t>(states, e8m0_off_, e8m0_, [](const pipeline::Fp8ParamState& x) -> const std::vector<uint8_t>& { return x.scales.e8m0; }, stream);
  upload_field<uint8_t>(states, e8m0_col_off_, e8m0_col_, [](const pipeline::Fp8ParamState& x) -> const std::vector<uint8_t>& { return x.scales.e8m0_col; }, stream);
  if (!delayed_) return;
  std::vector<const pipeline::Fp8ParamState*> at;
  for (const pipeline::Fp8ParamState& s : states) at.push_back(&s);
  slots_.upload(at, stream);
}

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
