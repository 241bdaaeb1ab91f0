#include "pipeline/device/device_network.h"

#if defined(FPGATHER_HAVE_CUDA)

#include <algorithm>
#include <string>

#include "core/error.h"
#include "pipeline/device/device_buffer.h"
#include "kernels/cuda_check.h"
#include "kernels/network_kernels.h"

namespace fpg::device {
namespace {

// Param indices in network_params order (as network_compute.cpp).
size_t fc1_index(uint64_t l) { return 2 + 3 * l; }
size_t fc2_index(uint64_t l) { return 3 + 3 * l; }
size_t norm_index(uint64_t l) { return 1 + 3 * l; }  // l == layers: the final norm

}  // namespace

struct DeviceNetwork::Impl {
  model::NetworkDims dims;
  std::vector<uint64_t> numel;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  int64_t capacity = 0;
  // Forward activations kept for the backward (layouts as NetworkCompute's).
  DeviceBuffer h, inv_rms, normed, scaled, fc1, act, y;
  // Backward scratch; grad_tmp holds the largest param's gradient before it is added (accumulate).
  DeviceBuffer dy, dh, da, dact, dfc1, grad_tmp, loss_slot;
  DeviceBuffer partials;  // kMseBlocks doubles

  // Buffers only grow (a larger batch), reallocated on the stream's device.
  void grow(DeviceBuffer& b, size_t bytes) {
    if (b.bytes() < bytes) b = DeviceBuffer(bytes, stream);
  }

  // Row-major GEMMs C[m,n] = op(A)·op(B) + beta·C, named as network_compute.cpp's. cuBLAS is
  // column-major: a row-major [r, c] array is its [c, r] transpose, so each call computes Cᵀ.
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
            const float* b, int64_t ldb, float beta, float* c) {
    const float alpha = 1.0f;
    FPG_CUBLAS_CHECK(cublasGemmEx(blas, tb, ta, int(n), int(m), int(k), &alpha, b, CUDA_R_32F, int(ldb), a, CUDA_R_32F,
                                  int(lda), &beta, c, CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  // x·Wᵀ: a [m, k], b [n, k].
  void gemm_nt(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float beta, float* c) {
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, a, k, b, k, beta, c);
  }
  // dyᵀ·x: a [k, m], b [k, n].
  void gemm_tn(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, a, m, b, n, 0.0f, c);
  }
  // dy·W: a [m, k], b [k, n].
  void gemm_nn(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, a, k, b, n, 0.0f, c);
  }

  void reserve(int64_t batch) {
    if (batch <= capacity) return;
    const uint64_t B = uint64_t(batch), H = dims.hidden, F = dims.ffn, L = dims.layers;
    grow(h, sizeof(float) * ((L + 1) * B * H));
    grow(inv_rms, sizeof(float) * ((L + 1) * B));
    grow(normed, sizeof(float) * ((L + 1) * B * H));
    grow(scaled, sizeof(float) * ((L + 1) * B * H));
    grow(fc1, sizeof(float) * (std::max<uint64_t>(L, 1) * B * 2 * F));
    grow(act, sizeof(float) * (std::max<uint64_t>(L, 1) * B * F));
    grow(y, sizeof(float) * (B * dims.output));
    grow(dy, sizeof(float) * (B * dims.output));
    grow(dh, sizeof(float) * (B * H));
    grow(da, sizeof(float) * (B * H));
    grow(dact, sizeof(float) * (B * F));
    grow(dfc1, sizeof(float) * (B * 2 * F));
    capacity = batch;
  }

  void check(const std::vector<const float*>& params, int64_t batch) const {
    if (params.size() != numel.size())
      throw UsageError("the network takes " + std::to_string(numel.size()) + " parameter arrays, got " +
                       std::to_string(params.size()));
    if (batch <= 0) throw UsageError("micro-batch size must be positive");
  }

  // params[i], after the hooks that guard a read (pipeline/device/param_hooks.h).
  static const float* read(const std::vector<const float*>& params, size_t i, const ParamHooks* hooks) {
    if (hooks) {
      if (hooks->before_read) hooks->before_read(uint32_t(i));
      if (hooks->on_read) hooks->on_read(uint32_t(i));
    }
    return params[i];
  }
  static void grad_ready(size_t i, const ParamHooks* hooks) {
    if (hooks && hooks->on_grad_ready) hooks->on_grad_ready(uint32_t(i));
  }

