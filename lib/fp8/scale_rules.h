// From an amax to a scale: the per-tensor / per-block fp32 rule (TE compute_scale_from_amax,
// common/recipe/recipe_common.cuh) and the two MXFP8 E8M0 rules (OCP MX v1.0 floor; TE/cuBLAS
// round-up). FPG_HD so the CUDA kernels compute the very same scales.
#pragma once

#include <cstdint>

#include "core/float_codec.h"
#include "core/hostdevice.h"
#include "fp8/format.h"

namespace fpg {
namespace fp8 {

constexpr float kFloatMax = 3.40282346638528859812e+38f;  // FLT_MAX
constexpr uint32_t kBf16MaxBits = 0x7F7F0000u;             // bf16 0x7F7F as fp32 bits

FPG_HD bool is_finite_bits(float x) { return (float_bits(x) & 0x7F800000u) != 0x7F800000u; }

// Transformer Engine's compute_scale_from_amax, step by step:
//  1. amax < epsilon -> epsilon (default epsilon 0: no effect);
//  2. amax 0, inf or NaN -> scale 1;
//  3. scale = fp8_max / amax, one fp32 division (correctly rounded, as __fdiv_rn);
//  4. an inf scale (tiny amax) -> value_for_inf: FLT_MAX per tensor, the input type's max per block;
//  5. pow2: truncate the scale to a power of two (bits & 0xFF800000).
FPG_HD float scale_from_amax(float amax, float fp8_max, bool pow2, float epsilon, float value_for_inf) {
  if (amax < epsilon) amax = epsilon;
  if (amax == 0.0f || !is_finite_bits(amax)) return 1.0f;
  float scale = fp8_max / amax;
  if (!is_finite_bits(scale)) scale = value_for_inf;
  if (pow2) scale = bits_float(float_bits(scale) & 0xFF800000u);
  return scale;
}

// scale_inv = 1/scale, an fp32 division (__frcp_rn).
FPG_HD float scale_inv_of(float scale) { return 1.0f / scale; }

// ---- MXFP8 ----------------------------------------------------------------------------------------

// RCEIL (TE, cuBLAS, cuDNN): e = round_up_pow2(amax * fp32(1/fp8_max)); inf -> 0xFE, NaN -> 0xFF.
FPG_HD uint8_t mx_e8m0_rceil(float amax, Format f) {
  return e8m0_ceil_from_float(amax * format_max_rcp(f));
}

// FLOOR (OCP v1.0, torchao, microxcaling): e = floor(log2 amax) - emax_elem, read from the fp32
// exponent field (a zero or subnormal amax counts as 2^-127), clamped to [0, 254] biased; a
// non-finite amax gives 0xFF (the block decodes as NaN, as torchao does).
FPG_HD uint8_t mx_e8m0_floor(float amax, Format f) {
  const uint32_t a = float_bits(amax) & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return 0xFFu;
  const int e = static_cast<int>(a >> 23) - format_emax(f);
  return static_cast<uint8_t>(e < 0 ? 0 : e);  // the top is 254 - emax: never above 254
}

// The multiplier 2^(127-e) that takes x to the FP8 grid of the block (TE exp2f_rcp): bits
// (254-e)<<23, except e=254 -> 2^-127 (0x00400000, an fp32 subnormal), e=255 -> NaN, and e=0 ->
// 2^127. x * exp2f_rcp(e) is exactly x / 2^(e-127), so the FLOOR rule's RNE(x/X) uses it too.
// Written with masks, not selects, so that the per-element use in the columnwise cast vectorises.
// e=254 gives an fp32 subnormal: a kernel that flushes denormals (CUDA -ftz, x86 DAZ) would turn an
// inf block's inf into NaN instead of 448, so these casts must run without flushing.
FPG_HD float mx_exp2f_rcp(uint8_t e) {
  const uint32_t u = e;
  const uint32_t is254 = 0u - (((u ^ 0xFEu) - 1u) >> 31);  // all ones when e == 254
  const uint32_t is255 = 0u - (((u ^ 0xFFu) - 1u) >> 31);  // all ones when e == 255
  const uint32_t normal = ((254u - u) << 23) & ~(is254 | is255);
  return bits_float(normal | (0x00400000u & is254) | (0x7FC00000u & is255));
}

// Dequantisation factor 2^(e-127) (OCP MX v1.0): e=0 -> 2^-127, e=255 -> NaN.
FPG_HD float mx_scale_value(uint8_t e) { return float_from_e8m0(e); }

// One dequantised value, decoded * scale, with the NaN written out: a NaN code gives its own decoded
// NaN (sign kept), else a NaN scale (E8M0 0xFF) gives that NaN. A bare product leaves the choice to
// the hardware (x86 returns one operand's NaN, and which one depends on the operand order the
// compiler picked; CUDA returns a canonical NaN), so CPU and GPU would not agree bit for bit.
FPG_HD float dequant_value(float decoded, float scale) {
  const uint32_t d = float_bits(decoded), s = float_bits(scale);
  if ((d & 0x7FFFFFFFu) > 0x7F800000u) return bits_float(d | 0x00400000u);
  if ((s & 0x7FFFFFFFu) > 0x7F800000u) return bits_float(s | 0x00400000u);
  return decoded * scale;
}

}  // namespace fp8
}  // namespace fpg
