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
// Compute::bf16 (model/compute_mode.h) is the same math with values rounded to bf16 (ties to even) at
// these points, and nowhere else:
//   - every parameter, where it is read (a bf16-stored parameter is already exact);
//   - x before the input projection;
//   - the GEMM operands made in the forward: a = rmsnorm(h) ⊙ norm (the fp32 product, then rounded),
//     [gate | up] = bf16(a·W_fc1ᵀ), act = bf16(silu(gate) ⊙ up) from the rounded gate and up;
//   - the gradients that only feed GEMMs: bf16(dy) (dy itself is the fp32 loss gradient), bf16(dh)
//     before the fc2 and input-projection GEMMs, bf16(d gate | d up) from the fp32 d act.
// fp32: the residual stream h (the fc2 GEMM adds onto it in fp32), 1/rms and rmsnorm(h), y, the loss,
// d act, d(scaled) and dh, and every parameter gradient. Each GEMM sums its bf16 products in fp32.
//
// Determinism: a call's results are a function of its inputs alone, bit for bit. Every GEMM is one
// single-threaded cblas_sgemm (blas::use_single_threaded(), called by the constructor, pins OpenBLAS to
// one thread process-wide), every reduction runs in a fixed order, and an instance keeps no state
// between calls but its scratch buffers. Thread safety: one instance per thread (a DP rank owns one);
// instances share nothing mutable, so ranks run concurrently and still give the sequential bits.
#pragma once

#include <cstdint>
#include <vector>

#include "model/compute_mode.h"
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
  explicit NetworkCompute(const NetworkDims& dims, Compute compute = Compute::fp32);

  const NetworkDims& dims() const { return dims_; }
  Compute compute() const { return compute_; }
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
  // Rounds where Compute::bf16 rounds (the header comment); fp32: the reference expressions alone.
  void run_forward(const std::vector<const float*>& params, const float* x, int64_t batch);
  // Compute::bf16: params[i] when every element is bf16-exact, else a rounded copy of it.
  std::vector<const float*> bf16_params(const std::vector<const float*>& params);
  float mse(const float* target, int64_t batch, float* dy);
  // Where to write parameter i's gradient, and making it land in grads[i].
  float* grad_out(const std::vector<float*>& grads, size_t i, GradMode mode);
  void grad_done(const std::vector<float*>& grads, size_t i, GradMode mode);

  NetworkDims dims_;
  Compute compute_ = Compute::fp32;
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
  // Compute::bf16 only: the rounded x [B, input] and dh [B, H]; rounded copies of params that
  // are not bf16-exact (empty for those that are), and the pointers the last call read.
  std::vector<float> x16_, dh16_;
  std::vector<std::vector<float>> rounded_;
  std::vector<const float*> p16_;
  const float* x_ = nullptr;  // the x the last forward read (x16_ under bf16)
};

// Pointer lists over per-parameter arrays, for the calls above.
std::vector<const float*> const_pointers(const std::vector<std::vector<float>>& arrays);
std::vector<float*> pointers(std::vector<std::vector<float>>& arrays);

}  // namespace fpg::model
