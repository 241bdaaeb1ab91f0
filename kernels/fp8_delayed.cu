// Delayed scaling on the GPU (fp8/delayed.h steps 2 and 3) for many tensors in one launch, one
// block per tensor: record the step's amax into history[0], reduce the history (max or most
// recent), update scale and scale_inv with the FPG_HD delayed_scale rule, roll the history.
#include <string>

#include "core/error.h"
#include "fp8/amax.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_device.cuh"
#include "kernels/fp8_shard.h"

namespace fpg::cuda::fp8 {
namespace {

using namespace dev;
using fpg::fp8::AmaxAlgo;

constexpr size_t kMaxHistory = 8192;

__global__ void __launch_bounds__(kThreads) delayed_kernel(Format f, AmaxAlgo algo, int margin, uint32_t L,
                                                           const float* __restrict__ amax, float* history,
                                                           float* scale, float* scale_inv) {
  extern __shared__ float h[];
  __shared__ uint32_t red[kThreads / 32];
  const uint32_t t = blockIdx.x;
  float* hist = history + uint64_t{t} * L;
  for (uint32_t i = threadIdx.x; i < L; i += blockDim.x) h[i] = hist[i];
  __syncthreads();
  if (threadIdx.x == 0 && amax) h[0] = fpg::fp8::amax_fold(h[0], amax[t]);  // delayed_record
  __syncthreads();
  uint32_t key = 0;
  if (algo == AmaxAlgo::most_recent) {
    key = fpg::fp8::amax_key(h[0]);
  } else {
    for (uint32_t i = threadIdx.x; i < L; i += blockDim.x) {
      const uint32_t k = fpg::fp8::amax_key(h[i]);
      key = k > key ? k : key;
    }
  }
  key = block_max(key, red);
  if (threadIdx.x == 0) {
    const float s = fpg::fp8::delayed_scale(bits_float(key), scale[t], f, margin);
    scale[t] = s;
    scale_inv[t] = fpg::fp8::scale_inv_of(s);
  }
  // Roll: new[i] = old[i+1], new[L-1] = old[0], new[0] = 0.
  for (uint32_t i = threadIdx.x; i < L; i += blockDim.x) hist[i] = i == 0 ? 0.0f : (i == L - 1 ? h[0] : h[i + 1]);
}

}  // namespace

void delayed_update(const fpg::fp8::DelayedConfig& c, size_t n, const float* amax, float* history, float* scale,
                    float* scale_inv, cudaStream_t stream) {
  if (c.history_len == 0) throw UsageError("fp8: delayed scaling state has an empty amax history");
  if (c.history_len > kMaxHistory)
    throw UsageError("fp8: GPU delayed scaling takes amax histories of at most " + std::to_string(kMaxHistory) +
                     " steps (got " + std::to_string(c.history_len) + ")");
  if (c.margin < -126 || c.margin > 126)
    throw UsageError("fp8: delayed scaling margin " + std::to_string(c.margin) + " is outside [-126, 126]");
  if (n == 0) return;
  const uint32_t L = static_cast<uint32_t>(c.history_len);
  delayed_kernel<<<static_cast<unsigned>(n), kThreads, L * sizeof(float), stream>>>(c.format, c.algo, c.margin, L,
                                                                                     amax, history, scale, scale_inv);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda::fp8
