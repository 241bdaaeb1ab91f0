#include "pipeline/device/device_network_bf16.h"

#if defined(FPGATHER_HAVE_CUDA)

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/cast_bf16.h"
#include "kernels/cuda_check.h"
#include "kernels/lt_matmul.h"
#include "kernels/network_bf16_kernels.h"
#include "kernels/network_kernels.h"
#include "pipeline/device/device_buffer.h"

namespace fpg::device {
namespace {

// Param indices in network_params order (as network_compute.cpp).
size_t fc1_index(uint64_t l) { return 2 + 3 * l; }
size_t fc2_index(uint64_t l) { return 3 + 3 * l; }
size_t norm_index(uint64_t l) { return 1 + 3 * l; }  // l == layers: the final norm

// Per-layer slices start at multiples of 128 elements (256 bytes of bf16), the alignment cuBLASLt's
// fastest kernels want, whatever the batch and widths.
uint64_t padded(uint64_t n) { return (n + 127) / 128 * 128; }

}  // namespace

struct DeviceNetworkBf16::Impl {
  model::NetworkDims dims;
  std::vector<uint64_t> numel;
  cudaStream_t stream = nullptr;
  std::unique_ptr<cuda::LtMatmul> mm;
  int64_t capacity = 0;
  uint64_t sh = 0, sf = 0, s2f = 0;  // per-layer strides (elements) of [B, H], [B, F], [B, 2F]
  // Forward: x16 [B, I]; h (L+1)×[B, H] fp32; inv_rms (L+1)×[B]; scaled (L+1)×[B, H] bf16;
  // fc1 L×[B, 2F] bf16; act L×[B, F] bf16; y [B, O] fp32.
  DeviceBuffer x16, h, inv_rms, scaled, fc1, act, y;
  // Backward: dy fp32 and bf16, dh fp32 and bf16, da fp32, dact fp32, dfc1 bf16.
  DeviceBuffer dy, dy16, dh, dh16, da, dact, dfc1, loss_slot, partials;

  void grow(DeviceBuffer& b, size_t bytes) {
    if (b.bytes() < bytes) b = DeviceBuffer(bytes, stream);
  }

  void reserve(int64_t batch) {
    if (batch <= capacity) return;
    const uint64_t B = uint64_t(batch), H = dims.hidden, F = dims.ffn, L = dims.layers;
    sh = padded(B * H), sf = padded(B * F), s2f = padded(B * 2 * F);
    grow(x16, 2 * B * dims.input);
    grow(h, 4 * (L + 1) * sh);
    grow(inv_rms, 4 * padded((L + 1) * B));
    grow(scaled, 2 * (L + 1) * sh);
    grow(fc1, 2 * std::max<uint64_t>(L, 1) * s2f);
    grow(act, 2 * std::max<uint64_t>(L, 1) * sf);
    grow(y, 4 * B * dims.output);
    grow(dy, 4 * B * dims.output);
    grow(dy16, 2 * B * dims.output);
    grow(dh, 4 * B * H);
    grow(dh16, 2 * B * H);
    grow(da, 4 * B * H);
    grow(dact, 4 * B * F);
    grow(dfc1, 2 * B * 2 * F);
    capacity = batch;
  }

  float* h_at(uint64_t l) const { return h.as<float>() + l * sh; }
  float* r_at(uint64_t l) const { return inv_rms.as<float>() + l * uint64_t(capacity); }
  uint16_t* scaled_at(uint64_t l) const { return scaled.as<uint16_t>() + l * sh; }
  uint16_t* fc1_at(uint64_t l) const { return fc1.as<uint16_t>() + l * s2f; }
  uint16_t* act_at(uint64_t l) const { return act.as<uint16_t>() + l * sf; }

  // x·Wᵀ: a [m, k] bf16, w [n, k] bf16 -> d [m, n]; beta·c added (c: d's shape).
  void gemm_nt(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* w, float beta, const void* c,
               void* d, cuda::LtOut out) {
    mm->gemm(false, true, m, n, k, a, k, w, k, beta, c, d, n, out);
  }
  // dyᵀ·x: a [k, m], b [k, n] -> fp32 d [m, n] (a weight gradient), accumulated when asked.
  void gemm_tn(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* b, float* d, bool accumulate) {
    mm->gemm(true, false, m, n, k, a, m, b, n, accumulate ? 1.0f : 0.0f, d, d, n, cuda::LtOut::f32);
  }
  // dy·W: a [m, k], w [k, n] -> fp32 d [m, n].
  void gemm_nn(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* w, float* d) {
    mm->gemm(false, false, m, n, k, a, k, w, n, 0.0f, nullptr, d, n, cuda::LtOut::f32);
  }

