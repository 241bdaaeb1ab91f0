// Helpers of the FP8 GPU tests: device buffers and awkward random inputs.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/float_codec.h"
#include "kernels/cuda_check.h"

namespace fpg::gpu_test {

// A device allocation of n elements of T (zeroed), with host copies in and out.
template <class T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) {
    FPG_CUDA_CHECK(cudaMalloc(&p, (n ? n : 1) * sizeof(T)));
    FPG_CUDA_CHECK(cudaMemset(p, 0, (n ? n : 1) * sizeof(T)));
  }
  explicit DevBuf(const std::vector<T>& v) : DevBuf(v.size()) { upload(v); }
  ~DevBuf() { (void)cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void upload(const std::vector<T>& v) {
    if (!v.empty()) FPG_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    FPG_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> v(n);
    if (n) FPG_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  uint64_t below(uint64_t n) { return n ? g() % n : 0; }
  double unit() { return static_cast<double>(g() >> 11) * 0x1p-53; }
};

// fp32 values over a wide range with the awkward ones mixed in: NaN (quiet, signalling, either
// sign), +-inf, fp32 subnormals, +-0, values past every FP8 max, and E4M3/E5M2 rounding ties.
inline std::vector<float> awkward_values(Rng& rng, uint64_t n) {
  std::vector<float> v(n);
  const int style = static_cast<int>(rng.below(3));
  for (uint64_t i = 0; i < n; ++i) {
    const double mag = std::ldexp(1.0 + rng.unit(), static_cast<int>(rng.below(48)) - 24);
    float x = static_cast<float>((rng.below(2) ? -1.0 : 1.0) * mag);
    if (style == 1 && (i / 100) % 3 == 0) x = rng.below(2) ? 0.0f : -0.0f;
    if (style == 2 && (i / 150) % 2 == 0) x = static_cast<float>(x * 1e-38);
    switch (rng.below(400)) {
      case 0: x = bits_float(0x7FC00000u | static_cast<uint32_t>(rng.below(2) << 31)); break;
      case 1: x = bits_float(0x7F800001u + static_cast<uint32_t>(rng.below(0x3FFFFF))); break;  // signalling
      case 2: x = bits_float(0x7F800000u | static_cast<uint32_t>(rng.below(2) << 31)); break;
      case 3: x = bits_float(static_cast<uint32_t>(rng.below(0x800000)) | static_cast<uint32_t>(rng.below(2) << 31)); break;
      case 4: x = rng.below(2) ? 0.0f : -0.0f; break;
      case 5: x = static_cast<float>((rng.below(2) ? -1 : 1) * std::ldexp(1.0, 100)); break;
      case 6: x = 464.0f; break;    // E4M3 tie between 448 and overflow
      case 7: x = 0.0068359375f; break;  // 3.5 * 2^-9: E4M3 subnormal tie
      default: break;
    }
    v[i] = x;
  }
  return v;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

// Index of the first differing element, or -1.
template <class T>
long first_diff(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<long>(i);
  return -1;
}

}  // namespace fpg::gpu_test
