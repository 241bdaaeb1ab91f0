// Per-tensor scaling (TE Float8CurrentScaling): one scale for the whole tensor, from the
// tensor's amax. The same contiguous loops serve delayed scaling, whose scale comes from a history.
#pragma once

#include <cstdint>

#include "core/hostdevice.h"
#include "fp8/recipe.h"
#include "fp8/scale_rules.h"

namespace fpg {
namespace fp8 {

// scale = fp8_max / amax with TE's edge rules; an inf scale becomes FLT_MAX.
FPG_HD float tensorwise_scale(float amax, Format f, bool pow2, float epsilon) {
  return scale_from_amax(amax, format_max(f), pow2, epsilon, kFloatMax);
}

// NaN-ignoring max |x| of n contiguous values (fp32 or bf16 bits, per `in`).
float amax_contiguous(Input in, const void* x, uint64_t n);

// out[i] = satfinite_RNE(float(x[i]) * scale) for n contiguous values.
void cast_contiguous(Format f, Input in, const void* x, uint64_t n, float scale, uint8_t* out);

// out[i] = float(q[i]) * scale_inv.
void dequant_contiguous(Format f, const uint8_t* q, uint64_t n, float scale_inv, float* out);

}  // namespace fp8
}  // namespace fpg
