#include "device/device_network.h"

#if defined(FPGATHER_HAVE_CUDA)

#include <algorithm>
#include <string>

#include "core/error.h"
#include "device/device_scratch.h"
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
  DeviceScratch<float> h, inv_rms, normed, scaled, fc1, act, y;
  // Backward scratch; grad_tmp holds the largest param's gradient before it is added (accumulate).
  DeviceScratch<float> dy, dh, da, dact, dfc1, grad_tmp, loss_slot;
  DeviceScratch<double> partials;

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
    h.reserve((L + 1) * B * H);
    inv_rms.reserve((L + 1) * B);
    normed.reserve((L + 1) * B * H);
    scaled.reserve((L + 1) * B * H);
    fc1.reserve(std::max<uint64_t>(L, 1) * B * 2 * F);
    act.reserve(std::max<uint64_t>(L, 1) * B * F);
    y.reserve(B * dims.output);
    dy.reserve(B * dims.output);
    dh.reserve(B * H);
    da.reserve(B * H);
    dact.reserve(B * F);
    dfc1.reserve(B * 2 * F);
    capacity = batch;
  }

  void check(const std::vector<const float*>& params, int64_t batch) const {
    if (params.size() != numel.size())
      throw UsageError("the network takes " + std::to_string(numel.size()) + " parameter arrays, got " +
                       std::to_string(params.size()));
    if (batch <= 0) throw UsageError("micro-batch size must be positive");
  }

  void run_forward(const std::vector<const float*>& params, const float* x, int64_t batch) {
    reserve(batch);
    const int64_t B = batch, H = int64_t(dims.hidden), F = int64_t(dims.ffn);
    const uint64_t L = dims.layers;
    gemm_nt(B, H, int64_t(dims.input), x, params[0], 0.0f, h.data());
    for (uint64_t l = 0; l < L; ++l) {
      const float* hl = h.data() + l * B * H;
      float* nl = normed.data() + l * B * H;
      float* sl = scaled.data() + l * B * H;
      cuda::rmsnorm_forward(hl, params[norm_index(l)], B, H, model::kRmsNormEps, inv_rms.data() + l * B, nl, sl,
                            stream);
      float* f = fc1.data() + l * B * 2 * F;
      gemm_nt(B, 2 * F, H, sl, params[fc1_index(l)], 0.0f, f);
      float* a = act.data() + l * B * F;
      cuda::swiglu_forward(f, B, F, a, stream);
      float* next = h.data() + (l + 1) * B * H;  // residual: a copy of h_l, then the GEMM adds (beta 1)
      FPG_CUDA_CHECK(cudaMemcpyAsync(next, hl, sizeof(float) * size_t(B * H), cudaMemcpyDeviceToDevice, stream));
      gemm_nt(B, H, F, a, params[fc2_index(l)], 1.0f, next);
    }
    cuda::rmsnorm_forward(h.data() + L * B * H, params[norm_index(L)], B, H, model::kRmsNormEps,
                          inv_rms.data() + L * B, normed.data() + L * B * H, scaled.data() + L * B * H, stream);
    gemm_nt(B, int64_t(dims.output), H, scaled.data() + L * B * H, params[2 + 3 * L], 0.0f, y.data());
  }

  float* grad_out(const std::vector<float*>& grads, size_t i, model::GradMode mode) {
    return mode == model::GradMode::overwrite ? grads[i] : grad_tmp.data();
  }
  void grad_done(const std::vector<float*>& grads, size_t i, model::GradMode mode) {
    if (mode == model::GradMode::accumulate) cuda::add_inplace(grads[i], grad_tmp.data(), int64_t(numel[i]), stream);
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
  m.grad_tmp.reserve(largest);
  m.loss_slot.reserve(1);
  m.partials.reserve(cuda::kMseBlocks);
  FPG_CUBLAS_CHECK(cublasCreate(&m.blas));
  // Plain fp32 math: no TF32 (CUBLAS_DEFAULT_MATH; NVIDIA_TF32_OVERRIDE cannot turn it on for GemmEx
  // with CUBLAS_COMPUTE_32F either).
  FPG_CUBLAS_CHECK(cublasSetMathMode(m.blas, CUBLAS_DEFAULT_MATH));
  set_stream(stream);
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
  FPG_CUDA_CHECK(cudaMemcpyAsync(y, m.y.data(), sizeof(float) * size_t(batch) * m.dims.output,
                                 cudaMemcpyDeviceToDevice, m.stream));
}

