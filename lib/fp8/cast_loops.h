// The inner loops of every recipe: contiguous runs of high-precision values (read through a source
// policy of source.h) multiplied by an fp32 scale and encoded with the branch-free satfinite
// encoders of format.h, and the matching decode loops. Templates on the format and the source, so
// that each loop body is a straight line that the compiler vectorises.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/float_codec.h"
#include "fp8/cast_avx2.h"
#include "fp8/format.h"
#include "fp8/recipe.h"
#include "fp8/scale_rules.h"
#include "fp8/simd.h"
#include "fp8/source.h"

namespace fpg {
namespace fp8 {

template <Format F>
FPG_HD uint8_t encode(float x) {
  if constexpr (F == Format::e4m3) {
    return e4m3_satfinite(x);
  } else {
    return e5m2_satfinite(x);
  }
}

// out[i] = fp8(float(x[i]) * scale): the fp32 multiply, then RNE satfinite. Input and output never
// overlap (restrict: no run-time alias checks in the short per-block calls). The AVX2 kernel takes
// the whole 32-element groups where it may; the portable loop does the rest.
template <Format F, class S>
FPG_FORCE_INLINE void cast_run(const typename S::T* __restrict x, size_t n, float scale, uint8_t* __restrict out) {
#if FPG_X86_SIMD
  if (n >= 32 && avx2_enabled()) {
    // A large output is streamed; the few values before its first 32-byte boundary go the portable way.
    const bool stream = n >= avx2::kStreamMinBytes;
    if (stream) {
      const size_t head = (32 - reinterpret_cast<uintptr_t>(out) % 32) % 32;
      for (size_t i = 0; i < head; ++i) out[i] = encode<F>(S::load(x[i]) * scale);
      x += head;
      out += head;
      n -= head;
    }
    const size_t done = avx2::cast_groups<F, S>(x, n, scale, out, stream);
    x += done;
    out += done;
    n -= done;
  }
#endif
  for (size_t i = 0; i < n; ++i) out[i] = encode<F>(S::load(x[i]) * scale);
}

// MX columnwise: each element has its own E8M0 scale byte (its column's block in this band).
template <Format F, class S>
FPG_FORCE_INLINE void cast_run_e8m0(const typename S::T* __restrict x, size_t n, const uint8_t* __restrict e,
                                    uint8_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = encode<F>(S::load(x[i]) * mx_exp2f_rcp(e[i]));
}

// out[i] = fp8(float(x[i]) * mult[i]): a per-element multiplier row (MX columnwise, cached per band).
template <Format F, class S>
FPG_FORCE_INLINE void cast_run_mul(const typename S::T* __restrict x, size_t n, const float* __restrict mult,
                                   uint8_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = encode<F>(S::load(x[i]) * mult[i]);
}

// 256-entry decode table, so dequantisation is a lookup and a multiply.
struct DecodeTable {
  float v[256];
  explicit DecodeTable(Format f) {
    for (int b = 0; b < 256; ++b) v[b] = decode(f, static_cast<uint8_t>(b));
  }
};
const DecodeTable& decode_table(Format f);

// out[i] = float(q[i]) * scale_inv.
FPG_FORCE_INLINE void dequant_run(const DecodeTable& t, const uint8_t* q, size_t n, float scale_inv, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = dequant_value(t.v[q[i]], scale_inv);
}

FPG_FORCE_INLINE void dequant_run_e8m0(const DecodeTable& t, const uint8_t* q, size_t n, const uint8_t* e, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = dequant_value(t.v[q[i]], mx_scale_value(e[i]));
}

}  // namespace fp8
}  // namespace fpg
