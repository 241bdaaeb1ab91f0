// Device memory owned by host code in lib/pipeline/device: cudaMalloc'd bytes of the current device, zeroed on
// a stream at allocation, freed on destruction; and host <-> device copies ordered on a stream that
// return when complete, for construction and the host copies a pipeline hands out (tests,
// checkpoints). Stream-ordered on purpose: the nccl ranks' streams are non-blocking, so plain
// cudaMemcpy/cudaMemset would not be ordered with their work. Plain C++: no CUDA headers.
#pragma once

#if defined(FPGATHER_HAVE_CUDA)

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/stream.h"

namespace fpg::device {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Zeroed by a memset enqueued on `stream`; 0 bytes: no allocation (get() is null).
  DeviceBuffer(size_t bytes, cudaStream_t stream);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

  void* get() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Copies enqueued on `stream` after its pending work; they return once `stream` is idle.
void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream);

template <class T>
std::vector<T> download(const T* src, size_t n, cudaStream_t stream) {
  std::vector<T> out(n);
  if (n) copy_to_host(out.data(), src, n * sizeof(T), stream);
  return out;
}

}  // namespace fpg::device

#endif  // FPGATHER_HAVE_CUDA
