#include "fp8/mx_swizzle.h"

namespace fpg {
namespace fp8 {

GridShape mx_swizzled_shape(GridShape c) { return {(c.rows + 127) / 128 * 128, (c.cols + 3) / 4 * 4}; }

void mx_swizzle(const uint8_t* compact, uint64_t rows, uint64_t cols, uint8_t* out) {
  const GridShape padded = mx_swizzled_shape({rows, cols});
  const uint64_t n_tiles_x = padded.cols / 4;
  for (uint64_t i = 0; i < padded.size(); ++i) out[i] = 0;
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) out[mx_swizzled_index(r, c, n_tiles_x)] = compact[r * cols + c];
}

void mx_unswizzle(const uint8_t* swizzled, uint64_t rows, uint64_t cols, uint8_t* compact) {
  const uint64_t n_tiles_x = mx_swizzled_shape({rows, cols}).cols / 4;
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t c = 0; c < cols; ++c) compact[r * cols + c] = swizzled[mx_swizzled_index(r, c, n_tiles_x)];
}

std::vector<uint8_t> mx_swizzle_rowwise(const Plan& p, const uint8_t* compact_row) {
  std::vector<uint8_t> out(mx_swizzled_shape(p.grid).size());
  mx_swizzle(compact_row, p.grid.rows, p.grid.cols, out.data());
  return out;
}

std::vector<uint8_t> mx_swizzle_columnwise(const Plan& p, const uint8_t* compact_col) {
  const uint64_t bands = p.col_grid.rows, K = p.col_grid.cols;
  std::vector<uint8_t> transposed(bands * K);
  for (uint64_t i = 0; i < bands; ++i)
    for (uint64_t k = 0; k < K; ++k) transposed[k * bands + i] = compact_col[i * K + k];
  std::vector<uint8_t> out(mx_swizzled_shape({K, bands}).size());
  mx_swizzle(transposed.data(), K, bands, out.data());
  return out;
}

}  // namespace fp8
}  // namespace fpg
