// A fixed-order block sum in double for the network kernels: the tree's shape depends only on the
// block size, so a sum is the same bits on every run.
#pragma once

#include <cstdint>

namespace fpg::cuda {

inline constexpr int kNetThreads = 256;  // threads per block of every network kernel (a power of 2)

// Every thread passes its partial; thread 0 gets the block's sum. sh: kNetThreads doubles of shared
// memory. Ends with a barrier, so sh may be reused.
__device__ inline double block_sum(double v, double* sh) {
  const int tid = static_cast<int>(threadIdx.x);
  sh[tid] = v;
  __syncthreads();
  for (int s = kNetThreads / 2; s > 0; s >>= 1) {
    if (tid < s) sh[tid] += sh[tid + s];
    __syncthreads();
  }
  const double total = sh[0];
  __syncthreads();
  return total;
}

// Blocks for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kNetThreads - 1) / kNetThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 8192 ? 8192 : blocks));
}

}  // namespace fpg::cuda