void DeviceNetwork::loss(const std::vector<const float*>& params, const float* x, const float* target,
                         int64_t batch, float* loss_out) {
  Impl& m = *impl_;
  m.check(params, batch);
  m.run_forward(params, x, batch);
  cuda::mse_loss(m.y.data(), target, batch * int64_t(m.dims.output), m.partials.data(), loss_out, nullptr, m.stream);
}

void DeviceNetwork::forward_backward(const std::vector<const float*>& params, const float* x, const float* target,
                                     int64_t batch, const std::vector<float*>& grads, model::GradMode mode,
                                     float* loss_out) {
  Impl& m = *impl_;
  m.check(params, batch);
  if (grads.size() != params.size())
    throw UsageError("the network takes " + std::to_string(params.size()) + " gradient arrays, got " +
                     std::to_string(grads.size()));
  m.run_forward(params, x, batch);
  const int64_t B = batch, H = int64_t(m.dims.hidden), F = int64_t(m.dims.ffn), O = int64_t(m.dims.output);
  const uint64_t L = m.dims.layers;
  cuda::mse_loss(m.y.data(), target, B * O, m.partials.data(), loss_out ? loss_out : m.loss_slot.data(), m.dy.data(),
                 m.stream);
  auto norm_grad = [&](uint64_t l) {  // l == L: the final norm
    const size_t i = norm_index(l);
    cuda::rmsnorm_weight_grad(m.da.data(), m.normed.data() + l * B * H, B, H, m.grad_out(grads, i, mode), m.stream);
    m.grad_done(grads, i, mode);
    cuda::rmsnorm_backward_input(m.da.data(), params[i], m.normed.data() + l * B * H, m.inv_rms.data() + l * B, B, H,
                                 m.dh.data(), m.stream);
  };

  // Head: dW_out = dyᵀ·scaled_L, d(scaled_L) = dy·W_out; then the final norm starts dh.
  const size_t out_i = 2 + 3 * L;
  m.gemm_tn(O, H, B, m.dy.data(), m.scaled.data() + L * B * H, m.grad_out(grads, out_i, mode));
  m.grad_done(grads, out_i, mode);
  m.gemm_nn(B, H, O, m.dy.data(), params[out_i], m.da.data());
  FPG_CUDA_CHECK(cudaMemsetAsync(m.dh.data(), 0, sizeof(float) * size_t(B * H), m.stream));
  norm_grad(L);

  for (uint64_t l = L; l-- > 0;) {
    // dh is ∂/∂h_{l+1}; the residual passes it to h_l unchanged and the block adds its share.
    const float* act = m.act.data() + l * B * F;
    const float* fc1 = m.fc1.data() + l * B * 2 * F;
    m.gemm_tn(H, F, B, m.dh.data(), act, m.grad_out(grads, fc2_index(l), mode));
    m.grad_done(grads, fc2_index(l), mode);
    m.gemm_nn(B, F, H, m.dh.data(), params[fc2_index(l)], m.dact.data());
    cuda::swiglu_backward(fc1, m.dact.data(), B, F, m.dfc1.data(), m.stream);
    m.gemm_tn(2 * F, H, B, m.dfc1.data(), m.scaled.data() + l * B * H, m.grad_out(grads, fc1_index(l), mode));
    m.grad_done(grads, fc1_index(l), mode);
    m.gemm_nn(B, H, 2 * F, m.dfc1.data(), params[fc1_index(l)], m.da.data());
    norm_grad(l);
  }

  m.gemm_tn(H, int64_t(m.dims.input), B, m.dh.data(), x, m.grad_out(grads, 0, mode));
  m.grad_done(grads, 0, mode);
}

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
