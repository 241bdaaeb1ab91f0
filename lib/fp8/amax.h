// amax = max |x|, with one explicit NaN rule: NaN never becomes the amax (a NaN element is skipped,
// as fmaxf and __hmax skip it in Transformer Engine, TE#3550). An all-NaN or empty range gives 0.
//
// The reductions work on the bits: for non-NaN values |x| orders like its bit pattern with the sign
// cleared, so a NaN maps to key 0 and the max becomes an integer max that compilers vectorise and
// that no reassociation can change (max is exact and order-free). -0 and +0 both give +0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/float_codec.h"
#include "core/hostdevice.h"
#include "fp8/cast_avx2.h"
#include "fp8/simd.h"
#include "fp8/source.h"

namespace fpg {
namespace fp8 {

// Ordering key of |x|: its bits with the sign cleared, or 0 for NaN.
FPG_HD uint32_t amax_key(float x) {
  const uint32_t a = float_bits(x) & 0x7FFFFFFFu;
  return a > 0x7F800000u ? 0u : a;
}

// Ordering key of |b| for a bf16 value b (raw bits), in the bf16 domain.
FPG_HD uint16_t amax_key_bf16(uint16_t b) {
  const uint16_t a = static_cast<uint16_t>(b & 0x7FFFu);
  return a > 0x7F80u ? uint16_t{0} : a;
}

// max(acc, |x|) with NaN in either argument ignored. The one combine rule for partial amaxes: an
// all-reduce MAX over grids must use it too (or an ordinary max on grids that hold no NaN, which
// is what every function here produces).
FPG_HD float amax_fold(float acc, float x) {
  const uint32_t k = amax_key(x), ka = amax_key(acc);
  return bits_float(k > ka ? k : ka);
}

// ---- host loops (written so that -O2/-O3 vectorise them without -ffast-math) ---------------------

// Ordering key of |load(x)| for each source, as an int (keys are < 2^31).
template <class S>
FPG_FORCE_INLINE int32_t source_key(typename S::T x) {
  if constexpr (std::is_same<S, SrcF32>::value) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const int32_t a = static_cast<int32_t>(u & 0x7FFFFFFFu);
    return a > 0x7F800000 ? 0 : a;
  } else {
    // bf16 bits, as stored or from RNE of fp32; max over bf16 keys of the bf16-rounded values is
    // bf16(max) (rounding is monotonic), so this is the amax of what gets quantized.
    uint16_t b;
    if constexpr (std::is_same<S, SrcBf16>::value) b = x;
    else b = S::bits(x);
    const int32_t a = b & 0x7FFF;
    return a > 0x7F80 ? 0 : a << 16;
  }
}

template <class S>
FPG_FORCE_INLINE float amax_of(const typename S::T* x, size_t n) {
  if constexpr (std::is_same<S, SrcBf16>::value) {
#if FPG_X86_SIMD
    if (n >= 32 && avx2_enabled()) return float_from_bf16(avx2::amax_key_bf16_run(x, n));
#endif
    int16_t m = 0;  // 16-bit lanes: twice the width of the generic loop
    for (size_t i = 0; i < n; ++i) {
      int16_t a = static_cast<int16_t>(x[i] & 0x7FFF);
      a = a > 0x7F80 ? int16_t{0} : a;
      m = a > m ? a : m;
    }
    return float_from_bf16(static_cast<uint16_t>(m));
  } else {
#if FPG_X86_SIMD
    if constexpr (std::is_same<S, SrcF32>::value) {
      if (n >= 32 && avx2_enabled()) return bits_float(avx2::amax_key_f32_run(x, n));
    }
#endif
    int32_t m = 0;  // a signed max is the same and vectorises on plain SSE2
    for (size_t i = 0; i < n; ++i) {
      const int32_t a = source_key<S>(x[i]);
      m = a > m ? a : m;
    }
    return bits_float(static_cast<uint32_t>(m));
  }
}

// dst[i] = max(dst[i], |x[i]|): the columnwise (32x1 block) amax, one grid row per 32 tensor rows.
// dst holds amaxes (non-negative, no NaN), so its bits are its keys.
template <class S>
FPG_FORCE_INLINE void amax_fold_into(float* dst, const typename S::T* x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t d;
    memcpy(&d, dst + i, 4);
    const int32_t a = source_key<S>(x[i]);
    const int32_t di = static_cast<int32_t>(d);
    const uint32_t r = static_cast<uint32_t>(a > di ? a : di);
    memcpy(dst + i, &r, 4);
  }
}

// dst[i] = amax_fold(dst[i], src[i]): what an all-reduce MAX of partial amax grids computes.
inline void combine_max(float* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = amax_fold(dst[i], src[i]);
}

}  // namespace fp8
}  // namespace fpg
