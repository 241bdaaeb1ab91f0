// Shared by the device network tests (device_network_test.cpp: fp32, device_network_bf16_test.cpp:
// `--compute bf16`): random inputs, the error measure against a CPU reference, zeroed device
// gradient arrays, a non-blocking stream, and the awkward shapes both run.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "catch.h"
#include "kernels/cuda_check.h"
#include "model/network.h"
#include "optim_device_util.h"

namespace fpg_gpu_test {

inline std::vector<float> normals(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// max |a − b| / max |b| (b the CPU reference), 0 for an all-zero reference equal to a.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

inline float read_float(const float* device) {
  float v = 0;
  FPG_CUDA_CHECK(cudaMemcpy(&v, device, sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

// cudaMemcpy from pageable memory may return before its DMA lands; the tests' streams are
// non-blocking, so wait for the device before they read.
inline void settle() { FPG_CUDA_CHECK(cudaDeviceSynchronize()); }

// Zeroed device gradient arrays of the params' shapes.
struct Grads {
  std::vector<std::unique_ptr<Dev<float>>> bufs;
  explicit Grads(const std::vector<std::vector<float>>& params) {
    for (const auto& p : params) bufs.push_back(std::make_unique<Dev<float>>(std::vector<float>(p.size(), 0.0f)));
  }
  std::vector<float*> ptrs() const {
    std::vector<float*> p;
    for (const auto& b : bufs) p.push_back(b->get());
    return p;
  }
  std::vector<std::vector<float>> host() const {
    std::vector<std::vector<float>> h;
    for (const auto& b : bufs) h.push_back(b->host());
    return h;
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { FPG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
  void sync() const { FPG_CUDA_CHECK(cudaStreamSynchronize(s)); }
};

// Awkward shapes: odd widths, hidden above a block's 256 threads, an MSE over more elements than its
// first pass's grid covers at once (128 × 256), no blocks at all.
struct Shape {
  fpg::model::NetworkDims dims;
  int64_t batch;
};
inline const Shape kAwkwardShapes[] = {
    {{37, 50, 33, 2, 19}, 7},
    {{70, 300, 130, 1, 1100}, 33},
    {{13, 24, 9, 0, 5}, 3},
};

}  // namespace fpg_gpu_test
