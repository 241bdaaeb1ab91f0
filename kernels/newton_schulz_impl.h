// Internals shared by kernels/newton_schulz.cu and kernels/muon.cu (include only from .cu files): the
// workspace layout, the 32×32 tile kernels that move a matrix between its row-major fp32 form and the
// bf16 X of the iteration (transposing tall matrices) and the normalize-then-iterate core.
#pragma once

#include <cstdint>
#include <memory>

#include "core/float_codec.h"
#include "kernels/cuda_check.h"
#include "kernels/newton_schulz.h"
#include "kernels/optim_table.h"

namespace fpg::cuda {

struct NsWorkspace::Impl {
  int64_t batch = 0, rows = 0, cols = 0, m = 0, n = 0;  // X is m × n, m = min(rows, cols)
  bool tall = false;
  uint16_t* x = nullptr;   // bf16, batch · m · n
  uint16_t* xn = nullptr;  // the next X
  uint16_t* s = nullptr;   // batch · m · m
  uint16_t* bm = nullptr;
  double* partial = nullptr;  // batch · tiles: the per-tile sums of squares of X
  float* norm = nullptr;      // batch
  int64_t tiles_x = 0, tiles_y = 0;
  size_t bytes = 0;
  // cuBLASLt plans of the three GEMMs (S, Bm, X'): Lt takes C and D apart, so b·S and a·X are read
  // from S and X directly. Null when Lt refused a shape: then cublasGemmStridedBatchedEx on a copy.
  std::unique_ptr<struct LtPlans> lt;
  ~Impl();
};

constexpr int kTile = 32, kTileRows = 8;  // 32 × 32 tiles, 32 × 8 threads

FPG_HD float round_bf16(float x) { return float_from_bf16(bf16_from_float(x)); }

// Reads element (r, c) of matrix z (idx = r·cols + c) through `src`, rounds it to bf16 and writes it
// into X (at (c, r) when tall); each block also leaves the double sum of squares of its bf16 values.
template <typename Src>
__global__ void __launch_bounds__(kTile * kTileRows) to_x_kernel(Src src, int64_t rows, int64_t cols, bool tall,
                                                                 uint16_t* __restrict__ x, double* __restrict__ partial) {
  __shared__ float tile[kTile][kTile + 1];
  __shared__ double red[kTile * kTileRows];
  const int tx = threadIdx.x, ty = threadIdx.y, z = blockIdx.z;
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  double ss = 0.0;
  for (int k = ty; k < kTile; k += kTileRows) {
    const int64_t r = r0 + k, c = c0 + tx;
    if (r < rows && c < cols) {
      const float b = round_bf16(src(z, r * cols + c));
      tile[k][tx] = b;
      ss += static_cast<double>(b) * b;
    }
  }
  __syncthreads();
  uint16_t* xz = x + z * rows * cols;
  for (int k = ty; k < kTile; k += kTileRows) {
    if (!tall) {
      const int64_t r = r0 + k, c = c0 + tx;
      if (r < rows && c < cols) xz[r * cols + c] = bf16_from_float(tile[k][tx]);
    } else {
      const int64_t c = c0 + k, r = r0 + tx;  // X row c, column r: consecutive threads, consecutive r
      if (r < rows && c < cols) xz[c * rows + r] = bf16_from_float(tile[tx][k]);
    }
  }
  const int t = ty * kTile + tx;
  red[t] = ss;
  __syncthreads();
  for (int w = kTile * kTileRows / 2; w > 0; w /= 2) {
    if (t < w) red[t] += red[t + w];
    __syncthreads();
  }
  if (t == 0) partial[int64_t(z) * gridDim.x * gridDim.y + blockIdx.y * gridDim.x + blockIdx.x] = red[0];
}

// The inverse move: element (r, c) of matrix z, read from X (at (c, r) when tall) as fp32, goes to
// dst(z, r·cols + c, value).
template <typename Dst>
__global__ void __launch_bounds__(kTile * kTileRows) from_x_kernel(Dst dst, int64_t rows, int64_t cols, bool tall,
                                                                   const uint16_t* __restrict__ x) {
  __shared__ float tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y, z = blockIdx.z;
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const uint16_t* xz = x + z * rows * cols;
  if (tall) {
    for (int k = ty; k < kTile; k += kTileRows) {
      const int64_t c = c0 + k, r = r0 + tx;
      if (r < rows && c < cols) tile[k][tx] = float_from_bf16(xz[c * rows + r]);
    }
    __syncthreads();
  }
  for (int k = ty; k < kTile; k += kTileRows) {
    const int64_t r = r0 + k, c = c0 + tx;
    if (r < rows && c < cols) {
      const float o = tall ? tile[tx][k] : float_from_bf16(xz[r * cols + c]);
      dst(z, r * cols + c, o);
    }
  }
}

inline dim3 tile_grid(const NsWorkspace::Impl& w) {
  return dim3(static_cast<unsigned>(w.tiles_x), static_cast<unsigned>(w.tiles_y), static_cast<unsigned>(w.batch));
}
inline dim3 tile_block() { return dim3(kTile, kTileRows); }

// After to_x_kernel filled ws.x and ws.partial: normalizes X and runs the iterations. The result is
// left in ws.x.
void ns_normalize_and_iterate(NsWorkspace::Impl& ws, const optim::NsOptions& opt, cublasHandle_t blas,
                              cudaStream_t stream);

// UsageError unless the options are ones the GPU path runs (bf16, 0 <= steps < 100).
void check_gpu_ns_options(const optim::NsOptions& opt, const char* who);

}  // namespace fpg::cuda
