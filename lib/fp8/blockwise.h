// Blockwise scaling, 1x128 and 128x128 (DeepSeek-V3 style; TE Float8BlockQuantizer): one
// fp32 scale per block, partial edge blocks allowed (M or K not multiples of 128).
#pragma once

#include <cstdint>

#include "core/hostdevice.h"
#include "fp8/recipe.h"
#include "fp8/scale_rules.h"

namespace fpg {
namespace fp8 {

// The tensorwise rule, except that an inf scale (tiny amax) becomes the input type's max: FLT_MAX
// for fp32 input, bf16 max (0x7F7F) for bf16-valued input (TE value_for_inf, TE#786).
FPG_HD float blockwise_scale(float amax, Format f, bool pow2, float epsilon, Input in) {
  const float inf_value = in == Input::f32 ? kFloatMax : bits_float(kBf16MaxBits);
  return scale_from_amax(amax, format_max(f), pow2, epsilon, inf_value);
}

// Folds the amaxes of fragment [start, start+count) into grid[cell - grid_base] (the caller's
// window of the plan's grid; base 0 for the full grid). `in` holds the fragment's values.
void blockwise_partial_amax(const Plan& p, uint64_t start, uint64_t count, const void* in, float* grid,
                            uint64_t grid_base);

// Casts the fragment with scale[cell] (the full grid) into out[0, count).
void blockwise_cast(const Plan& p, const float* scale, uint64_t start, uint64_t count, const void* in,
                    uint8_t* out);

// out[j] = float(q[j]) * scale_inv[cell of element start+j].
void blockwise_dequant(const Plan& p, const float* scale_inv, uint64_t start, uint64_t count,
                       const uint8_t* q, float* out);

}  // namespace fp8
}  // namespace fpg
