// FP8 element formats of the scaling recipes, and the saturating encoders the cast loops use.
//
// Two encoders, one rule. float_codec.h holds the reference (branchy, readable); the `*_satfinite`
// functions here are a branch-light rewrite for the hot loops that compilers vectorise and that CUDA
// kernels can call. They are proven bit-identical to the reference over a dense sample in the default
// tests and over all 2^32 inputs in the `[exhaustive]` test (tests/unit/fp8_format_test.cpp).
//
// The rule is the one of core/float_codec.h with the saturating overflow policy (Transformer Engine,
// CUDA `cvt.rn.satfinite`): RNE, subnormals kept, signed zero kept, finite overflow and +-inf -> +-max,
// NaN -> 0x7F (sign dropped).
#pragma once

#include <cstdint>

#include "core/float_codec.h"
#include "core/hostdevice.h"

namespace fpg {
namespace fp8 {

enum class Format : uint8_t { e4m3, e5m2 };

// Largest finite value: 448 (E4M3) or 57344 (E5M2).
FPG_HD float format_max(Format f) { return f == Format::e4m3 ? kE4M3Max : kE5M2Max; }

// Exponent of the largest power of two below format_max: the MX "emax_elem" (8 or 15).
FPG_HD int format_emax(Format f) { return f == Format::e4m3 ? 8 : 15; }

// fp32(1/format_max), rounded to float as TE's `max_norm_rcp` (0x3B124925 for E4M3).
FPG_HD float format_max_rcp(Format f) {
  return f == Format::e4m3 ? bits_float(0x3B124925u) : bits_float(0x37924925u);
}

// Branch-free E4M3 satfinite encoder. Normal targets round the fp32 mantissa to 3 bits in the
// integer domain: adding 0x7FFFF + lsb and shifting is RNE, and a carry rolls into the exponent
// field (448 + 1/2 ulp ties to 0x7E; beyond it the clamp saturates). Subnormal targets
// (|x| < 2^-6) are rounded by the FPU itself: 2^14 + |x| has an ulp of 2^-9, the E4M3 subnormal
// quantum, and the add is RNE on the exact value (so no double rounding). Flush-to-zero cannot change
// the result: an fp32-subnormal |x| encodes as 0 either way, and the sum itself is normal.
FPG_HD uint8_t e4m3_satfinite(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  const uint32_t s = (u >> 24) & 0x80u;
  // Both paths run for every element and are summed under masks (the other path gives 0): with a
  // select, compilers sink the fp add into a branch that they may not speculate back
  // (-ftrapping-math), and the loop no longer vectorises. small = all ones when |x| < 2^-6.
  const uint32_t small = 0u - ((a - 0x3C800000u) >> 31);
  const uint32_t sub = float_bits(bits_float(a & small) + 16384.0f) - 0x46800000u;
  const uint32_t normal = ~small & (((a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20) - 0x3C0u);
  uint32_t mag = sub + normal;
  mag = mag > 0x7Eu ? 0x7Eu : mag;
  const uint32_t nan = 0u - ((0x7F800000u - a) >> 31);  // all ones for NaN (masked: see above)
  return static_cast<uint8_t>(((mag | s) & ~nan) | (0x7Fu & nan));
}

// Branch-free E5M2 satfinite encoder; same construction (2 mantissa bits, bias 15, quantum 2^-16).
FPG_HD uint8_t e5m2_satfinite(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  const uint32_t s = (u >> 24) & 0x80u;
  const uint32_t small = 0u - ((a - 0x38800000u) >> 31);  // all ones when |x| < 2^-14
  const uint32_t sub = float_bits(bits_float(a & small) + 128.0f) - 0x43000000u;
  const uint32_t normal = ~small & (((a + 0xFFFFFu + ((a >> 21) & 1u)) >> 21) - 0x1C0u);
  uint32_t mag = sub + normal;
  mag = mag > 0x7Bu ? 0x7Bu : mag;
  const uint32_t nan = 0u - ((0x7F800000u - a) >> 31);  // all ones for NaN (masked: see above)
  return static_cast<uint8_t>(((mag | s) & ~nan) | (0x7Fu & nan));
}

FPG_HD uint8_t encode_satfinite(Format f, float x) {
  return f == Format::e4m3 ? e4m3_satfinite(x) : e5m2_satfinite(x);
}

FPG_HD float decode(Format f, uint8_t b) {
  return f == Format::e4m3 ? float_from_e4m3(b) : float_from_e5m2(b);
}

}  // namespace fp8
}  // namespace fpg
