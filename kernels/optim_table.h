// Multi-tensor launch tables shared by the optimizer and grad-norm kernels (host side; include only
// from kernels/*.cu): many tensors of any sizes are cut into equal chunks so one launch with one block
// per chunk balances the work, and descriptor arrays live in device memory owned by a DeviceArray.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda_check.h"

namespace fpg::cuda {

// Elements per block: 16 Ki elements keep ~7 waves of blocks on a 132-SM GPU for a 125M-element
// model, so the last wave's imbalance stays small, and a multiple of 4 keeps float4 chunks aligned.
constexpr int64_t kChunkElems = 16384;

// One block's work: elements [begin, end) of tensor `item`.
struct Chunk {
  int64_t begin = 0;
  int64_t end = 0;
  int32_t item = 0;
};

// Cuts tensors of the given sizes into chunks of at most `chunk` elements (empty tensors get none).
inline std::vector<Chunk> make_chunks(const std::vector<int64_t>& numels, int64_t chunk = kChunkElems) {
  std::vector<Chunk> out;
  for (size_t i = 0; i < numels.size(); ++i)
    for (int64_t b = 0; b < numels[i]; b += chunk)
      out.push_back(Chunk{b, b + chunk < numels[i] ? b + chunk : numels[i], static_cast<int32_t>(i)});
  return out;
}

// A device copy of a host array (cudaMalloc'd, freed on destruction; move-only).
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(const std::vector<T>& host) { assign(host); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : ptr_(o.ptr_), size_(o.size_) { o.ptr_ = nullptr, o.size_ = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~DeviceArray() { cudaFree(ptr_); }  // no throw from a destructor; a failed free only leaks

  void assign(const std::vector<T>& host) {
    if (host.size() != size_) {
      cudaFree(ptr_);
      ptr_ = nullptr;
      size_ = 0;
      if (!host.empty()) FPG_CUDA_CHECK(cudaMalloc(&ptr_, host.size() * sizeof(T)));
      size_ = host.size();
    }
    if (!host.empty()) FPG_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  void resize_zeroed(size_t n) {
    assign(std::vector<T>(n));
  }
  T* get() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace fpg::cuda
