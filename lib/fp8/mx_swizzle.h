// The GEMM layout of MX scales (cuBLAS "block scaling factors layout", TE gemm_swizzled_scale_idx,
// torchao to_blocked): the scale matrix padded to 128x4 tiles, tiles row-major,
// and inside a tile the byte of (r, c) at (r%32)*16 + (r/32)*4 + c. Pads are 0x00 (what TE's zeroed
// amax buffers give), so they are deterministic (TE#3070).
#pragma once

#include <cstdint>
#include <vector>

#include "core/hostdevice.h"
#include "fp8/recipe.h"

namespace fpg {
namespace fp8 {

// Byte offset of scale (r, c) of a matrix padded to n_tiles_x tiles of 4 columns.
FPG_HD uint64_t mx_swizzled_index(uint64_t r, uint64_t c, uint64_t n_tiles_x) {
  return ((r / 128) * n_tiles_x + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
}

// (roundup(rows, 128), roundup(cols, 4)).
GridShape mx_swizzled_shape(GridShape compact);

// compact [rows, cols] row-major -> swizzled, out sized mx_swizzled_shape(...).size().
void mx_swizzle(const uint8_t* compact, uint64_t rows, uint64_t cols, uint8_t* out);
// The inverse (pads dropped).
void mx_unswizzle(const uint8_t* swizzled, uint64_t rows, uint64_t cols, uint8_t* compact);

// The two directions of a plan. Rowwise: the [M, K/32] grid as it is. Columnwise: the compact
// [M/32, K] grid transposed to [K, M/32] first (so n_tiles_x = ceil(M/128)), as cuBLAS reads it.
std::vector<uint8_t> mx_swizzle_rowwise(const Plan& p, const uint8_t* compact_row);
std::vector<uint8_t> mx_swizzle_columnwise(const Plan& p, const uint8_t* compact_col);

}  // namespace fp8
}  // namespace fpg
