// The built-in network (model/network.h) on one GPU: NetworkCompute's forward, loss and
// forward_backward on device buffers, with the same math, parameter order and GradMode semantics
// (overwrite; accumulate = the whole gradient formed in scratch, then added elementwise).
//
// GEMMs are cuBLAS fp32 (cublasGemmEx, CUBLAS_COMPUTE_32F: no TF32, no reduced precision), the
// handle bound to the instance's stream; rmsnorm, SwiGLU, MSE and the accumulation are the kernels of
// kernels/network_kernels.h. Agreement with the CPU: within rounding (the GEMMs and row sums add in
// another order; the norm-weight gradients' column sums are the CPU's order). Reproducibility: two
// calls on the same inputs give the same bits (fixed-order reductions, no atomics; cuBLAS is
// deterministic on one GPU and stream).
//
// Every call only enqueues work on stream() and returns; results are ready once the stream is.
// One instance per thread and device (it owns a cuBLAS handle and its scratch, reused across calls,
// growing for a larger batch). Built only with FPGATHER_HAVE_CUDA; the header compiles anywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pipeline/device/param_hooks.h"
#include "kernels/stream.h"
#include "model/network.h"
#include "model/network_compute.h"

namespace fpg::device {

class DeviceNetwork {
 public:
  // On the calling thread's current device.
  DeviceNetwork(const model::NetworkDims& dims, cudaStream_t stream);
  ~DeviceNetwork();
  DeviceNetwork(const DeviceNetwork&) = delete;
  DeviceNetwork& operator=(const DeviceNetwork&) = delete;

  const model::NetworkDims& dims() const;
  size_t param_count() const;  // 3 + 3·layers
  cudaStream_t stream() const;
  void set_stream(cudaStream_t stream);  // later calls enqueue there (the cuBLAS handle follows)

  // y [batch, output] from x [batch, input]; every pointer device memory.
  void forward(const std::vector<const float*>& params, const float* x, int64_t batch, float* y);

  // *loss_out (a device float) = mean over batch×output of (y − target)², as NetworkCompute::loss.
  void loss(const std::vector<const float*>& params, const float* x, const float* target, int64_t batch,
            float* loss_out);

  // The loss into *loss_out (device; may be null) and the gradients into grads as
  // NetworkCompute::forward_backward. hooks (may be null; pipeline/device/param_hooks.h): before_read and
  // on_read before every enqueued read of a param, on_grad_ready after the last enqueued write of each
  // param's grad (the caller passes it on the step's last micro-batch only).
  void forward_backward(const std::vector<const float*>& params, const float* x, const float* target,
                        int64_t batch, const std::vector<float*>& grads, model::GradMode mode, float* loss_out,
                        const ParamHooks* hooks = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fpg::device
