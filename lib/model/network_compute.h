// The fp32 forward and backward of the built-in network (network.h), on the CPU through BLAS:
//
//   h₀ = x·W_inᵀ
//   for each block l:   a = rmsnorm(h_l) ⊙ norm_l;  [gate | up] = a·W_fc1ᵀ;
//                       h_{l+1} = h_l + (silu(gate) ⊙ up)·W_fc2ᵀ
//   y = (rmsnorm(h_L) ⊙ final_norm)·W_outᵀ;     loss = mean over the B×output elements of (y − t)²
//
// rmsnorm(h) = h / sqrt(mean(h²) + kRmsNormEps) per row. Parameters and gradients are fp32 arrays in
// the order of network_params(dims), each row-major in its param's shape ([out, in] for linear layers).
//
// Determinism: a call's results are a function of its inputs alone, bit for bit. Every GEMM is one
// single-threaded cblas_sgemm (use_single_threaded_blas(), called by the constructor, pins OpenBLAS to
// one thread process-wide), every reduction runs in a fixed order, and an instance keeps no state
// between calls but its scratch buffers. Thread safety: one instance per thread (a DP rank owns one);
// instances share nothing mutable, so ranks run concurrently and still give the sequential bits.
#pragma once

#include <cstdint>
#include <vector>

#include "model/network.h"

namespace fpg::model {

inline constexpr float kRmsNormEps = 1e-6f;

// How forward_backward writes gradients.
enum class GradMode : uint8_t {
  overwrite,   // grads[i] = ∂loss/∂param_i
  accumulate,  // grads[i] += ∂loss/∂param_i, elementwise after the whole gradient is formed, so
               // accumulating A micro-batches equals summing their separate gradients in order, bitwise
};

class NetworkCompute {
 public:
  explicit NetworkCompute(const NetworkDims& dims);

  const NetworkDims& dims() const { return dims_; }
  size_t param_count() const { return shapes_numel_.size(); }  // 3 + 3·layers

  // y [batch, output] from x [batch, input].
  void forward(const std::vector<const float*>& params, const float* x, int64_t batch, float* y);

  // The loss of one micro-batch: mean over its batch×output elements of (y − target)².
  float loss(const std::vector<const float*>& params, const float* x, const float* target, int64_t batch);

  // The loss as loss() returns it, and its gradient with respect to every parameter into grads
  // (same order and layout as params).
  float forward_backward(const std::vector<const float*>& params, const float* x, const float* target,
                         int64_t batch, const std::vector<float*>& grads, GradMode mode);

 private:
  void check_params(const std::vector<const float*>& params, int64_t batch) const;
  void reserve(int64_t batch);
  void run_forward(const std::vector<const float*>& params, const float* x, int64_t batch);
  float mse(const float* target, int64_t batch, float* dy);
  // Where to write parameter i's gradient, and making it land in grads[i].
  float* grad_out(const std::vector<float*>& grads, size_t i, GradMode mode);
  void grad_done(const std::vector<float*>& grads, size_t i, GradMode mode);

  NetworkDims dims_;
  std::vector<uint64_t> shapes_numel_;  // numel of each param, network_params order
  int64_t capacity_ = 0;                // batch rows the buffers hold
  // Forward activations kept for the backward, per row block of the batch:
  std::vector<float> h_;        // (layers+1) × [B, H]: input of block l; h_[layers] enters the final norm
  std::vector<float> inv_rms_;  // (layers+1) × [B]
  std::vector<float> normed_;   // (layers+1) × [B, H]: rmsnorm(h) before the weight
  std::vector<float> scaled_;   // (layers+1) × [B, H]: rmsnorm(h) ⊙ weight, the GEMM operand
  std::vector<float> fc1_;      // layers × [B, 2F]: gate | up
  std::vector<float> act_;      // layers × [B, F]: silu(gate) ⊙ up
  std::vector<float> y_;        // [B, output]
  // Backward scratch.
  std::vector<float> dy_, dh_, da_, dact_, dfc1_;
  std::vector<double> dnorm_;   // [H] norm-weight gradient sums
  std::vector<float> grad_tmp_;  // the largest param: a gradient before it is added (accumulate mode)
};

// Pointer lists over per-parameter arrays, for the calls above.
std::vector<const float*> const_pointers(const std::vector<std::vector<float>>& arrays);
std::vector<float*> pointers(std::vector<std::vector<float>>& arrays);

}  // namespace fpg::model
