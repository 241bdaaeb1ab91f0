#include "kernels/device.h"

#include <cuda_runtime.h>

#include <cstdio>

namespace fpg::cuda {

int device_count() {
  int n = 0;
  // No driver or no device is an answer (zero), not an error.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_description(int d) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, d) != cudaSuccess) return "";
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f", static_cast<double>(p.totalGlobalMem) / (1u << 30));
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " + mem +
         " GiB)";
}

}  // namespace fpg::cuda
