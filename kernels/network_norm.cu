// rmsnorm forward and backward of the built-in network (model/network_compute.cpp's rmsnorm_forward /
// rmsnorm_backward): one block per row for the row sums, one thread per column for the weight grad.
#include "kernels/cuda_check.h"
#include "kernels/network_kernels.h"
#include "kernels/network_reduce.cuh"

namespace fpg::cuda {
namespace {

__global__ void rmsnorm_forward_kernel(const float* h, const float* w, int64_t width, float eps, float* inv_rms,
                                       float* normed, float* scaled) {
  __shared__ double sh[kNetThreads];
  const int64_t row = blockIdx.x;
  const float* hr = h + row * width;
  double ss = 0.0;
  for (int64_t j = threadIdx.x; j < width; j += kNetThreads) ss += double(hr[j]) * hr[j];
  ss = block_sum(ss, sh);
  const float r = 1.0f / sqrtf(float(ss / double(width)) + eps);
  if (threadIdx.x == 0) inv_rms[row] = r;
  float* nr = normed + row * width;
  float* sr = scaled + row * width;
  for (int64_t j = threadIdx.x; j < width; j += kNetThreads) {
    const float n = hr[j] * r;
    nr[j] = n;
    sr[j] = n * w[j];
  }
}

__global__ void rmsnorm_backward_input_kernel(const float* dscaled, const float* w, const float* normed,
                                              const float* inv_rms, int64_t width, float* dh) {
  __shared__ double sh[kNetThreads];
  const int64_t row = blockIdx.x;
  const float* ds = dscaled + row * width;
  const float* nr = normed + row * width;
  double dot = 0.0;
  for (int64_t j = threadIdx.x; j < width; j += kNetThreads) dot += double(ds[j] * w[j]) * nr[j];
  dot = block_sum(dot, sh);
  const float mean = float(dot / double(width));
  const float r = inv_rms[row];
  float* dr = dh + row * width;
  for (int64_t j = threadIdx.x; j < width; j += kNetThreads) dr[j] += r * (ds[j] * w[j] - nr[j] * mean);
}

__global__ void rmsnorm_weight_grad_kernel(const float* dscaled, const float* normed, int64_t rows, int64_t width,
                                           float* dw) {
  for (int64_t j = blockIdx.x * int64_t(kNetThreads) + threadIdx.x; j < width; j += int64_t(gridDim.x) * kNetThreads) {
    double acc = 0.0;
    for (int64_t b = 0; b < rows; ++b) acc += double(dscaled[b * width + j]) * normed[b * width + j];
    dw[j] = float(acc);
  }
}

}  // namespace

void rmsnorm_forward(const float* h, const float* w, int64_t rows, int64_t width, float eps, float* inv_rms,
                     float* normed, float* scaled, cudaStream_t stream) {
  if (rows <= 0) return;
  rmsnorm_forward_kernel<<<unsigned(rows), kNetThreads, 0, stream>>>(h, w, width, eps, inv_rms, normed, scaled);
  FPG_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward_input(const float* dscaled, const float* w, const float* normed, const float* inv_rms,
                            int64_t rows, int64_t width, float* dh, cudaStream_t stream) {
  if (rows <= 0) return;
  rmsnorm_backward_input_kernel<<<unsigned(rows), kNetThreads, 0, stream>>>(dscaled, w, normed, inv_rms, width, dh);
  FPG_CUDA_CHECK_LAUNCH();
}

void rmsnorm_weight_grad(const float* dscaled, const float* normed, int64_t rows, int64_t width, float* dw,
                         cudaStream_t stream) {
  if (width <= 0) return;
  rmsnorm_weight_grad_kernel<<<grid_for(width), kNetThreads, 0, stream>>>(dscaled, normed, rows, width, dw);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda
