#include "pipeline/device/device_layer_wise_part.h"

#if defined(FPGATHER_HAVE_CUDA)

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <utility>

#include "core/error.h"
#include "pipeline/device/delayed_slots.h"
#include "pipeline/device/device_buffer.h"
#include "kernels/cast_bf16.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_batch.h"
#include "kernels/fp8_shard.h"
#include "kernels/muon.h"
#include "kernels/optim_fused.h"
#include "pipeline/byte_append.h"
#include "pipeline/layer_wise_matrices.h"

namespace fpg::device {

using pipeline::Transport;

namespace {

// One layer-wise FP8 tensor's scale grids on the device (fp8::Scales).
struct DeviceScales {
  DeviceBuffer scale, scale_inv, e8m0, e8m0_col;
};

template <class T>
DeviceBuffer upload(const std::vector<T>& v, cudaStream_t stream) {
  DeviceBuffer b(v.size() * sizeof(T), stream);
  if (!v.empty()) copy_to_device(b.get(), v.data(), b.bytes(), stream);
  return b;
}

template <class T>
T* or_null(const DeviceBuffer& b) {
  return b.empty() ? nullptr : b.as<T>();
}

}  // namespace

struct DeviceLayerWisePart::Impl {
  using Matrix = pipeline::LayerWiseMatrix;  // placed by pipeline::place_layer_wise_matrices, as on the CPU

  const model::ModelSpec& spec;
  const pipeline::PipelineConfig& cfg;
  comm::Communicator& comm;
  pipeline::OptimizerState& st;
  const std::vector<pipeline::Fp8Tensor>& fp8;
  cudaStream_t stream;
  std::vector<Matrix> mats;
  std::vector<uint32_t> owned;
  DeviceBuffer grad, bf16_xfer, f32_xfer, fp8_data, fp8_col, amax_xfer, amax;
  DeviceBuffer master, exp_avg, exp_avg_sq, momentum;
  std::vector<size_t> bf16_bytes, f32_bytes, fp8_bytes, amax_bytes;
  std::vector<pipeline::Fp8ParamState> fp8_host;  // per tensor (only layer-wise ones used): shapes, delayed
  std::vector<DeviceScales> scales;                // per tensor (only layer-wise ones allocated; not delayed)
  // Delayed scaling: one slot per FP8 matrix, the compact ones first in their gathered-amax order,
  // then the staged ones in their local-amax order, so each group's step amaxes are one array.
  bool delayed = false;
  uint64_t compact_slots = 0, fp8_mats = 0;
  DelayedSlots slots;
  std::unique_ptr<cuda::GradSpanTable> grads;      // owned matrices
  std::unique_ptr<cuda::FragmentTable> optim;      // owned matrices, adam/adamw/lion
  std::vector<cuda::MuonGroup> muon;               // owned matrices, one group per shape
  cublasHandle_t blas = nullptr;
  std::unique_ptr<cuda::fp8::DeviceBatch> compact_batch, staged_batch;
  std::unique_ptr<cuda::fp8::ScaleBatch> compact_owned_scales, compact_scales, staged_scales;

  Impl(const model::ModelSpec& s, const pipeline::PipelineConfig& c, comm::Communicator& cm,
       pipeline::OptimizerState& state, const std::vector<pipeline::Fp8Tensor>& f, cudaStream_t strm)
      : spec(s), cfg(c), comm(cm), st(state), fp8(f), stream(strm) {}
  ~Impl() {
    if (blas) cublasDestroy(blas);
  }

