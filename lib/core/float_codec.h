// Bit-exact encoders and decoders between fp32 and the narrow float formats fpgather stores:
// bf16, fp16, FP8 E4M3 (the "fn" variant: no inf), FP8 E5M2 and E8M0 (the MX scale format).
//
// Every encoder rounds to nearest, ties to even, on the exact fp32 value; subnormals are produced
// (no flush to zero) and the sign of zero is kept. What happens past the largest finite value is the
// caller's choice (Overflow). Worked examples are in tests/unit/float_codec_test.cpp; the
// golden tables in testdata/codecs/ (gen_codec_goldens.py, tests/unit/float_codec_test.cpp) hold every
// encoder and decoder to PyTorch 2.11 CPU `.to()` bit for bit, NaN bits included, except where noted.
//
// NaN outputs. The libraries disagree on NaN bits; each choice below names the one it follows:
//   encode bf16  -> 0x7FC0 (sign dropped): torch's portable c10 path (ATEN_CPU_CAPABILITY=default).
//                   torch's AVX2/AVX-512 kernels give 0xFFFF, CUDA 0x7FFF, ml_dtypes 0x7FC0 | sign.
//   encode fp16  -> sign | 0x7E00 | top 10 mantissa bits: torch (x86 F16C; IEEE: payload cut, quieted).
//                   numpy keeps a signalling NaN signalling; CUDA gives 0x7FFF.
//   encode E4M3 / E5M2, nonsaturating -> 0x7F | sign: torch <= 2.11 .to() (ml_dtypes: E5M2 0x7E | sign).
//   encode E4M3 / E5M2, saturate      -> 0x7F (sign dropped): CUDA cvt.rn.satfinite, Transformer Engine.
//   encode E8M0  -> 0xFF (all rules).
//   decode fp16 / E5M2 -> sign | 0x7FC00000 | payload << 13: torch (quieted; numpy does not quiet).
//   decode E4M3  -> sign | 0x7FF00000: torch (c10 fp8e4m3fn_to_fp32_value; ml_dtypes 0x7FC00000 | sign).
//   decode E8M0  -> 0x7FC00000: ml_dtypes (torch gives the signalling NaN 0x7F800001).
//   decode bf16  -> the bits shifted, payload as is (all libraries).
//
// These functions are FPG_HD: the CUDA kernels call the very same code, so CPU and GPU agree bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/hostdevice.h"

