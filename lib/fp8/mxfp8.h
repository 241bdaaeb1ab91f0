// MXFP8 (OCP MX v1.0; TE MXFP8Quantizer): 32-element blocks with one E8M0 scale
// each, rowwise (1x32 along K) and/or columnwise (32x1 along the flattened leading dim; the data
// keeps the input's shape). Scale grids here are compact: rowwise [M, K/32], columnwise [M/32, K];
// mx_swizzle.h converts them to the GEMM layout.
#pragma once

#include <cstdint>

#include "core/hostdevice.h"
#include "fp8/recipe.h"
#include "fp8/scale_rules.h"

namespace fpg {
namespace fp8 {

FPG_HD uint8_t mx_scale(float amax, Format f, MxRule rule) {
  return rule == MxRule::rceil ? mx_e8m0_rceil(amax, f) : mx_e8m0_floor(amax, f);
}

// Folds the fragment's block amaxes into row[cell - row_base] (rowwise grid window) and
// col[cell - col_base] (columnwise grid window). A direction the plan lacks is skipped (its
// pointer may be null).
void mx_partial_amax(const Plan& p, uint64_t start, uint64_t count, const void* in, float* row,
                     uint64_t row_base, float* col, uint64_t col_base);

// Casts the fragment with the full compact E8M0 grids into out_row[0, count) and out_col[0, count).
void mx_cast(const Plan& p, const uint8_t* e8m0_row, const uint8_t* e8m0_col, uint64_t start,
             uint64_t count, const void* in, uint8_t* out_row, uint8_t* out_col);

// One pass for fragments made of whole rowwise blocks (start and count multiples of 32): each
// block's amax (to amax_row, the full grid, when not null), its E8M0 byte (to e8m0_row, the full
// grid) and its elements together. Equal to mx_partial_amax + scales + mx_cast for such fragments,
// but reads the input once instead of twice.
void mx_quantize_rowwise_fused(const Plan& p, uint64_t start, uint64_t count, const void* in,
                               float* amax_row, uint8_t* e8m0_row, uint8_t* out_row);

// out[j] = float(q[j]) * 2^(e-127), with e from the rowwise or the columnwise grid.
void mx_dequant(const Plan& p, const uint8_t* e8m0, bool columnwise, uint64_t start, uint64_t count,
                const uint8_t* q, float* out);

}  // namespace fp8
}  // namespace fpg