  const pipeline::Fp8Tensor& tensor(const Matrix& m) const { return fp8[static_cast<size_t>(m.fp8)]; }
  // Delayed: an FP8 matrix's slot (its one amax cell there: grids of one cell, no columnwise).
  size_t slot(const Matrix& m) const {
    return m.transport == Transport::fp8_compact ? m.amax_xfer_off : compact_slots + m.amax_off;
  }
  // The FP8 matrices' states (indexed by the tensors' state) in slot order.
  template <class S>
  std::vector<S*> by_slot(S* states) const {
    std::vector<S*> out(fp8_mats, nullptr);
    for (const Matrix& m : mats)
      if (m.fp8 >= 0) out[slot(m)] = states + tensor(m).state;
    return out;
  }
  fp8::ScaleView view(const Matrix& m) const {
    if (delayed) return slots.view(slot(m));
    const DeviceScales& s = scales[static_cast<size_t>(m.fp8)];
    fp8::ScaleView v;
    v.scale = or_null<float>(s.scale);
    v.scale_inv = or_null<float>(s.scale_inv);
    v.e8m0 = or_null<uint8_t>(s.e8m0);
    v.e8m0_col = or_null<uint8_t>(s.e8m0_col);
    return v;
  }
  cuda::fp8::ScaleJob scale_job(const Matrix& m, const fp8::Plan& p, const float* a, const float* a_col) const {
    const DeviceScales& s = scales[static_cast<size_t>(m.fp8)];
    return cuda::fp8::make_scale_job(p, a, a_col, or_null<float>(s.scale), or_null<float>(s.scale_inv),
                                     or_null<uint8_t>(s.e8m0), or_null<uint8_t>(s.e8m0_col));
  }
  float* master_of(const Matrix& m) const { return master.as<float>() + st.fragments[static_cast<size_t>(m.frag)].offset; }
  float* grad_of(const Matrix& m) const { return grad.as<float>() + m.grad_off; }
  // Where a matrix's checkpointed bytes live (stored_form's layout): FP8 bytes, or its transport.
  struct Stored {
    uint8_t* data = nullptr;
    uint8_t* col = nullptr;
    uint64_t bytes = 0;
  };
  Stored stored(const Matrix& x) const {
    Stored b;
    if (x.fp8 >= 0) {
      b.bytes = x.numel;
      if (!fp8_data.empty()) b.data = fp8_data.as<uint8_t>() + x.data_off;
      if (!fp8_col.empty()) b.col = fp8_col.as<uint8_t>() + x.data_off;
    } else if (x.transport == Transport::f32) {
      b.bytes = x.numel * 4;
      b.data = f32_xfer.as<uint8_t>() + x.xfer_off * 4;
    } else {
      b.bytes = x.numel * 2;
      b.data = bf16_xfer.as<uint8_t>() + x.xfer_off * 2;
    }
    return b;
  }

