// SwiGLU forward and backward of the built-in network, and the elementwise gradient accumulation:
// the per-element expressions of model/network_compute.cpp, evaluated in the same order.
#include "kernels/cuda_check.h"
#include "kernels/network_kernels.h"
#include "kernels/network_reduce.cuh"

namespace fpg::cuda {
namespace {

// expf here and std::exp on the CPU may differ in the last bit; the GEMMs around differ more.
__device__ inline float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void swiglu_forward_kernel(const float* fc1, int64_t rows, int64_t ffn, float* act) {
  const int64_t n = rows * ffn;
  for (int64_t i = blockIdx.x * int64_t(kNetThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kNetThreads) {
    const int64_t b = i / ffn, j = i % ffn;
    const float gate = fc1[b * 2 * ffn + j];
    const float up = fc1[b * 2 * ffn + ffn + j];
    act[i] = gate * sigmoid(gate) * up;
  }
}

__global__ void swiglu_backward_kernel(const float* fc1, const float* dact, int64_t rows, int64_t ffn, float* dfc1) {
  const int64_t n = rows * ffn;
  for (int64_t i = blockIdx.x * int64_t(kNetThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kNetThreads) {
    const int64_t b = i / ffn, j = i % ffn;
    const float gate = fc1[b * 2 * ffn + j];
    const float up = fc1[b * 2 * ffn + ffn + j];
    const float da = dact[i];
    const float s = sigmoid(gate);
    dfc1[b * 2 * ffn + j] = da * up * (s * (1.0f + gate * (1.0f - s)));
    dfc1[b * 2 * ffn + ffn + j] = da * (gate * s);
  }
}

__global__ void add_inplace_kernel(float* g, const float* d, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(kNetThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kNetThreads)
    g[i] += d[i];
}

}  // namespace

void swiglu_forward(const float* fc1, int64_t rows, int64_t ffn, float* act, cudaStream_t stream) {
  if (rows * ffn <= 0) return;
  swiglu_forward_kernel<<<grid_for(rows * ffn), kNetThreads, 0, stream>>>(fc1, rows, ffn, act);
  FPG_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(const float* fc1, const float* dact, int64_t rows, int64_t ffn, float* dfc1,
                     cudaStream_t stream) {
  if (rows * ffn <= 0) return;
  swiglu_backward_kernel<<<grid_for(rows * ffn), kNetThreads, 0, stream>>>(fc1, dact, rows, ffn, dfc1);
  FPG_CUDA_CHECK_LAUNCH();
}

void add_inplace(float* g, const float* d, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_inplace_kernel<<<grid_for(n), kNetThreads, 0, stream>>>(g, d, n);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda
