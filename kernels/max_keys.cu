#include "kernels/max_keys.h"

#include "comm/max_key.h"
#include "core/error.h"
#include "kernels/cuda_check.h"

namespace fpg::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535u * 16u ? b : 65535u * 16u);  // grid-stride beyond
}

__global__ void encode_f32(const uint32_t* src, uint32_t* keys, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    keys[i] = comm::max_key_from_f32_bits(src[i]);
}
__global__ void encode_bf16(const uint16_t* src, uint32_t* keys, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    keys[i] = comm::max_key_from_bf16(src[i]);
}
__global__ void decode_f32(const uint32_t* keys, uint32_t* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = comm::f32_bits_from_max_key(keys[i]);
}
__global__ void decode_bf16(const uint32_t* keys, uint16_t* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = comm::bf16_from_max_key(keys[i]);
}

}  // namespace

void encode_max_keys(DType dtype, const void* src, uint32_t* keys, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == DType::F32)
    encode_f32<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const uint32_t*>(src), keys, n);
  else if (dtype == DType::BF16)
    encode_bf16<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const uint16_t*>(src), keys, n);
  else
    throw InternalError("encode_max_keys: dtype is neither F32 nor BF16");
  FPG_CUDA_CHECK_LAUNCH();
}

void decode_max_keys(DType dtype, const uint32_t* keys, void* dst, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == DType::F32)
    decode_f32<<<blocks_for(n), kThreads, 0, stream>>>(keys, static_cast<uint32_t*>(dst), n);
  else if (dtype == DType::BF16)
    decode_bf16<<<blocks_for(n), kThreads, 0, stream>>>(keys, static_cast<uint16_t*>(dst), n);
  else
    throw InternalError("decode_max_keys: dtype is neither F32 nor BF16");
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace fpg::cuda