  void run_forward(const std::vector<const float*>& params, const float* x, int64_t batch,
                   const ParamHooks* hooks = nullptr) {
    reserve(batch);
    auto P = [&](size_t i) { return read(params, i, hooks); };
    const int64_t B = batch, H = int64_t(dims.hidden), F = int64_t(dims.ffn);
    const uint64_t L = dims.layers;
    gemm_nt(B, H, int64_t(dims.input), x, P(0), 0.0f, h.as<float>());
    for (uint64_t l = 0; l < L; ++l) {
      const float* hl = h.as<float>() + l * B * H;
      float* nl = normed.as<float>() + l * B * H;
      float* sl = scaled.as<float>() + l * B * H;
      cuda::rmsnorm_forward(hl, P(norm_index(l)), B, H, model::kRmsNormEps, inv_rms.as<float>() + l * B, nl, sl,
                            stream);
      float* f = fc1.as<float>() + l * B * 2 * F;
      gemm_nt(B, 2 * F, H, sl, P(fc1_index(l)), 0.0f, f);
      float* a = act.as<float>() + l * B * F;
      cuda::swiglu_forward(f, B, F, a, stream);
      float* next = h.as<float>() + (l + 1) * B * H;  // residual: a copy of h_l, then the GEMM adds (beta 1)
      FPG_CUDA_CHECK(cudaMemcpyAsync(next, hl, sizeof(float) * size_t(B * H), cudaMemcpyDeviceToDevice, stream));
      gemm_nt(B, H, F, a, P(fc2_index(l)), 1.0f, next);
    }
    cuda::rmsnorm_forward(h.as<float>() + L * B * H, P(norm_index(L)), B, H, model::kRmsNormEps,
                          inv_rms.as<float>() + L * B, normed.as<float>() + L * B * H, scaled.as<float>() + L * B * H, stream);
    gemm_nt(B, int64_t(dims.output), H, scaled.as<float>() + L * B * H, P(2 + 3 * L), 0.0f, y.as<float>());
  }

  float* grad_out(const std::vector<float*>& grads, size_t i, model::GradMode mode) {
    return mode == model::GradMode::overwrite ? grads[i] : grad_tmp.as<float>();
  }
  void grad_done(const std::vector<float*>& grads, size_t i, model::GradMode mode) {
    if (mode == model::GradMode::accumulate) cuda::add_inplace(grads[i], grad_tmp.as<float>(), int64_t(numel[i]), stream);
  }
};

DeviceNetwork::DeviceNetwork(const model::NetworkDims& dims, cudaStream_t stream) : impl_(std::make_unique<Impl>()) {
  if (dims.input == 0 || dims.hidden == 0 || dims.ffn == 0 || dims.output == 0)
    throw UsageError("network dims must be positive (input, hidden, ffn, output)");
  Impl& m = *impl_;
  m.dims = dims;
  uint64_t largest = 0;
  for (const model::Param& p : model::network_params(dims)) {
    m.numel.push_back(p.numel());
    largest = std::max(largest, p.numel());
  }
  FPG_CUBLAS_CHECK(cublasCreate(&m.blas));
  // Plain fp32 math, no TF32: the default math mode, and CUBLAS_COMPUTE_32F in every GemmEx.
  FPG_CUBLAS_CHECK(cublasSetMathMode(m.blas, CUBLAS_DEFAULT_MATH));
  set_stream(stream);
  m.grow(m.grad_tmp, sizeof(float) * largest);
  m.grow(m.loss_slot, sizeof(float));
  m.grow(m.partials, sizeof(double) * cuda::kMseBlocks);
}

DeviceNetwork::~DeviceNetwork() {
  if (impl_ && impl_->blas) cublasDestroy(impl_->blas);
}

const model::NetworkDims& DeviceNetwork::dims() const { return impl_->dims; }
size_t DeviceNetwork::param_count() const { return impl_->numel.size(); }
cudaStream_t DeviceNetwork::stream() const { return impl_->stream; }

void DeviceNetwork::set_stream(cudaStream_t stream) {
  impl_->stream = stream;
  FPG_CUBLAS_CHECK(cublasSetStream(impl_->blas, stream));
}

void DeviceNetwork::forward(const std::vector<const float*>& params, const float* x, int64_t batch, float* y) {
  Impl& m = *impl_;
  m.check(params, batch);
  m.run_forward(params, x, batch);
  FPG_CUDA_CHECK(cudaMemcpyAsync(y, m.y.as<float>(), sizeof(float) * size_t(batch) * m.dims.output,
                                 cudaMemcpyDeviceToDevice, m.stream));
}

