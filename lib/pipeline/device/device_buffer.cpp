#include "pipeline/device/device_buffer.h"

#if defined(FPGATHER_HAVE_CUDA)

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda_check.h"

namespace fpg::device {

DeviceBuffer::DeviceBuffer(size_t bytes, cudaStream_t stream) : bytes_(bytes) {
  if (bytes == 0) return;
  FPG_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  FPG_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, bytes, stream));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) (void)cudaFree(ptr_);  // no throw from a destructor; a failed free only leaks
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  FPG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
  FPG_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  FPG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
  FPG_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