  void check(const std::vector<const uint16_t*>& params, int64_t batch) const {
    if (params.size() != numel.size())
      throw UsageError("the network takes " + std::to_string(numel.size()) + " parameter arrays, got " +
                       std::to_string(params.size()));
    if (batch <= 0) throw UsageError("micro-batch size must be positive");
  }

  static const uint16_t* read(const std::vector<const uint16_t*>& params, size_t i, const ParamHooks* hooks) {
    if (hooks) {
      if (hooks->before_read) hooks->before_read(uint32_t(i));
      if (hooks->on_read) hooks->on_read(uint32_t(i));
    }
    return params[i];
  }
  static void grad_ready(size_t i, const ParamHooks* hooks) {
    if (hooks && hooks->on_grad_ready) hooks->on_grad_ready(uint32_t(i));
  }

  void run_forward(const std::vector<const uint16_t*>& params, const float* x, int64_t batch,
                   const ParamHooks* hooks = nullptr) {
    reserve(batch);
    auto P = [&](size_t i) { return read(params, i, hooks); };
    const int64_t B = batch, H = int64_t(dims.hidden), F = int64_t(dims.ffn), I = int64_t(dims.input);
    const uint64_t L = dims.layers;
    cuda::cast_f32_to_bf16(x, uint64_t(B * I), x16.as<uint16_t>(), stream);
    gemm_nt(B, H, I, x16.as<uint16_t>(), P(0), 0.0f, nullptr, h_at(0), cuda::LtOut::f32);
    for (uint64_t l = 0; l < L; ++l) {
      cuda::rmsnorm_forward_bf16(h_at(l), P(norm_index(l)), B, H, model::kRmsNormEps, r_at(l), scaled_at(l), stream);
      gemm_nt(B, 2 * F, H, scaled_at(l), P(fc1_index(l)), 0.0f, nullptr, fc1_at(l), cuda::LtOut::bf16);
      cuda::swiglu_forward_bf16(fc1_at(l), B, F, act_at(l), stream);
      // The residual in the epilogue: h_{l+1} = h_l + act·W_fc2ᵀ.
      gemm_nt(B, H, F, act_at(l), P(fc2_index(l)), 1.0f, h_at(l), h_at(l + 1), cuda::LtOut::f32);
    }
    cuda::rmsnorm_forward_bf16(h_at(L), P(norm_index(L)), B, H, model::kRmsNormEps, r_at(L), scaled_at(L), stream);
    gemm_nt(B, int64_t(dims.output), H, scaled_at(L), P(2 + 3 * L), 0.0f, nullptr, y.as<float>(), cuda::LtOut::f32);
  }
};

DeviceNetworkBf16::DeviceNetworkBf16(const model::NetworkDims& dims, cudaStream_t stream)
    : impl_(std::make_unique<Impl>()) {
  if (dims.input == 0 || dims.hidden == 0 || dims.ffn == 0 || dims.output == 0)
    throw UsageError("network dims must be positive (input, hidden, ffn, output)");
  Impl& m = *impl_;
  m.dims = dims;
  for (const model::Param& p : model::network_params(dims)) m.numel.push_back(p.numel());
  m.stream = stream;
  m.mm = std::make_unique<cuda::LtMatmul>(stream);
  m.grow(m.loss_slot, sizeof(float));
  m.grow(m.partials, sizeof(double) * cuda::kMseBlocks);
}

DeviceNetworkBf16::~DeviceNetworkBf16() = default;

const model::NetworkDims& DeviceNetworkBf16::dims() const { return impl_->dims; }
size_t DeviceNetworkBf16::param_count() const { return impl_->numel.size(); }
cudaStream_t DeviceNetworkBf16::stream() const { return impl_->stream; }
uint64_t DeviceNetworkBf16::lt_plans() const { return impl_->mm->stats().plans; }
uint64_t DeviceNetworkBf16::lt_fallbacks() const { return impl_->mm->stats().fallbacks; }

void DeviceNetworkBf16::set_stream(cudaStream_t stream) {
  impl_->stream = stream;
  impl_->mm->set_stream(stream);
}

void DeviceNetworkBf16::forward(const std::vector<const uint16_t*>& params, const float* x, int64_t batch, float* y) {
  Impl& m = *impl_;
  m.check(params, batch);
  m.run_forward(params, x, batch);
  FPG_CUDA_CHECK(cudaMemcpyAsync(y, m.y.as<float>(), sizeof(float) * size_t(batch) * m.dims.output,
                                 cudaMemcpyDeviceToDevice, m.stream));
}

void DeviceNetworkBf16::loss(const std::vector<const uint16_t*>& params, const float* x, const float* target,
                             int64_t batch, float* loss_out) {
  Impl& m = *impl_;
  m.check(params, batch);
  m.run_forward(params, x, batch);
  cuda::mse_loss(m.y.as<float>(), target, batch * int64_t(m.dims.output), m.partials.as<double>(), loss_out, nullptr,
                 m.stream);
}

void DeviceNetworkBf16::forward_backward(const std::vector<const uint16_t*>& params, const float* x,
                                         const float* target, int64_t batch, const std::vector<float*>& grads,
                                         model::GradMode mode, float* loss_out, const ParamHooks* hooks) {
  Impl& m = *impl_;
  m.check(params, batch);
  if (grads.size() != params.size())
    throw UsageError("the network takes " + std::to_string(params.size()) + " gradient arrays, got " +
                     std::to_string(grads.size()));
  m.run_forward(params, x, batch, hooks);
  auto P = [&](size_t i) { return Impl::read(params, i, hooks); };
  const bool acc = mode == model::GradMode::accumulate;
  const int64_t B = batch, H = int64_t(m.dims.hidden), F = int64_t(m.dims.ffn), O = int64_t(m.dims.output);
  const uint64_t L = m.dims.layers;
  cuda::mse_loss(m.y.as<float>(), target, B * O, m.partials.as<double>(), loss_out ? loss_out : m.loss_slot.as<float>(),
                 m.dy.as<float>(), m.stream);
  cuda::cast_f32_to_bf16(m.dy.as<float>(), uint64_t(B * O), m.dy16.as<uint16_t>(), m.stream);
  auto norm_grad = [&](uint64_t l) {  // l == L: the final norm; da holds d(scaled_l)
    const size_t i = norm_index(l);
    cuda::rmsnorm_weight_grad_bf16(m.da.as<float>(), m.h_at(l), m.r_at(l), B, H, acc, grads[i], m.stream);
    Impl::grad_ready(i, hooks);
    cuda::rmsnorm_backward_bf16(m.da.as<float>(), P(i), m.h_at(l), m.r_at(l), B, H, m.dh.as<float>(),
                                m.dh16.as<uint16_t>(), m.stream);
  };

  // Head: dW_out = bf16(dy)ᵀ·scaled_L, d(scaled_L) = bf16(dy)·W_out; then the final norm starts dh.
  const size_t out_i = 2 + 3 * L;
  m.gemm_tn(O, H, B, m.dy16.as<uint16_t>(), m.scaled_at(L), grads[out_i], acc);
  Impl::grad_ready(out_i, hooks);
  m.gemm_nn(B, H, O, m.dy16.as<uint16_t>(), P(out_i), m.da.as<float>());
  FPG_CUDA_CHECK(cudaMemsetAsync(m.dh.as<float>(), 0, sizeof(float) * size_t(B * H), m.stream));
  norm_grad(L);

  for (uint64_t l = L; l-- > 0;) {
    // dh (and its bf16 copy) is ∂/∂h_{l+1}; the residual passes it to h_l and the block adds its share.
    m.gemm_tn(H, F, B, m.dh16.as<uint16_t>(), m.act_at(l), grads[fc2_index(l)], acc);
    Impl::grad_ready(fc2_index(l), hooks);
    m.gemm_nn(B, F, H, m.dh16.as<uint16_t>(), P(fc2_index(l)), m.dact.as<float>());
    cuda::swiglu_backward_bf16(m.fc1_at(l), m.dact.as<float>(), B, F, m.dfc1.as<uint16_t>(), m.stream);
    m.gemm_tn(2 * F, H, B, m.dfc1.as<uint16_t>(), m.scaled_at(l), grads[fc1_index(l)], acc);
    Impl::grad_ready(fc1_index(l), hooks);
    m.gemm_nn(B, H, 2 * F, m.dfc1.as<uint16_t>(), P(fc1_index(l)), m.da.as<float>());
    norm_grad(l);
  }

  m.gemm_tn(H, int64_t(m.dims.input), B, m.dh16.as<uint16_t>(), m.x16.as<uint16_t>(), grads[0], acc);
  Impl::grad_ready(0, hooks);
}

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
