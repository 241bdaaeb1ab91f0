// Helpers of the optimizer GPU tests: a device copy of a host vector, and bitwise comparison where any
// NaN equals any NaN (the GPU writes the canonical NaN, x86 keeps the input's payload; both follow
// from the same math, only the payload bits differ).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda_check.h"

namespace fpg_gpu_test {

template <typename T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& h) : n_(h.size()) {
    FPG_CUDA_CHECK(cudaMalloc(&p_, (n_ ? n_ : 1) * sizeof(T)));
    if (n_) FPG_CUDA_CHECK(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* get() const { return p_; }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    if (n_) FPG_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

inline uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// Elements whose bits differ (NaN vs NaN counts as equal).
inline size_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  size_t bad = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    bad += !(bits(a[i]) == bits(b[i]) || (a[i] != a[i] && b[i] != b[i]));
  return bad;
}

}  // namespace fpg_gpu_test
