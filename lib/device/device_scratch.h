// Grow-only device scratch of T (cudaMalloc'd, freed on destruction) for the device network's
// per-instance buffers: reserved once for the largest micro-batch, then reused. Include only from
// translation units built with FPGATHER_HAVE_CUDA.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda_check.h"

namespace fpg::device {

template <typename T>
class DeviceScratch {
 public:
  DeviceScratch() = default;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  DeviceScratch(DeviceScratch&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  ~DeviceScratch() { cudaFree(ptr_); }  // no throw from a destructor; a failed free only leaks

  // At least n elements; the old contents are dropped when it grows (cudaFree synchronizes the device).
  void reserve(size_t n) {
    if (n <= size_) return;
    cudaFree(ptr_);
    ptr_ = nullptr;
    size_ = 0;
    FPG_CUDA_CHECK(cudaMalloc(&ptr_, n * sizeof(T)));
    size_ = n;
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace fpg::device