void DeviceNetwork::loss(const std::vector<const float*>& params, const float* x, const float* target,
                         int64_t batch, float* loss_out) {
  Impl& m = *impl_;
  m.check(params, batch);
  m.run_forward(params, x, batch);
  cuda::mse_loss(m.y.as<float>(), target, batch * int64_t(m.dims.output), m.partials.as<double>(), loss_out, nullptr, m.stream);
}

void DeviceNetwork::forward_backward(const std::vector<const float*>& params, const float* x, const float* target,
                                     int64_t batch, const std::vector<float*>& grads, model::GradMode mode,
                                     float* loss_out, const ParamHooks* hooks) {
  Impl& m = *impl_;
  m.check(params, batch);
  if (grads.size() != params.size())
    throw UsageError("the network takes " + std::to_string(params.size()) + " gradient arrays, got " +
                     std::to_string(grads.size()));
  m.run_forward(params, x, batch, hooks);
  auto P = [&](size_t i) { return Impl::read(params, i, hooks); };
  const int64_t B = batch, H = int64_t(m.dims.hidden), F = int64_t(m.dims.ffn), O = int64_t(m.dims.output);
  const uint64_t L = m.dims.layers;
  cuda::mse_loss(m.y.as<float>(), target, B * O, m.partials.as<double>(), loss_out ? loss_out : m.loss_slot.as<float>(), m.dy.as<float>(),
                 m.stream);
  auto norm_grad = [&](uint64_t l) {  // l == L: the final norm
    const size_t i = norm_index(l);
    cuda::rmsnorm_weight_grad(m.da.as<float>(), m.normed.as<float>() + l * B * H, B, H, m.grad_out(grads, i, mode), m.stream);
    m.grad_done(grads, i, mode);
    Impl::grad_ready(i, hooks);
    cuda::rmsnorm_backward_input(m.da.as<float>(), P(i), m.normed.as<float>() + l * B * H, m.inv_rms.as<float>() + l * B, B, H,
                                 m.dh.as<float>(), m.stream);
  };

  // Head: dW_out = dyᵀ·scaled_L, d(scaled_L) = dy·W_out; then the final norm starts dh.
  const size_t out_i = 2 + 3 * L;
  m.gemm_tn(O, H, B, m.dy.as<float>(), m.scaled.as<float>() + L * B * H, m.grad_out(grads, out_i, mode));
  m.grad_done(grads, out_i, mode);
  Impl::grad_ready(out_i, hooks);
  m.gemm_nn(B, H, O, m.dy.as<float>(), P(out_i), m.da.as<float>());
  FPG_CUDA_CHECK(cudaMemsetAsync(m.dh.as<float>(), 0, sizeof(float) * size_t(B * H), m.stream));
  norm_grad(L);

  for (uint64_t l = L; l-- > 0;) {
    // dh is ∂/∂h_{l+1}; the residual passes it to h_l unchanged and the block adds its share.
    const float* act = m.act.as<float>() + l * B * F;
    const float* fc1 = m.fc1.as<float>() + l * B * 2 * F;
    m.gemm_tn(H, F, B, m.dh.as<float>(), act, m.grad_out(grads, fc2_index(l), mode));
    m.grad_done(grads, fc2_index(l), mode);
    Impl::grad_ready(fc2_index(l), hooks);
    m.gemm_nn(B, F, H, m.dh.as<float>(), P(fc2_index(l)), m.dact.as<float>());
    cuda::swiglu_backward(fc1, m.dact.as<float>(), B, F, m.dfc1.as<float>(), m.stream);
    m.gemm_tn(2 * F, H, B, m.dfc1.as<float>(), m.scaled.as<float>() + l * B * H, m.grad_out(grads, fc1_index(l), mode));
    m.grad_done(grads, fc1_index(l), mode);
    Impl::grad_ready(fc1_index(l), hooks);
    m.gemm_nn(B, H, 2 * F, m.dfc1.as<float>(), P(fc1_index(l)), m.da.as<float>());
    norm_grad(l);
  }

  m.gemm_tn(H, int64_t(m.dims.input), B, m.dh.as<float>(), x, m.grad_out(grads, 0, mode));
  m.grad_done(grads, 0, mode);
  Impl::grad_ready(0, hooks);
}

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
