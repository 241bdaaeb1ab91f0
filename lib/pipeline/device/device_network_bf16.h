// The built-in network (model/network.h) on one GPU under `--compute bf16`: NetworkCompute's bf16
// forward, loss and forward_backward (model/network_compute.h lists the rounding points) on device
// buffers, GEMMs on tensor cores through cuBLASLt (kernels/lt_matmul.h: bf16 operands, fp32
// accumulation; the fc1 GEMM writes its bf16 output in the epilogue, the fc2 GEMM adds the residual
// stream as beta·C into the next layer's h, the weight-gradient GEMMs write fp32 gradients straight
// into the grad buffers and accumulate there with beta 1), rmsnorm and SwiGLU by
// kernels/network_bf16_kernels.h, the loss by kernels/network_kernels.h.
//
// Parameters are bf16 bit patterns on the device (the gathered bf16 params themselves: nothing is
// decoded for them); gradients fp32. Agreement with the CPU's Compute::bf16: within rounding (the
// GEMMs add in another order, so a bf16 rounding may flip where a sum sits on a tie; the
// elementwise expressions are the CPU's). Two runs on the same inputs give the same bits (cuBLASLt's
// algorithm per shape is chosen once, reductions are fixed-order). GradMode::accumulate adds each
// gradient in the GEMM's epilogue (fp32: the formed gradient plus the old one, as the CPU's add).
//
// Unlike DeviceNetwork, it does not run the bit-exact fp32 reference; that one stays separate
// (device_network.h), so the fp32 path is untouched by this one. One instance per thread and device;
// every call only enqueues work on stream(). Built only with FPGATHER_HAVE_CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/stream.h"
#include "model/network.h"
#include "model/network_compute.h"
#include "pipeline/device/param_hooks.h"

namespace fpg::device {

class DeviceNetworkBf16 {
 public:
  DeviceNetworkBf16(const model::NetworkDims& dims, cudaStream_t stream);
  ~DeviceNetworkBf16();
  DeviceNetworkBf16(const DeviceNetworkBf16&) = delete;
  DeviceNetworkBf16& operator=(const DeviceNetworkBf16&) = delete;

  const model::NetworkDims& dims() const;
  size_t param_count() const;  // 3 + 3·layers
  cudaStream_t stream() const;
  void set_stream(cudaStream_t stream);

  // y [batch, output] (fp32) from x [batch, input] (fp32, rounded to bf16 here); params: bf16.
  void forward(const std::vector<const uint16_t*>& params, const float* x, int64_t batch, float* y);

  // *loss_out (a device float) = mean over batch×output of (y − target)².
  void loss(const std::vector<const uint16_t*>& params, const float* x, const float* target, int64_t batch,
            float* loss_out);

  // The loss into *loss_out (device; may be null) and the fp32 gradients into grads, as
  // NetworkCompute::forward_backward in Compute::bf16; hooks as DeviceNetwork's.
  void forward_backward(const std::vector<const uint16_t*>& params, const float* x, const float* target,
                        int64_t batch, const std::vector<float*>& grads, model::GradMode mode, float* loss_out,
                        const ParamHooks* hooks = nullptr);

  // GEMM shapes planned on cuBLASLt and run on the cublasGemmEx fallback so far (diagnostics).
  uint64_t lt_plans() const;
  uint64_t lt_fallbacks() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fpg::device
