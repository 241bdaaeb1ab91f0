// A tensor whose leading dimensions stack independent matrices, as MoE layers store their experts
// ([E, R, C], or [L, E, R, C]): every [R, C] matrix is quantized on its own with the recipe, and
// the scale grids are stacked along the same leading ("expert") dimensions, the layout DeepSeek-V3,
// vLLM and transformers' FP8 experts read:
//   tensorwise       [E...]                          one scale per matrix
//   blockwise        [E..., ceil(R/128), ceil(C/128)]  128x128 blocks never span two matrices
//   blockwise-1x128  [E..., R, ceil(C/128)]
//   mxfp8            [E..., R, C/32]                 (the same bytes as one matrix: MX blocks are rowwise)
// With no expert dimensions this is the plain Plan of the whole tensor (M = product of the leading
// dimensions), so one code path serves both.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "fp8/recipe.h"
#include "fp8/shard.h"

namespace fpg {
namespace fp8 {

struct StackedPlan {
  Plan matrix;                         // one matrix: its geometry and scale grid
  std::vector<uint64_t> expert_shape;  // the stacking dimensions; empty: the tensor is one matrix

  uint64_t matrices() const;
  uint64_t numel() const { return matrices() * matrix.numel(); }
  uint64_t cells() const { return matrices() * matrix.grid.size(); }  // scale cells in all
};

// `expert_dims` leading dimensions of `shape` stack matrices of its last two dimensions; 0 gives
// the whole-tensor plan. UsageError naming `name` when the shape has fewer than expert_dims + 2
// dimensions (expert_dims > 0) or the recipe cannot take a matrix (make_plan's reasons).
StackedPlan make_stacked_plan(const Recipe& r, Input in, const std::vector<uint64_t>& shape, size_t expert_dims,
                              std::string_view name = {});

// NAME_scale_inv's shape: expert_shape followed by the matrix's scale_inv_shape (quantize.h).
std::vector<uint64_t> scale_inv_shape(const StackedPlan& p);

// The view of matrix `m`'s scales inside the stacked grids `all` (rowwise grids only).
ScaleView matrix_scales(const StackedPlan& p, const ScaleView& all, uint64_t m);

// dequantize_fragment over the stacked tensor: fragment [start, start+count) may cross matrices.
void dequantize_stacked(const StackedPlan& p, const ScaleView& all, uint64_t start, uint64_t count,
                        const uint8_t* q, float* out);

}  // namespace fp8
}  // namespace fpg