  void build_matrices(const layout::LayerWiseLayout& layout, const std::vector<int32_t>& fp8_index);
  void build_delayed();
  void build_state(const pipeline::InitFn& init);
  void build_tables();
  // An FP8 matrix's scale state as on the device now (fp8_host's entry with its grids and, delayed,
  // its DelayedState downloaded).
  pipeline::Fp8ParamState host_fp8(const Matrix& x) const;
};

void DeviceLayerWisePart::Impl::build_matrices(const layout::LayerWiseLayout& layout,
                                               const std::vector<int32_t>& fp8_index) {
  pipeline::LayerWiseMatrices placed = pipeline::place_layer_wise_matrices(layout, cfg, fp8, fp8_index);
  mats = std::move(placed.mats);
  bf16_bytes = std::move(placed.bf16_bytes);
  f32_bytes = std::move(placed.f32_bytes);
  fp8_bytes = std::move(placed.fp8_bytes);
  amax_bytes = std::move(placed.amax_bytes);
  const uint64_t fp8_n = placed.fp8_n;
  grad = DeviceBuffer(placed.grad_n * 4, stream);
  bf16_xfer = DeviceBuffer(placed.bf16_n * 2, stream);
  f32_xfer = DeviceBuffer(placed.f32_n * 4, stream);
  amax_xfer = DeviceBuffer(placed.amax_xfer_n * 4, stream);
  amax = DeviceBuffer(placed.amax_n * 4, stream);
  if (fp8_n) {
    const fp8::Recipe& r = cfg.fp8.recipe;
    const bool mx = r.scaling == fp8::Scaling::mxfp8;
    if (!mx || r.mx_rowwise) fp8_data = DeviceBuffer(fp8_n, stream);
    if (mx && r.mx_columnwise) fp8_col = DeviceBuffer(fp8_n, stream);
  }
  scales.resize(fp8.size());
  compact_slots = placed.amax_xfer_n;
  if (delayed) return build_delayed();
  for (const Matrix& m : mats) {
    if (m.fp8 < 0) continue;
    const fp8::Scales& s = fp8_host[tensor(m).state].scales;
    DeviceScales& d = scales[static_cast<size_t>(m.fp8)];
    d.scale = upload(s.scale, stream);
    d.scale_inv = upload(s.scale_inv, stream);
    d.e8m0 = upload(s.e8m0, stream);
    d.e8m0_col = upload(s.e8m0_col, stream);
  }
}

void DeviceLayerWisePart::Impl::build_delayed() {
  // Per-tensor grids (one cell, no columnwise): the compact amaxes are packed 0..compact_slots, the
  // staged ones 0..n-compact_slots (place_layer_wise_matrices), so the slots are a permutation.
  for (const Matrix& m : mats) {
    if (m.fp8 < 0) continue;
    ++fp8_mats;
    const bool compact = m.transport == Transport::fp8_compact;
    const fp8::Plan& p = compact ? tensor(m).from_master : tensor(m).from_bf16;
    if (p.grid.size() != 1 || p.col_grid.size() != 0)
      throw InternalError("device layer-wise part: a delayed FP8 matrix with more than one amax cell");
  }
  for (const Matrix& m : mats)
    if (m.fp8 >= 0 && slot(m) >= fp8_mats) throw InternalError("device layer-wise part: a delayed FP8 slot out of range");
  const std::vector<const pipeline::Fp8ParamState*> states = by_slot<const pipeline::Fp8ParamState>(fp8_host.data());
  for (const pipeline::Fp8ParamState* s : states)
    if (!s) throw InternalError("device layer-wise part: delayed FP8 slots do not cover the matrices");
  slots = DelayedSlots(cfg.fp8, states, stream);
}

void DeviceLayerWisePart::Impl::build_state(const pipeline::InitFn& init) {
  // The owner's state: whole matrices, registration order (LayerWisePart's fragments).
  st.fragments.clear();
  st.by_param.clear();
  for (uint32_t i = 0; i < mats.size(); ++i) {
    Matrix& m = mats[i];
    if (m.owner != static_cast<uint32_t>(comm.rank())) continue;
    m.frag = static_cast<int32_t>(st.add(m.param, layout::Range{0, m.numel}, m.numel));
    owned.push_back(i);
  }
  st.allocate();  // host arenas only to learn their sizes and hold the initial masters
  for (uint32_t i : owned) init(mats[i].param, st.master.data() + st.fragments[static_cast<size_t>(mats[i].frag)].offset);
  const size_t bytes = st.master.size() * 4;
  master = upload(st.master, stream);
  if (!st.exp_avg.empty()) exp_avg = DeviceBuffer(bytes, stream);
  if (!st.exp_avg_sq.empty()) exp_avg_sq = DeviceBuffer(bytes, stream);
  if (!st.momentum.empty()) momentum = DeviceBuffer(bytes, stream);
  st.master = {};
  st.exp_avg = {};
  st.exp_avg_sq = {};
  st.momentum = {};
}

void DeviceLayerWisePart::Impl::build_tables() {
  std::vector<cuda::GradSpan> spans;
  std::vector<optim::Fragment> frags;
  std::map<std::pair<int64_t, int64_t>, std::vector<cuda::MuonMatrix>> by_shape;
  std::vector<cuda::fp8::DeviceJob> compact_jobs, staged_jobs;
  std::vector<cuda::fp8::ScaleJob> owned_sj, compact_sj, staged_sj;
  for (uint32_t i : owned) {
    const Matrix& m = mats[i];
    const uint64_t off = st.fragments[static_cast<size_t>(m.frag)].offset;
    spans.push_back(cuda::GradSpan{grad_of(m), static_cast<int64_t>(m.numel)});
    if (st.kind == optim::OptimizerKind::muon) {
      by_shape[{m.rows, m.cols}].push_back(cuda::MuonMatrix{master_of(m), grad_of(m), momentum.as<float>() + off});
    } else {
      optim::Fragment o;
      o.param = master_of(m);
      o.grad = grad_of(m);
      o.exp_avg = exp_avg.empty() ? nullptr : exp_avg.as<float>() + off;
      o.exp_avg_sq = exp_avg_sq.empty() ? nullptr : exp_avg_sq.as<float>() + off;
      o.numel = static_cast<int64_t>(m.numel);
      o.param_offset = 0;
      o.param_numel = static_cast<int64_t>(m.numel);
      frags.push_back(o);
    }
    if (m.transport == Transport::fp8_compact) {
      const fp8::Plan& p = tensor(m).from_master;
      float* a = amax_xfer.as<float>() + m.amax_xfer_off;
      compact_jobs.push_back(cuda::fp8::make_device_job(p, 0, m.numel, master_of(m), a, nullptr, view(m),
                                                        fp8_data.as<uint8_t>() + m.data_off, nullptr));
      if (!delayed) owned_sj.push_back(scale_job(m, p, a, nullptr));
    }
  }
  for (const Matrix& m : mats) {
    if (m.fp8 < 0) continue;
    if (m.transport == Transport::fp8_compact) {
      if (!delayed) compact_sj.push_back(scale_job(m, tensor(m).from_master, amax_xfer.as<float>() + m.amax_xfer_off, nullptr));
      continue;
    }
    const fp8::Plan& p = tensor(m).from_bf16;
    float* a = amax.as<float>() + m.amax_off;
    float* a_col = p.has_columnwise() ? a + p.grid.size() : nullptr;
    staged_jobs.push_back(cuda::fp8::make_device_job(
        p, 0, m.numel, bf16_xfer.as<uint16_t>() + m.xfer_off, a, a_col, view(m),
        fp8_data.empty() ? nullptr : fp8_data.as<uint8_t>() + m.data_off,
        fp8_col.empty() ? nullptr : fp8_col.as<uint8_t>() + m.data_off));
    if (!delayed) staged_sj.push_back(scale_job(m, p, a, a_col));
  }
  if (!spans.empty()) grads = std::make_unique<cuda::GradSpanTable>(spans);
  if (!frags.empty()) optim = std::make_unique<cuda::FragmentTable>(frags, !exp_avg_sq.empty());
  for (auto& [shape, list] : by_shape) muon.emplace_back(shape.first, shape.second, list);
  if (!muon.empty()) FPG_CUBLAS_CHECK(cublasCreate(&blas));
  // Delayed matrices take no scale jobs: their scales come from the slots' histories.
  if (!compact_jobs.empty()) compact_batch = std::make_unique<cuda::fp8::DeviceBatch>(compact_jobs);
  if (!owned_sj.empty()) compact_owned_scales = std::make_unique<cuda::fp8::ScaleBatch>(owned_sj);
  if (!compact_sj.empty()) compact_scales = std::make_unique<cuda::fp8::ScaleBatch>(compact_sj);
  if (!staged_jobs.empty()) staged_batch = std::make_unique<cuda::fp8::DeviceBatch>(staged_jobs);
  if (!staged_sj.empty()) staged_scales = std::make_unique<cuda::fp8::ScaleBatch>(staged_sj);
  // The tables went up on the legacy stream; the non-blocking compute stream must not race them.
  FPG_CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceLayerWisePart::DeviceLayerWisePart(const model::ModelSpec& spec, const layout::LayerWiseLayout& layout,
                                         const pipeline::PipelineConfig& cfg, comm::Communicator& comm,
                                         pipeline::OptimizerState& state, const std::vector<pipeline::Fp8Tensor>& fp8,
                                         const std::vector<int32_t>& fp8_index,
                                         const std::vector<pipeline::Fp8ParamState>& fp8_states,
                                         const pipeline::InitFn& init, cudaStream_t stream)
    : impl_(std::make_unique<Impl>(spec, cfg, comm, state, fp8, stream)) {
  if (layout.dp != static_cast<uint32_t>(comm.size())) throw InternalError("pipeline: layer-wise layout for another dp");
  Impl& m = *impl_;
  m.delayed = pipeline::is_delayed(cfg.fp8);
  m.fp8_host = fp8_states;
  m.build_matrices(layout, fp8_index);
  matrix_of_.assign(spec.params.size(), -1);
  for (size_t i = 0; i < m.mats.size(); ++i) matrix_of_[m.mats[i].param] = static_cast<int32_t>(i);
  m.build_state(init);
  m.build_tables();
}

DeviceLayerWisePart::~DeviceLayerWisePart() = default;

float* DeviceLayerWisePart::grad_of(uint32_t param) const {
  return impl_->grad_of(impl_->mats[static_cast<size_t>(matrix_of_[param])]);
}

float* DeviceLayerWisePart::in_place(uint32_t param) const {
  const Impl::Matrix& m = impl_->mats[static_cast<size_t>(matrix_of_[param])];
  return m.transport == Transport::f32 ? impl_->f32_xfer.as<float>() + m.xfer_off : nullptr;
}

void DeviceLayerWisePart::all_reduce(std::vector<comm::WorkPtr>& works) {
  Impl& m = *impl_;
  works.push_back(m.comm.all_reduce(m.grad.get(), m.grad.bytes() / 4, DType::F32, comm::ReduceOp::sum));
}

float DeviceLayerWisePart::scale_and_max_abs(float divisor, float acc) {
  return impl_->grads ? cuda::scale_and_max_abs(*impl_->grads, divisor, acc, impl_->stream) : acc;
}

cuda::uint128 DeviceLayerWisePart::scaled_squares(int exponent) {
  return impl_->grads ? cuda::scaled_squares(*impl_->grads, exponent, impl_->stream) : cuda::uint128{0};
}

void DeviceLayerWisePart::clip(float coef) {
  if (impl_->grads) cuda::scale(*impl_->grads, coef, impl_->stream);
}

void DeviceLayerWisePart::step_optimizer(const pipeline::Hypers& h) {
  Impl& m = *impl_;
  ++m.st.step;  // as pipeline::optimizer_step, owning matrices or not
  switch (m.st.kind) {
    case optim::OptimizerKind::muon:
      for (cuda::MuonGroup& g : m.muon) g.step(h.muon, m.blas, m.stream);
      break;
    case optim::OptimizerKind::lion:
      if (m.optim) cuda::lion_step(h.lion, *m.optim, m.stream);
      break;
    default:
      if (m.optim) cuda::adam_step(h.adam, m.st.step, *m.optim, m.stream);
      break;
  }
}

void DeviceLayerWisePart::copy_back() {
  Impl& m = *impl_;
  for (uint32_t i : m.owned) {
    const Impl::Matrix& x = m.mats[i];
    switch (x.transport) {
      case Transport::bf16:
        cuda::cast_f32_to_bf16(m.master_of(x), x.numel, m.bf16_xfer.as<uint16_t>() + x.xfer_off, m.stream);
        break;
      case Transport::f32:
        FPG_CUDA_CHECK(cudaMemcpyAsync(m.f32_xfer.as<float>() + x.xfer_off, m.master_of(x), x.numel * 4,
                                       cudaMemcpyDeviceToDevice, m.stream));
        break;
      case Transport::fp8_compact: break;  // the batched pass below
    }
  }
  // Delayed: every rank takes the scales the owners cast with (load_delayed_scales); the owners
  // record nothing yet, every rank records the gathered amaxes in requantize().
  if (m.delayed) m.slots.load(0, m.compact_slots, m.stream);
  if (!m.compact_batch) return;
  // Zeroing every rank's grids is harmless: the gather overwrites the other ranks' slabs.
  FPG_CUDA_CHECK(cudaMemsetAsync(m.amax_xfer.get(), 0, m.amax_xfer.bytes(), m.stream));
  if (m.delayed) {
    m.compact_batch->cast(m.stream);  // with the delayed scale, folding the step's amax in the same pass
    return;
  }
  m.compact_batch->partial_amax(m.stream);
  m.compact_owned_scales->run(m.stream);
  m.compact_batch->cast(m.stream);
}

void DeviceLayerWisePart::gather(std::vector<comm::WorkPtr>& works) {
  Impl& m = *impl_;
  // Every rank joins every gather (empty ranks contribute 0 bytes), as the CPU part does.
  if (!m.bf16_xfer.empty()) works.push_back(m.comm.all_gather_v(m.bf16_xfer.get(), m.bf16_bytes));
  if (!m.f32_xfer.empty()) works.push_back(m.comm.all_gather_v(m.f32_xfer.get(), m.f32_bytes));
  if (!m.amax_xfer.empty()) {
    works.push_back(m.comm.all_gather_v(m.fp8_data.get(), m.fp8_bytes));
    works.push_back(m.comm.all_gather_v(m.amax_xfer.get(), m.amax_bytes));
  }
}

void DeviceLayerWisePart::requantize() {
  Impl& m = *impl_;
  if (m.delayed) {  // LayerWisePart::requantize's delayed branch
    m.slots.record(0, m.compact_slots, m.amax_xfer.as<float>(), m.stream);  // the owners' gathered amaxes
    if (!m.staged_batch) return;
    const size_t staged = m.slots.size() - m.compact_slots;
    m.slots.load(m.compact_slots, staged, m.stream);
    FPG_CUDA_CHECK(cudaMemsetAsync(m.amax.get(), 0, m.amax.bytes(), m.stream));
    m.staged_batch->cast(m.stream);  // from the gathered bf16 with the delayed scale, folding the amax
    m.slots.record(m.compact_slots, staged, m.amax.as<float>(), m.stream);
    return;
  }
  if (m.compact_scales) m.compact_scales->run(m.stream);  // the owners' scales, from their grids
  if (!m.staged_batch) return;
  FPG_CUDA_CHECK(cudaMemsetAsync(m.amax.get(), 0, m.amax.bytes(), m.stream));
  m.staged_batch->partial_amax(m.stream);
  m.staged_scales->run(m.stream);
  m.staged_batch->cast(m.stream);
}

void DeviceLayerWisePart::decode(uint32_t param, float* out) {
  Impl& m = *impl_;
  const Impl::Matrix& x = m.mats[static_cast<size_t>(matrix_of_[param])];
  if (x.fp8 >= 0) {
    const fp8::Plan& p = m.tensor(x).from_master;
    const bool row = p.has_rowwise();
    cuda::fp8::dequantize_fragment(p, m.view(x), 0, x.numel,
                                   (row ? m.fp8_data.as<uint8_t>() : m.fp8_col.as<uint8_t>()) + x.data_off, out,
                                   !row, m.stream);
  } else if (x.transport == Transport::bf16) {
    cuda::cast_bf16_to_f32(m.bf16_xfer.as<uint16_t>() + x.xfer_off, x.numel, out, m.stream);
  }  // f32: read in place
}

std::vector<uint8_t> DeviceLayerWisePart::stored_bytes(uint32_t param) const {
  const Impl& m = *impl_;
  const Impl::Matrix& x = m.mats[static_cast<size_t>(matrix_of_[param])];
  std::vector<uint8_t> out;
  if (x.fp8 >= 0) {
    if (!m.fp8_data.empty()) pipeline::append_vec(out, device::download(m.fp8_data.as<uint8_t>() + x.data_off, x.numel, m.stream));
    if (!m.fp8_col.empty()) pipeline::append_vec(out, device::download(m.fp8_col.as<uint8_t>() + x.data_off, x.numel, m.stream));
    const pipeline::Fp8ParamState st = m.host_fp8(x);
    pipeline::append_fp8_state(out, st);
  } else if (x.transport == Transport::f32) {
    out = device::download(m.f32_xfer.as<uint8_t>() + x.xfer_off * 4, x.numel * 4, m.stream);
  } else {
    out = device::download(m.bf16_xfer.as<uint8_t>() + x.xfer_off * 2, x.numel * 2, m.stream);
  }
  return out;
}

void DeviceLayerWisePart::download(pipeline::RankState& out) const {
  const Impl& m = *impl_;
  pipeline::OptimizerState& st = out.layer_wise;
  st = m.st;
  const size_t n = m.master.bytes() / 4;
  st.master = device::download(m.master.as<float>(), n, m.stream);
  if (!m.exp_avg.empty()) st.exp_avg = device::download(m.exp_avg.as<float>(), n, m.stream);
  if (!m.exp_avg_sq.empty()) st.exp_avg_sq = device::download(m.exp_avg_sq.as<float>(), n, m.stream);
  if (!m.momentum.empty()) st.momentum = device::download(m.momentum.as<float>(), n, m.stream);
  for (const Impl::Matrix& x : m.mats)
    if (x.fp8 >= 0) out.fp8[m.tensor(x).state] = m.host_fp8(x);
}

pipeline::Fp8ParamState DeviceLayerWisePart::Impl::host_fp8(const Matrix& x) const {
  pipeline::Fp8ParamState out = fp8_host[tensor(x).state];
  if (delayed) {
    slots.download(slot(x), out, stream);
    return out;
  }
  const DeviceScales& d = scales[static_cast<size_t>(x.fp8)];
  fp8::Scales& s = out.scales;
  s.scale = device::download(or_null<float>(d.scale), s.scale.size(), stream);
  s.scale_inv = device::download(or_null<float>(d.scale_inv), s.scale_inv.size(), stream);
  s.e8m0 = device::download(or_null<uint8_t>(d.e8m0), s.e8m0.size(), stream);
  s.e8m0_col = device::download(or_null<uint8_t>(d.e8m0_col), s.e8m0_col.size(), stream);
  return out;
}

void DeviceLayerWisePart::stored_form(uint32_t param, DType& dtype, bool& data, bool& col) const {
  const Impl& m = *impl_;
  const Impl::Matrix& x = m.mats[static_cast<size_t>(matrix_of_[param])];
  data = true;
  col = false;
  if (x.fp8 >= 0) {  // staged FP8 matrices pass through bf16_xfer within a step only: the bytes are in fp8_data
    dtype = pipeline::fp8_dtype(m.cfg.fp8.recipe.format);
    data = !m.fp8_data.empty();
    col = !m.fp8_col.empty();
  } else {
    dtype = x.transport == Transport::f32 ? DType::F32 : DType::BF16;
  }
}

void DeviceLayerWisePart::download_param(uint32_t param, uint8_t* data, uint8_t* col) const {
  const Impl& m = *impl_;
  const Impl::Stored b = m.stored(m.mats[static_cast<size_t>(matrix_of_[param])]);
  if (b.data) copy_to_host(data, b.data, b.bytes, m.stream);
  if (b.col) copy_to_host(col, b.col, b.bytes, m.stream);
}

void DeviceLayerWisePart::upload_param(uint32_t param, const uint8_t* data, const uint8_t* col) {
  const Impl& m = *impl_;
  const Impl::Stored b = m.stored(m.mats[static_cast<size_t>(matrix_of_[param])]);
  if (b.data) copy_to_device(b.data, data, b.bytes, m.stream);
  if (b.col) copy_to_device(b.col, col, b.bytes, m.stream);
}

void DeviceLayerWisePart::upload_state(const pipeline::RankState& state) {
  Impl& m = *impl_;
  const pipeline::OptimizerState& in = state.layer_wise;
  const size_t n = m.master.bytes() / 4;
  if (in.fragments.size() != m.st.fragments.size() || in.master.size() != n)
    throw InternalError("device layer-wise part: the state to upload is not this rank's");
  const auto put = [&](const DeviceBuffer& dst, const std::vector<float>& src) {
    if (!dst.empty()) copy_to_device(dst.get(), src.data(), n * 4, m.stream);
  };
  put(m.master, in.master);
  put(m.exp_avg, in.exp_avg);
  put(m.exp_avg_sq, in.exp_avg_sq);
  put(m.momentum, in.momentum);
  m.st.step = in.step;
  if (m.delayed) {
    if (state.fp8.size() != m.fp8_host.size()) throw InternalError("device layer-wise part: FP8 states do not match");
    m.slots.upload(m.by_slot(state.fp8.data()), m.stream);
    return;
  }
  for (const Impl::Matrix& x : m.mats) {
    if (x.fp8 < 0) continue;
    const fp8::Scales& s = state.fp8[m.tensor(x).state].scales;
    const DeviceScales& d = m.scales[static_cast<size_t>(x.fp8)];
    if (!d.scale.empty()) copy_to_device(d.scale.get(), s.scale.data(), s.scale.size() * 4, m.stream);
    if (!d.scale_inv.empty()) copy_to_device(d.scale_inv.get(), s.scale_inv.data(), s.scale_inv.size() * 4, m.stream);
    if (!d.e8m0.empty()) copy_to_device(d.e8m0.get(), s.e8m0.data(), s.e8m0.size(), m.stream);
    if (!d.e8m0_col.empty()) copy_to_device(d.e8m0_col.get(), s.e8m0_col.data(), s.e8m0_col.size(), m.stream);
  }
}

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
