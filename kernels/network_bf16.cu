// The built-in network's rmsnorm and SwiGLU under `--compute bf16` (network_bf16_kernels.h): the
// per-element expressions of model/network_compute.cpp's bf16 path in the same order, the bf16
// roundings by core/float_codec.h's codec. One block per row for the row sums, one thread per column
// for the norm-weight gradient.
#include "core/float_codec.h"
#include "kernels/cuda_check.h"
#include "kernels/network_bf16_kernels.h"
#include "kernels/network_reduce.cuh"

namespace fpg::cuda {
namespace {

// expf here and std::exp on the CPU may differ in the last bit; the GEMMs around differ more.
__device__ inline float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void rmsnorm_forward_bf16_kernel(const float* __restrict__ h, const uint16_t* __restrict__ w,
                                            int64_t width, float eps, float* __restrict__ inv_rms,
                                            uint16_t* __restrict__ scaled) {
  __shared__ double sh[kNetThreads];
  const int64_t row = blockIdx.x;
  const float* hr = h + row * width;
  double ss = 0.0;
  for (int64_t j = threadIdx.x; j < width; j += kNetThreads) ss += double(hr[j]) * hr[j];
  ss = block_sum(ss, sh);
  const float r = 1.0f / sqrtf(float(ss / double(width)) + eps);
  if (threadIdx.x == 0) inv_rms[row] = r;
  uint16_t* sr = scaled + row * width;
  for (int64_t j = threadIdx.x; j < width; j += kNetThreads) {
    const float n = hr[j] * r;
    sr[j] = bf16_from_float(n * float_from_bf16(w[j]));
  }
}

__global__ void rmsnorm_backward_bf16_kernel(const float* __restrict__ dscaled, const uint16_t* __restrict__ w,
                                             const float* __restrict__ h, const float* __restrict__ inv_rms,
                                             int64_t width, float* __restrict__ dh, uint16_t* __restrict__ dh16) {
  __shared__ double sh[kNetThreads];
  const int64_t row = blockIdx.x;
  const float* ds = dscaled + row * width;
  const float* hr = h + row * width;
  const float r = inv_rms[row];
  double dot = 0.0;
  for (int64_t j = threadIdx.x; j < width; j += kNetThreads) {
    const float n = hr[j] * r;
    dot += double(ds[j] * float_from_bf16(w[j])) * n;
  }
  dot = block_sum(dot, sh);
  const float mean = float(dot / double(width));
  float* dr = dh + row * width;
  uint16_t* d16 = dh16 + row * width;
  for (int64_t j = threadIdx.x; j < width; j += kNetThreads) {
    const float n = hr[j] * r;
    const float v = dr[j] + r * (ds[j] * float_from_bf16(w[j]) - n * mean);
    dr[j] = v;
    d16[j] = bf16_from_float(v);
  }
}

// The products of 8 rows are loaded and formed first, then added in row order: the loads are in
// flight together (a micro-batch is a few dozen rows, so the column loop is latency-bound), the sum
// is the sequential one.
__global__ void rmsnorm_weight_grad_bf16_kernel(const float* __restrict__ dscaled, const float* __restrict__ h,
                                                const float* __restrict__ inv_rms, int64_t rows, int64_t width,
                                                bool accumulate, float* __restrict__ dw) {
  constexpr int kRows = 8;
  for (int64_t j = blockIdx.x * int64_t(kNetThreads) + threadIdx.x; j < width; j += int64_t(gridDim.x) * kNetThreads) {
    double acc = 0.0;
    int64_t b = 0;
    for (; b + kRows <= rows; b += kRows) {
      double v[kRows];
#pragma unroll
      for (int k = 0; k < kRows; ++k)
        v[k] = double(dscaled[(b + k) * width + j]) * (h[(b + k) * width + j] * inv_rms[b + k]);
#pragma unroll
      for (int k = 0; k < kRows; ++k) acc += v[k];
    }
    for (; b < rows; ++b) acc += double(dscaled[b * width + j]) * (h[b * width + j] * inv_rms[b]);
    dw[j] = accumulate ? dw[j] + float(acc) : float(acc);
  }
}

__global__ void swiglu_forward_bf16_kernel(const uint16_t* __restrict__ fc1, int64_t rows, int64_t ffn,
                                           uint16_t* __restrict__ act) {
  const int64_t n = rows * ffn;
  for (int64_t i = blockIdx.x * int64_t(kNetThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kNetThreads) {
    const int64_t b = i / ffn, j = i % ffn;
    const float gate = float_from_bf16(fc1[b * 2 * ffn + j]);
    const float up = float_from_bf16(fc1[b * 2 * ffn + ffn + j]);
    act[i] = bf16_from_float(gate * sigmoid(gate) * up);
  }
}

__global__ void swiglu_backward_bf16_kernel(const uint16_t* __restrict__ fc1, const float* __restrict__ dact,
                                            int64_t rows, int64_t ffn, uint16_t* __restrict__ dfc1) {
  const int64_t n = rows * ffn;
  for (int64_t i = blockIdx.x * int64_t(kNetThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kNetThreads) {
    const int64_t b = i / ffn, j = i % ffn;
    const float gate = float_from_bf16(fc1[b * 2 * ffn + j]);
    const float up = float_from_bf16(fc1[b * 2 * ffn + ffn + j]);
    const float da = dact[i];
    const float s = sigmoid(gate);
    dfc1[b * 2 * ffn + j] = bf16_from_float(da * up * (s * (1.0f + gate * (1.0f - s))));
    dfc1[b * 2 * ffn + ffn + j] = bf16_from_float(da * (gate * s));
  }
}

}  // namespace

void rmsnorm_forward_bf16(const float* h, const uint16_t* w, int64_t rows, int64_t width, float eps, float* inv_rms,
                          uint16_t* scaled, cudaStream_t stream) {
  if (rows <= 0) return;
  rmsnorm_forward_bf16_kernel<<<unsigned(rows), kNetThreads, 0, stream>>>(h, w, width, eps, inv_rms, scaled);
  FPG_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward_bf16(const float* dscaled, const uint16_t* w, const float* h, const float* inv_rms,
                           int64_t rows, int64_t width, float* dh, uint16_t* dh16, cudaStream_t stream) {
  if (rows <= 0) return;
  rmsnorm_backward_bf16_kernel<<<unsigned(rows), kNetThreads, 0, stream>>>(dscaled, w, h, inv_rms, width, dh, dh16);
  FPG_CUDA_CHECK_LAUNCH();
}

void rmsnorm_weight_grad_bf16(const float* dscaled, const float* h, const float* inv_rms, int64_t rows,
                              int64_t width, bool accumulate, float* dw, cudaStream_t stream) {
  if (width <= 0) return;
  rmsnorm_weight_grad_bf16_kernel<<<grid_for(width), kNetThreads, 0, stream>>>(dscaled, h, inv_rms, rows, width,
                                                                               accumulate, dw);
  FPG_CUDA_CHECK_LAUNCH();
}

void swiglu_forward_bf16(const uint16_t* fc1, int64_t rows, int64_t ffn, uint16_t* act, cudaStream_t stream) {
  if (rows * ffn <= 0) return;
  swiglu_forward_bf16_kernel<<<grid_for(rows * ffn), kNetThreads, 0, stream>>>(fc1, rows, ffn, act);
  FPG_CUDA_CHECK_LAUNCH();
}

void swiglu_backward_bf16(const uint16_t* fc1, const float* dact, int64_t rows, int64_t ffn, uint16_t* dfc1,
                          cudaStream_t stream) {
  if (rows * ffn <= 0) return;
  swiglu_backward_bf16_kernel<<<grid_for(rows * ffn), kNetThreads, 0, stream>>>(fc1, dact, rows, ffn, dfc1);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda
