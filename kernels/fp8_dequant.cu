// Dequantisation of a fragment on the GPU (fp8::dequantize_fragment): x = decode(q) * scale_inv, or
// decode(q) * 2^(e-127) for MX, per element with the CPU's FPG_HD decoders and its NaN rule.
#include "fp8/scale_rules.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_device.cuh"
#include "kernels/fp8_launch.h"
#include "kernels/fp8_shard.h"

namespace fpg::cuda::fp8 {
namespace {

using namespace dev;

// a * b with the CPU's NaN rule (x86 SSE/AVX: a NaN operand is returned quieted, the first one if
// both are NaN) instead of the GPU's canonical 0x7FFFFFFF: the decoded FP8 NaN keeps its bits, as in
// the reference's decode-table multiply. (A product of non-NaN operands is never NaN here: the
// decoded value is finite or inf and the scale positive.)
__device__ __forceinline__ float mul_nan_first(float a, float b) {
  const uint32_t ua = float_bits(a), ub = float_bits(b);
  if ((ua & 0x7FFFFFFFu) > 0x7F800000u) return bits_float(ua | 0x00400000u);
  if ((ub & 0x7FFFFFFFu) > 0x7F800000u) return bits_float(ub | 0x00400000u);
  return a * b;
}

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
    out[i] = mul_nan_first(fpg::fp8::decode(f, q[i]), s);
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
