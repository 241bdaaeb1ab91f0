// Where each element's amax and scale live: the map from flat element index to grid cell, and the
// walks over a flat fragment [start, start+count) that the amax and cast loops share.
//
// Every grid is row-major and "banded": one grid row covers `band_rows` tensor rows, one cell covers
// `block_cols` columns of them. The cell of element (r, c) is (r / band_rows) * cols + c / block_cols.
//   per tensor      band M,   block K   (one cell)
//   128x128         band 128, block 128
//   1x128           band 1,   block 128
//   MX rowwise      band 1,   block 32
//   MX columnwise   band 32,  block 1   (compact [M/32, K], not transposed)
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/hostdevice.h"
#include "fp8/recipe.h"
#include "fp8/simd.h"

namespace fpg {
namespace fp8 {

struct GridMap {
  uint64_t band_rows = 1;
  uint64_t block_cols = 1;
  uint64_t cols = 1;
};

FPG_HD uint64_t cell_of(const GridMap& g, uint64_t r, uint64_t c) {
  return (r / g.band_rows) * g.cols + c / g.block_cols;
}

// The main grid's map (per tensor, blockwise or MX rowwise) and the MX columnwise map.
inline GridMap grid_map(const Plan& p) {
  const uint64_t M = std::max<uint64_t>(p.M, 1), K = std::max<uint64_t>(p.K, 1);
  switch (p.recipe.scaling) {
    case Scaling::tensorwise:
    case Scaling::delayed: return {M, K, 1};
    case Scaling::blockwise_1x128: return {1, 128, p.grid.cols};
    case Scaling::blockwise_128x128: return {128, 128, p.grid.cols};
    case Scaling::mxfp8: return {1, 32, p.grid.cols};
  }
  return {};
}

inline GridMap col_grid_map(const Plan& p) { return {32, 1, p.K}; }

// A half-open range of flat cell indices.
struct CellRange {
  uint64_t begin = 0, end = 0;
  uint64_t size() const { return end - begin; }
};

// The cells a fragment can touch, as one range: within one tensor row exactly its cells, otherwise
// whole grid rows from the band of its first element to the band of its last. Partial amaxes of
// disjoint ranges never interfere; a reduction may send only these.
inline CellRange touched_cells(const GridMap& g, uint64_t K, uint64_t start, uint64_t count) {
  if (count == 0 || K == 0) return {};
  const uint64_t r0 = start / K, r1 = (start + count - 1) / K;
  if (r0 == r1) {
    const uint64_t c0 = start % K;
    return {cell_of(g, r0, c0), cell_of(g, r0, c0 + count - 1) + 1};
  }
  return {(r0 / g.band_rows) * g.cols, (r1 / g.band_rows + 1) * g.cols};
}

// Calls fn(offset, len, r, c) for each piece of [start, start+count) that lies in one tensor row:
// elements offset..offset+len-1 of the fragment are (r, c)..(r, c+len-1).
template <class Fn>
FPG_FORCE_INLINE void for_each_row_piece(uint64_t K, uint64_t start, uint64_t count, Fn&& fn) {
  if (count == 0 || K == 0) return;
  uint64_t r = start / K, c = start % K, off = 0;
  while (off < count) {
    const uint64_t len = std::min(count - off, K - c);
    fn(off, len, r, c);
    off += len;
    c = 0;
    ++r;
  }
}

// Calls fn(offset, len, cell) for each piece of [start, start+count) that lies in one row and one
// cell of the grid (a run of up to block_cols elements sharing one scale).
template <class Fn>
FPG_FORCE_INLINE void for_each_cell_run(const GridMap& g, uint64_t K, uint64_t start, uint64_t count,
                                        Fn&& fn) {
  for_each_row_piece(K, start, count, [&](uint64_t off, uint64_t len, uint64_t r, uint64_t c) {
    const uint64_t end = c + len;
    uint64_t cell = (r / g.band_rows) * g.cols + c / g.block_cols;  // one division per row piece
    uint64_t boundary = (c / g.block_cols + 1) * g.block_cols;
    while (c < end) {
      const uint64_t run = (end < boundary ? end : boundary) - c;
      fn(off, run, cell);
      off += run;
      c += run;
      ++cell;
      boundary += g.block_cols;
    }
  });
}

}  // namespace fp8
}  // namespace fpg