namespace fpg {

// What an encoder does with a finite value beyond the format's range, and with +-inf.
enum class Overflow : uint8_t {
  saturate,       // clamp to +-max finite; +-inf -> +-max (Transformer Engine, CUDA satfinite)
  nonsaturating,  // E4M3 -> NaN, E5M2/fp16/bf16 -> inf (PyTorch <= 2.11 .to(), ml_dtypes, IEEE)
};

FPG_HD uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

FPG_HD float bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

namespace codec_detail {

// m >> sh, rounded to nearest with ties to even. m < 2^24, so a shift of 25 or more gives 0.
FPG_HD uint32_t rne_shift(uint32_t m, uint32_t sh) {
  if (sh == 0) return m;
  if (sh >= 31) return 0;
  const uint32_t q = m >> sh;
  const uint32_t rem = m & ((1u << sh) - 1u);
  const uint32_t half = 1u << (sh - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// The magnitude code of a finite |x| (fp32 bits `a`, sign cleared) in a format with MB mantissa bits
// and exponent bias BIAS, IEEE-style subnormals. The result may exceed the format's max code: the
// caller applies its overflow policy. A mantissa carry rolls into the exponent field by itself.
template <int MB, int BIAS>
FPG_HD uint32_t magnitude_code(uint32_t a) {
  int e = static_cast<int>(a >> 23);
  uint32_t m = a & 0x7FFFFFu;
  if (e == 0) {
    e = 1;
  } else {
    m |= 1u << 23;
  }
  const int ue = e - 127;
  constexpr int emin = 1 - BIAS;
  if (ue < emin) return rne_shift(m, static_cast<uint32_t>(23 + emin - MB - ue));
  const uint32_t q = rne_shift(m, 23 - MB);  // in [2^MB, 2^(MB+1)]
  return (static_cast<uint32_t>(ue + BIAS) << MB) + q - (1u << MB);
}

}  // namespace codec_detail

// ---- FP8 E4M3 (fn): bias 7, max 448 (0x7E), NaN 0x7F/0xFF, no inf --------------------------------

constexpr float kE4M3Max = 448.0f;
constexpr float kE5M2Max = 57344.0f;

FPG_HD uint8_t e4m3_from_float(float x, Overflow policy = Overflow::saturate) {
  const uint32_t u = float_bits(x);
  const uint32_t s = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  const bool sat = policy == Overflow::saturate;
  if (a > 0x7F800000u) return static_cast<uint8_t>(sat ? 0x7Fu : (0x7Fu | s));
  if (a == 0x7F800000u) return static_cast<uint8_t>((sat ? 0x7Eu : 0x7Fu) | s);
  const uint32_t mag = codec_detail::magnitude_code<3, 7>(a);
  if (mag > 0x7Eu) return static_cast<uint8_t>((sat ? 0x7Eu : 0x7Fu) | s);
  return static_cast<uint8_t>(mag | s);
}

FPG_HD float float_from_e4m3(uint8_t b) {
  const uint32_t s = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 0xFu;
  const uint32_t m = b & 0x7u;
  if (e == 0xFu && m == 0x7u) return bits_float(s | 0x7FF00000u);  // torch's NaN: the mantissa bits, quiet
  if (e == 0) return bits_float(s | float_bits(static_cast<float>(m) * 0.001953125f));  // m * 2^-9
  return bits_float(s | ((e - 7u + 127u) << 23) | (m << 20));
}

// ---- FP8 E5M2: bias 15, max 57344 (0x7B), inf 0x7C, NaN 0x7D..0x7F -------------------------------

FPG_HD uint8_t e5m2_from_float(float x, Overflow policy = Overflow::saturate) {
  const uint32_t u = float_bits(x);
  const uint32_t s = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  const bool sat = policy == Overflow::saturate;
  if (a > 0x7F800000u) return static_cast<uint8_t>(sat ? 0x7Fu : (0x7Fu | s));
  if (a == 0x7F800000u) return static_cast<uint8_t>((sat ? 0x7Bu : 0x7Cu) | s);
  const uint32_t mag = codec_detail::magnitude_code<2, 15>(a);
  if (mag > 0x7Bu) return static_cast<uint8_t>((sat ? 0x7Bu : 0x7Cu) | s);
  return static_cast<uint8_t>(mag | s);
}

// ---- fp16 (IEEE binary16) ------------------------------------------------------------------------

FPG_HD uint16_t fp16_from_float(float x, Overflow policy = Overflow::nonsaturating) {
  const uint32_t u = float_bits(x);
  const uint32_t s = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  const bool sat = policy == Overflow::saturate;
  if (a > 0x7F800000u) return static_cast<uint16_t>(0x7E00u | s | ((a >> 13) & 0x3FFu));  // quiet, payload kept
  if (a == 0x7F800000u) return static_cast<uint16_t>((sat ? 0x7BFFu : 0x7C00u) | s);
  const uint32_t mag = codec_detail::magnitude_code<10, 15>(a);
  if (mag > 0x7BFFu) return static_cast<uint16_t>((sat ? 0x7BFFu : 0x7C00u) | s);
  return static_cast<uint16_t>(mag | s);
}

FPG_HD float float_from_fp16(uint16_t h) {
  const uint32_t s = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  if (e == 0x1Fu) return bits_float(s | 0x7F800000u | (m ? 0x400000u | (m << 13) : 0u));  // inf; NaN quieted
  if (e == 0) return bits_float(s | float_bits(static_cast<float>(m) * 5.9604644775390625e-08f));  // m*2^-24
  return bits_float(s | ((e - 15u + 127u) << 23) | (m << 13));
}

// E5M2 is the top byte of an fp16, so it decodes exactly as one.
FPG_HD float float_from_e5m2(uint8_t b) { return float_from_fp16(static_cast<uint16_t>(b << 8)); }

// ---- bf16 ----------------------------------------------------------------------------------------

FPG_HD uint16_t bf16_from_float(float x, Overflow policy = Overflow::nonsaturating) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;
  const uint16_t r = static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  if (policy == Overflow::saturate && (r & 0x7FFFu) == 0x7F80u)
    return static_cast<uint16_t>((r & 0x8000u) | 0x7F7Fu);
  return r;
}

FPG_HD float float_from_bf16(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// ---- E8M0 (unsigned power of two, 2^(e-127); 0xFF is NaN; no zero) -------------------------------

FPG_HD float float_from_e8m0(uint8_t e) {
  if (e == 0xFFu) return bits_float(0x7FC00000u);
  if (e == 0) return bits_float(0x00400000u);  // 2^-127, an fp32 subnormal
  return bits_float(static_cast<uint32_t>(e) << 23);
}

// PyTorch's `.to(torch.float8_e8m0fnu)`: round to nearest on the linear mantissa (a tie rounds up for
// normals), the sign ignored, 0 -> 0x00, inf/NaN -> 0xFF, 2^127 rounding up -> 0xFF.
FPG_HD uint8_t e8m0_from_float(float x) {
  const uint32_t u = float_bits(x);
  uint32_t e = (u >> 23) & 0xFFu;
  if (e == 0xFFu) return 0xFFu;
  const bool g = (u & 0x400000u) != 0;
  const bool r = (u & 0x200000u) != 0;
  const bool s = (u & 0x1FFFFFu) != 0;
  const bool lsb = e > 0;
  if (g && (r || s || lsb)) ++e;
  return static_cast<uint8_t>(e);
}

// Round *up* to a power of two (Transformer Engine / cuBLAS `float_to_e8m0`, the MXFP8 RCEIL rule):
// NaN -> 0xFF, inf -> 0xFE, 0 -> 0x00, saturating at 0xFE. The sign is ignored.
FPG_HD uint8_t e8m0_ceil_from_float(float x) {
  const uint32_t a = float_bits(x) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0xFFu;
  if (a == 0x7F800000u) return 0xFEu;
  uint32_t e = a >> 23;
  const uint32_t m = a & 0x7FFFFFu;
  if ((m > 0 && e != 0xFEu) && !(e == 0 && m <= 0x400000u)) ++e;
  return static_cast<uint8_t>(e);
}

}  // namespace fpg
