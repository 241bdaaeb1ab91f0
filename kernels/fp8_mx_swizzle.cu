// The MX scale GEMM layout on the GPU (fp8/mx_swizzle.h): one thread per byte of the padded
// 128x4-tile matrix, through the FPG_HD mx_swizzled_index; pads are 0.
#include "fp8/mx_swizzle.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_shard.h"

namespace fpg::cuda::fp8 {
namespace {

// Logical matrix [rows, cols]; element (r, c) is src[r * rs + c * cs].
__global__ void swizzle_kernel(const uint8_t* __restrict__ src, uint64_t rows, uint64_t cols, uint64_t rs,
                               uint64_t cs, uint64_t padded_rows, uint64_t padded_cols, uint8_t* __restrict__ out) {
  const uint64_t n = padded_rows * padded_cols, tiles_x = padded_cols / 4;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += uint64_t{gridDim.x} * blockDim.x) {
    const uint64_t r = i / padded_cols, c = i % padded_cols;
    out[fpg::fp8::mx_swizzled_index(r, c, tiles_x)] = (r < rows && c < cols) ? src[r * rs + c * cs] : uint8_t{0};
  }
}

void launch(const uint8_t* src, uint64_t rows, uint64_t cols, uint64_t rs, uint64_t cs, uint8_t* out,
            cudaStream_t stream) {
  const fpg::fp8::GridShape padded = fpg::fp8::mx_swizzled_shape({rows, cols});
  if (padded.size() == 0) return;
  const uint64_t blocks = (padded.size() + 255) / 256;
  swizzle_kernel<<<static_cast<unsigned>(blocks < 65535 * 4 ? blocks : 65535 * 4), 256, 0, stream>>>(
      src, rows, cols, rs, cs, padded.rows, padded.cols, out);
  FPG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void mx_swizzle_rowwise(const Plan& p, const uint8_t* compact_row, uint8_t* out, cudaStream_t stream) {
  launch(compact_row, p.grid.rows, p.grid.cols, p.grid.cols, 1, out, stream);
}

void mx_swizzle_columnwise(const Plan& p, const uint8_t* compact_col, uint8_t* out, cudaStream_t stream) {
  // [M/32, K] compact, read as its transpose [K, M/32].
  launch(compact_col, p.col_grid.cols, p.col_grid.rows, 1, p.col_grid.cols, out, stream);
}

}  // namespace fpg::cuda::fp8
