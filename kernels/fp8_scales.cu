// The scale pass: one launch turns the combined amax grids of many tensors into their scales
// (fp8/shard.h step 3, the FPG_HD rules of fp8/scale_rules.h, so equal to fp8::compute_scales).
#include "fp8/blockwise.h"
#include "fp8/mxfp8.h"
#include "fp8/tensorwise.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_device.cuh"
#include "kernels/fp8_launch.h"

namespace fpg::cuda::fp8 {
namespace {

using namespace dev;
using fpg::fp8::MxRule;

__global__ void __launch_bounds__(kThreads) scales_kernel(const ScaleJob* __restrict__ jobs,
                                                          const Task* __restrict__ tasks, uint32_t n) {
  for (uint32_t t = blockIdx.x; t < n; t += gridDim.x) {
    const Task task = tasks[t];
    const ScaleJob& j = jobs[task.job];
    const Format f = static_cast<Format>(j.format);
    const MxRule rule = static_cast<MxRule>(j.mx_rule);
    const Scaling sc = static_cast<Scaling>(j.scaling);
    for (uint32_t i = threadIdx.x; i < task.items; i += blockDim.x) {
      const uint64_t c = task.first + i;
      if (c >= j.cells) {
        if (j.e8m0_col) j.e8m0_col[c - j.cells] = fpg::fp8::mx_scale(j.amax_col[c - j.cells], f, rule);
      } else if (sc == Scaling::mxfp8) {
        if (j.e8m0) j.e8m0[c] = fpg::fp8::mx_scale(j.amax[c], f, rule);
      } else {
        const float s = sc == Scaling::tensorwise
                            ? fpg::fp8::tensorwise_scale(j.amax[c], f, j.pow2, j.epsilon)
                            : fpg::fp8::blockwise_scale(j.amax[c], f, j.pow2, j.epsilon, static_cast<Input>(j.input));
        if (j.scale) j.scale[c] = s;
        if (j.scale_inv) j.scale_inv[c] = fpg::fp8::scale_inv_of(s);
      }
    }
  }
}

}  // namespace

void launch_scales(const ScaleJob* jobs, const Task* tasks, uint32_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int blocks = persistent_blocks(reinterpret_cast<const void*>(&scales_kernel), kThreads);
  scales_kernel<<<n < static_cast<uint32_t>(blocks) ? n : blocks, kThreads, 0, stream>>>(jobs, tasks, n);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda::fp8
