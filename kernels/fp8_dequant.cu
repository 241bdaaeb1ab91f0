// Dequantisation of a fragment on the GPU (fp8::dequantize_fragment): x = decode(q) * scale_inv, or
// decode(q) * 2^(e-127) for MX, per element with the CPU's FPG_HD decoders and NaN rule (dequant_value).
#include "fp8/scale_rules.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_device.cuh"
#include "kernels/fp8_launch.h"
#include "kernels/fp8_shard.h"

namespace fpg::cuda::fp8 {
namespace {

using namespace dev;

__global__ void __launch_bounds__(kThreads) dequant_kernel(DeviceJob j, const float* __restrict__ scale_inv,
                                                           bool columnwise, const uint8_t* __restrict__ q,
                                                           float* __restrict__ out) {
  const Format f = static_cast<Format>(j.format);
  const bool mx = j.scaling == static_cast<uint8_t>(Scaling::mxfp8);
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < j.count; i += stride) {
    uint64_t r, c;
    divmod(j.start + i, j.K, r, c);
    float s;
    if (mx && columnwise) s = fpg::fp8::mx_scale_value(j.e8m0_col[(r >> 5) * j.K + c]);
    else if (mx) s = fpg::fp8::mx_scale_value(j.e8m0[main_cell(j, r, c)]);
    else s = scale_inv[main_cell(j, r, c)];
    out[i] = fpg::fp8::dequant_value(fpg::fp8::decode(f, q[i]), s);
  }
}

}  // namespace

void dequantize_fragment(const Plan& p, const ScaleView& s, uint64_t start, uint64_t count, const uint8_t* q,
                         float* out, bool columnwise, cudaStream_t stream) {
  const DeviceJob j = make_device_job(p, start, count, nullptr, nullptr, nullptr, s, nullptr, nullptr);
  if (count == 0) return;
  const int blocks = persistent_blocks(reinterpret_cast<const void*>(&dequant_kernel), kThreads);
  const uint64_t need = (count + kThreads - 1) / kThreads;
  dequant_kernel<<<need < static_cast<uint64_t>(blocks) ? static_cast<int>(need) : blocks, kThreads, 0, stream>>>(
      j, s.scale_inv, columnwise, q, out);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda::fp8
