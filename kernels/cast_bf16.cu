// fp32 <-> bf16 cast kernels (kernels/cast_bf16.h): 16-byte loads where the pointers allow, grid-stride.
#include "kernels/cast_bf16.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_launch.h"

namespace fpg::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) f32_to_bf16_kernel(const float* __restrict__ in, uint64_t n,
                                                               uint16_t* __restrict__ out, Overflow policy,
                                                               bool vec) {
  const uint64_t tid = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x, stride = uint64_t{gridDim.x} * blockDim.x;
  uint64_t done = 0;
  if (vec) {
    const uint64_t nv = n / 4;
    for (uint64_t i = tid; i < nv; i += stride) {
      const float4 x = __ldg(reinterpret_cast<const float4*>(in) + i);
      uint2 w;
      w.x = bf16_from_float(x.x, policy) | (uint32_t{bf16_from_float(x.y, policy)} << 16);
      w.y = bf16_from_float(x.z, policy) | (uint32_t{bf16_from_float(x.w, policy)} << 16);
      reinterpret_cast<uint2*>(out)[i] = w;
    }
    done = nv * 4;
  }
  for (uint64_t i = done + tid; i < n; i += stride) out[i] = bf16_from_float(in[i], policy);
}

__global__ void __launch_bounds__(kThreads) bf16_to_f32_kernel(const uint16_t* __restrict__ in, uint64_t n,
                                                               float* __restrict__ out, bool vec) {
  const uint64_t tid = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x, stride = uint64_t{gridDim.x} * blockDim.x;
  uint64_t done = 0;
  if (vec) {
    const uint64_t nv = n / 4;
    for (uint64_t i = tid; i < nv; i += stride) {
      const uint2 w = __ldg(reinterpret_cast<const uint2*>(in) + i);
      float4 x;
      x.x = float_from_bf16(static_cast<uint16_t>(w.x & 0xFFFFu));
      x.y = float_from_bf16(static_cast<uint16_t>(w.x >> 16));
      x.z = float_from_bf16(static_cast<uint16_t>(w.y & 0xFFFFu));
      x.w = float_from_bf16(static_cast<uint16_t>(w.y >> 16));
      reinterpret_cast<float4*>(out)[i] = x;
    }
    done = nv * 4;
  }
  for (uint64_t i = done + tid; i < n; i += stride) out[i] = float_from_bf16(in[i]);
}

unsigned grid_for(const void* kernel, uint64_t n) {
  const uint64_t need = (n / 4 + kThreads) / kThreads;
  const uint64_t most = static_cast<uint64_t>(fp8::persistent_blocks(kernel, kThreads));
  return static_cast<unsigned>(need < most ? need : most);
}

bool aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

void cast_f32_to_bf16(const float* in, uint64_t n, uint16_t* out, cudaStream_t stream, Overflow policy) {
  if (n == 0) return;
  const void* k = reinterpret_cast<const void*>(&f32_to_bf16_kernel);
  f32_to_bf16_kernel<<<grid_for(k, n), kThreads, 0, stream>>>(in, n, out, policy, aligned(in, 16) && aligned(out, 8));
  FPG_CUDA_CHECK_LAUNCH();
}

void cast_bf16_to_f32(const uint16_t* in, uint64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  const void* k = reinterpret_cast<const void*>(&bf16_to_f32_kernel);
  bf16_to_f32_kernel<<<grid_for(k, n), kThreads, 0, stream>>>(in, n, out, aligned(in, 8) && aligned(out, 16));
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda
