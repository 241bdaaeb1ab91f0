// The shard-aware quantization API, the heart of the distributed copy-back (as TE's
// quantize_master_weights, pytorch/tensor/utils.py). For a tensor (Plan) and a flat fragment
// [start, start+count) of it:
//
//   1. partial_amax    fold the fragment's amaxes into a full-size, zero-initialised amax grid
//                      (one cell per tensor / per block / per MX block, rowwise and columnwise);
//   2. combine         elementwise MAX of the partial grids of all fragments (AmaxGrid::combine here,
//                      or an all-reduce MAX across ranks; NaN never enters a grid);
//   3. compute_scales  scales and scale_inv (fp32) or E8M0 bytes from the combined grid;
//   4. cast_fragment   quantize only the fragment, into the fragment's slice of the output.
//
// Every step is deterministic and the scale of an element depends only on the combined amax of its
// block, so any split of [0, numel) into fragments gives the bytes of the full-tensor quantization,
// which is exactly the single fragment [0, numel) (tests/unit/fp8_shard_test.cpp).
//
// `in` always points at the fragment's first value (element `start` of the tensor), in the plan's
// input type (fp32, bf16 raw bits, or fp32 read as bf16(x)); `out`/`out_col` at the fragment's
// first output byte.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8/recipe.h"
#include "fp8/scale_grid.h"

namespace fpg {
namespace fp8 {

// Full-size amax grids of one tensor, zero-filled.
struct AmaxGrid {
  std::vector<float> row;  // plan.grid (per tensor, per block, or MX rowwise)
  std::vector<float> col;  // plan.col_grid (MX columnwise), else empty
  AmaxGrid() = default;
  explicit AmaxGrid(const Plan& p);
  // Elementwise MAX (amax_fold): what an all-reduce MAX of the partial grids computes.
  void combine(const AmaxGrid& other);
};

// Non-owning view of a tensor's full scale grids, what casts and dequantisation read.
struct ScaleView {
  const float* scale = nullptr;       // per cell: q = fp8(x * scale)   (tensorwise, delayed, blockwise)
  const float* scale_inv = nullptr;   // per cell: x ~ float(q) * scale_inv
  const uint8_t* e8m0 = nullptr;      // MX rowwise, compact [M, K/32]
  const uint8_t* e8m0_col = nullptr;  // MX columnwise, compact [M/32, K]
};

// Owning scale grids of one tensor.
struct Scales {
  std::vector<float> scale, scale_inv;    // plan.grid cells (not MX)
  std::vector<uint8_t> e8m0, e8m0_col;    // plan.grid / plan.col_grid cells (MX)
  ScaleView view() const;
};

// ---- 1. partial amax ------------------------------------------------------------------------------

// Folds the amaxes of fragment [start, start+count) into the full grids amax (plan.grid.size()
// floats) and amax_col (plan.col_grid.size(); null when the plan has no columnwise grid). Grids
// start at 0; folding several fragments into one grid is the same as combining their grids.
void partial_amax(const Plan& p, uint64_t start, uint64_t count, const void* in, float* amax,
                  float* amax_col);
void partial_amax(const Plan& p, uint64_t start, uint64_t count, const void* in, AmaxGrid& grid);

// The grid cells a fragment can touch (whole grid rows of its bands): the part of the grid its
// partial amax can change. Useful for windows (batch.h) and for reducing only what changed.
CellRange touched_row_cells(const Plan& p, uint64_t start, uint64_t count);
CellRange touched_col_cells(const Plan& p, uint64_t start, uint64_t count);

// partial_amax into windows: row[cell - row_range.begin] for cells in row_range, likewise col. The
// ranges must contain touched_*_cells(p, start, count).
void partial_amax_window(const Plan& p, uint64_t start, uint64_t count, const void* in, float* row,
                         CellRange row_range, float* col, CellRange col_range);

// ---- 3. scales ------------------------------------------------------------------------------------

// From combined grids to scales: scale/scale_inv (plan.grid cells) for per-tensor and blockwise
// plans, e8m0/e8m0_col for MX. Unused outputs may be null. Delayed plans take their scale from a
// DelayedState instead (delayed.h) and throw UsageError here.
void compute_scales(const Plan& p, const float* amax, const float* amax_col, float* scale, float* scale_inv,
                    uint8_t* e8m0, uint8_t* e8m0_col);
Scales compute_scales(const Plan& p, const AmaxGrid& grid);

// ---- 4. cast --------------------------------------------------------------------------------------

// Quantizes fragment [start, start+count) into out[0, count) (rowwise / the tensor's data) and, for
// MX columnwise plans, out_col[0, count). Writes nothing outside the fragment.
void cast_fragment(const Plan& p, const ScaleView& s, uint64_t start, uint64_t count, const void* in,
                   uint8_t* out, uint8_t* out_col);

// Dequantizes fragment [start, start+count) of the rowwise data (or, with columnwise, of the MX
// columnwise data) into fp32: float(q) * scale_inv, or float(q) * 2^(e-127) for MX.
void dequantize_fragment(const Plan& p, const ScaleView& s, uint64_t start, uint64_t count,
                         const uint8_t* q, float* out, bool columnwise = false);

}  // namespace fp8
}  // namespace fpg
