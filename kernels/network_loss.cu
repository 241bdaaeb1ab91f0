// The mean squared error of the built-in network and its output gradient: kMseBlocks blocks of a
// fixed grid-stride sum in double, then one block adds their partials in a fixed tree, so the loss
// is reproducible bit for bit (not the CPU's sequential sum: equal within rounding).
#include "kernels/cuda_check.h"
#include "kernels/network_kernels.h"
#include "kernels/network_reduce.cuh"

namespace fpg::cuda {
namespace {

__global__ void mse_partial_kernel(const float* y, const float* target, int64_t n, float scale, double* partials,
                                   float* dy) {
  __shared__ double sh[kNetThreads];
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t(kNetThreads) + threadIdx.x; i < n; i += int64_t(kMseBlocks) * kNetThreads) {
    const float d = y[i] - target[i];
    acc += double(d) * d;
    if (dy) dy[i] = d * scale;
  }
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void mse_final_kernel(const double* partials, int64_t n, float* loss) {
  __shared__ double sh[kNetThreads];
  const double v = threadIdx.x < kMseBlocks ? partials[threadIdx.x] : 0.0;
  const double sum = block_sum(v, sh);
  if (threadIdx.x == 0) loss[0] = float(sum / double(n));
}

}  // namespace

static_assert(kMseBlocks <= kNetThreads, "the final MSE pass reads one partial per thread");

void mse_loss(const float* y, const float* target, int64_t n, double* partials, float* loss, float* dy,
              cudaStream_t stream) {
  const float scale = float(2.0 / double(n));
  mse_partial_kernel<<<kMseBlocks, kNetThreads, 0, stream>>>(y, target, n, scale, partials, dy);
  FPG_CUDA_CHECK_LAUNCH();
  mse_final_kernel<<<1, kNetThreads, 0, stream>>>(partials, n, loss);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda
