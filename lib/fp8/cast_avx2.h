// AVX2 kernels of the cast loops: the per-element math of format.h's satfinite encoders, 32
// elements per step (4 vectors of 8 fp32 lanes in, one 32-byte store out), bit for bit. The scalar
// encoders stay the reference and the fallback; tests/unit/fp8_format_test.cpp holds these kernels
// to them over all 2^32 fp32 inputs. x86-64 GCC/Clang host builds only; callers check
// avx2_enabled() (simd.h), as the functions here are compiled for AVX2 whatever the build's target.
#pragma once

#include "fp8/simd.h"

#if FPG_X86_SIMD

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fp8/format.h"
#include "fp8/source.h"

#define FPG_AVX2 inline __attribute__((target("avx2")))

namespace fpg {
namespace fp8 {
namespace avx2 {

// ---- sources: a group of 32 elements as 4 fp32 vectors ---------------------------------------------
// The vectors may hold the elements in a lane-local order (cheaper to load); `order` is the vpermd
// index that puts the packed bytes back in element order (see pack()).

template <class S>
struct Group;

template <>
struct Group<SrcF32> {
  FPG_AVX2 static void load(const float* x, __m256* v) {
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
  }
  FPG_AVX2 static __m256i order() { return _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7); }
};

// bf16 -> fp32 is a 16-bit shift: zeros interleaved below each value. Unpacking is lane-local, so
// v[0] holds x[0..4) and x[8..12), v[1] x[4..8) and x[12..16), and so on.
template <>
struct Group<SrcBf16> {
  FPG_AVX2 static void load(const uint16_t* x, __m256* v) {
    const __m256i z = _mm256_setzero_si256();
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16));
    v[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, a));
    v[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, a));
    v[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, b));
    v[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, b));
  }
  FPG_AVX2 static __m256i order() { return _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7); }
};

// fp32 rounded to bf16 (RNE) as bf16_from_float does. A NaN is left as it is: any NaN encodes as
// 0x7F and never counts in an amax, so its payload does not matter (the rounding add could carry
// it into the sign).
template <>
struct Group<SrcF32AsBf16> {
  FPG_AVX2 static void load(const float* x, __m256* v) {
    Group<SrcF32>::load(x, v);
    for (int k = 0; k < 4; ++k) {
      const __m256i u = _mm256_castps_si256(v[k]);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
      const __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))),
                                         _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
      v[k] = _mm256_blendv_ps(_mm256_castsi256_ps(r), v[k], _mm256_cmp_ps(v[k], v[k], _CMP_UNORD_Q));
    }
  }
  FPG_AVX2 static __m256i order() { return Group<SrcF32>::order(); }
};

// ---- the encoder -------------------------------------------------------------------------------------

// Constants of the encoders: the format's max, the stand-in for NaN (the value whose code is 0x7F),
// and the exponent field of the smallest normal (2^-6 / 2^-14) and mantissa bits.
template <Format F>
struct Enc;

template <>
struct Enc<Format::e4m3> {
  static constexpr float kMax = 448.0f;
  static constexpr float kNanAs = 480.0f;
  static constexpr int kMinNormalExp = 127 - 6;
  static constexpr int kMantBits = 3;
};

template <>
struct Enc<Format::e5m2> {
  static constexpr float kMax = 57344.0f;
  static constexpr float kNanAs = 114688.0f;
  static constexpr int kMinNormalExp = 127 - 14;
  static constexpr int kMantBits = 2;
};

// Saturation in the float domain, sign kept: every |v| > max encodes as max anyway (inf included),
// and a NaN becomes +kNanAs, whose code is 0x7F with the sign dropped, as format.h specifies.
// vminps/vmaxps return their second operand when either is NaN; the operand order relies on it.
template <Format F>
FPG_AVX2 __m256 clamp(__m256 v) {
  const __m256 hi = _mm256_set1_ps(Enc<F>::kMax);
  __m256 c = _mm256_min_ps(hi, v);                       // NaN stays NaN
  c = _mm256_max_ps(_mm256_set1_ps(-Enc<F>::kMax), c);  // NaN stays NaN
  return _mm256_min_ps(c, _mm256_set1_ps(Enc<F>::kNanAs));
}

// The 7-bit magnitude code of a clamped value, in 32-bit lanes, with one fp32 add that the FPU
// rounds (RNE) for subnormal and normal targets alike. For |c| in [2^E, 2^(E+1)) (E raised to the
// smallest normal exponent Emin, which covers the subnormal targets), the magic
//   m = 2^(E + 23 - MB) + j ulps,  j = (E - Emin) << MB,
// has an ulp of 2^(E - MB), the target's quantum, so |c| + m = m + RNE(|c| / quantum) ulps (j is
// even, so ties round alike) and the mantissa field of the sum is j + RNE(...) = the code: the
// exponent part of the code, plus the mantissa with its carry. This is format.h's subnormal trick
// applied per binade (there it is 2^14 + |x| for E4M3: E = Emin, j = 0).
template <Format F>
FPG_AVX2 __m256i magnitude(__m256 c) {
  using E = Enc<F>;
  constexpr int kMb = E::kMantBits;
  const __m256 a = _mm256_and_ps(c, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
  const __m256i e = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(a), _mm256_set1_epi32(0x7F800000)),
                                     _mm256_set1_epi32(E::kMinNormalExp << 23));
  // m = e + (23 - MB) << 23 + ((e >> 23) - Emin) << MB
  const __m256i m = _mm256_add_epi32(_mm256_add_epi32(e, _mm256_srli_epi32(e, 23 - kMb)),
                                     _mm256_set1_epi32(((23 - kMb) << 23) - (E::kMinNormalExp << kMb)));
  const __m256 sum = _mm256_add_ps(a, _mm256_castsi256_ps(m));
  return _mm256_and_si256(_mm256_castps_si256(sum), _mm256_set1_epi32(0x7FFFFF));
}

// 4 x 8 codes and their clamped values -> 32 bytes in element order. Signed saturating packs keep a
// negative fp32 pattern (-0 included) negative down to int8, so packing the clamped values gives
// the sign bytes without shifting each lane.
template <class S>
FPG_AVX2 __m256i pack(const __m256i* m, const __m256* c) {
  const __m256i codes = _mm256_packs_epi16(_mm256_packs_epi32(m[0], m[1]), _mm256_packs_epi32(m[2], m[3]));
  const __m256i signs = _mm256_packs_epi16(
      _mm256_packs_epi32(_mm256_castps_si256(c[0]), _mm256_castps_si256(c[1])),
      _mm256_packs_epi32(_mm256_castps_si256(c[2]), _mm256_castps_si256(c[3])));
  const __m256i bytes = _mm256_or_si256(codes, _mm256_and_si256(signs, _mm256_set1_epi8(static_cast<char>(0x80))));
  return _mm256_permutevar8x32_epi32(bytes, Group<S>::order());
}

// The 32 bytes fp8(v * scale) of a loaded group, in element order.
template <Format F, class S>
FPG_AVX2 __m256i encode_group_bytes(const __m256* v, __m256 scale) {
  __m256 c[4];
  __m256i m[4];
  for (int k = 0; k < 4; ++k) {
    c[k] = clamp<F>(_mm256_mul_ps(v[k], scale));
    m[k] = magnitude<F>(c[k]);
  }
  return pack<S>(m, c);
}

// out[0..32) = fp8(v * scale) for a loaded group.
template <Format F, class S>
FPG_AVX2 void encode_group(const __m256* v, __m256 scale, uint8_t* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), encode_group_bytes<F, S>(v, scale));
}

// Lane-wise max |v| over a group, NaN skipped: vmaxps returns its second operand (the accumulator)
// when either is NaN. fp32 order equals key order for non-NaN values, so the max is amax_of's
// (amax.h).
FPG_AVX2 __m256 lane_amax(const __m256* v) {
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) m = _mm256_max_ps(_mm256_and_ps(v[k], abs), m);
  return m;
}

// Lane [i] of the result = max over the lanes of m[i], for 8 vectors (a transpose with max in place
// of add: three shuffle levels for eight reductions).
FPG_AVX2 __m256 reduce_max8(const __m256* m) {
  __m256 x[4], y[2];
  for (int i = 0; i < 4; ++i)
    x[i] = _mm256_max_ps(_mm256_unpacklo_ps(m[2 * i], m[2 * i + 1]), _mm256_unpackhi_ps(m[2 * i], m[2 * i + 1]));
  for (int i = 0; i < 2; ++i)
    y[i] = _mm256_max_ps(_mm256_shuffle_ps(x[2 * i], x[2 * i + 1], 0x44), _mm256_shuffle_ps(x[2 * i], x[2 * i + 1], 0xEE));
  return _mm256_max_ps(_mm256_permute2f128_ps(y[0], y[1], 0x20), _mm256_permute2f128_ps(y[0], y[1], 0x31));
}

// How far ahead the streaming loops prefetch, in bytes of input. A single core of a large Xeon keeps
// too few lines in flight with the hardware prefetchers alone to reach its copy bandwidth; asking
// 4 KiB ahead keeps the load queue full (measured on the H200 host: BENCHMARKS.md, quantize).
constexpr size_t kPrefetchBytes = 4096;

FPG_AVX2 void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// Outputs at least this large are written with streaming (non-temporal) stores: a large cast's
// output is not read again soon, and streaming it skips the read-for-ownership of every output line
// (H200 host, one core: cast pass 9.8 -> 11.4 GB/s for fp32 input).
constexpr size_t kStreamMinBytes = size_t{1} << 20;

// out[i] = fp8(load(x[i]) * scale) for the whole groups of [0, n); returns how many it did (the
// caller finishes the tail). Two groups (64 values) per iteration, so two independent encode chains
// overlap, with the input of a later iteration prefetched. `stream` needs out 32-byte aligned.
template <Format F, class S, bool kStream>
FPG_AVX2 size_t cast_groups_impl(const typename S::T* x, size_t n, float scale, uint8_t* out) {
  using T = typename S::T;
  constexpr size_t kAhead = kPrefetchBytes / sizeof(T);
  constexpr size_t kLine = 64 / sizeof(T);
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (size_t l = 0; l < 64; l += kLine) prefetch(x + i + kAhead + l);
    __m256 v[4], w[4];
    Group<S>::load(x + i, v);
    Group<S>::load(x + i + 32, w);
    if constexpr (kStream) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i), encode_group_bytes<F, S>(v, s));
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i + 32), encode_group_bytes<F, S>(w, s));
    } else {
      encode_group<F, S>(v, s, out + i);
      encode_group<F, S>(w, s, out + i + 32);
    }
  }
  if constexpr (kStream) _mm_sfence();  // streamed lines reach memory before anyone reads them
  for (; i + 32 <= n; i += 32) {
    __m256 v[4];
    Group<S>::load(x + i, v);
    encode_group<F, S>(v, s, out + i);
  }
  return i;
}

template <Format F, class S>
FPG_AVX2 size_t cast_groups(const typename S::T* x, size_t n, float scale, uint8_t* out, bool stream = false) {
  return stream ? cast_groups_impl<F, S, true>(x, n, scale, out) : cast_groups_impl<F, S, false>(x, n, scale, out);
}

// ---- amax of fp32 values ---------------------------------------------------------------------------
// max over amax_key (amax.h): the bits with the sign cleared, a NaN (key > 0x7F800000) counted as 0;
// keys are < 2^31, so signed 32-bit maxes are exact. Four accumulators and the same prefetch as the
// cast: the amax pass is half of a tensorwise quantization's memory traffic.
FPG_AVX2 __m256i amax_keys8(const float* x) {
  const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)),
                                     _mm256_set1_epi32(0x7FFFFFFF));
  return _mm256_andnot_si256(_mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000)), a);
}

FPG_AVX2 uint32_t amax_key_f32_run(const float* x, size_t n) {
  constexpr size_t kAhead = kPrefetchBytes / sizeof(float);
  __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch(x + i + kAhead);
    prefetch(x + i + kAhead + 16);
    m0 = _mm256_max_epi32(m0, amax_keys8(x + i));
    m1 = _mm256_max_epi32(m1, amax_keys8(x + i + 8));
    m2 = _mm256_max_epi32(m2, amax_keys8(x + i + 16));
    m3 = _mm256_max_epi32(m3, amax_keys8(x + i + 24));
  }
  m0 = _mm256_max_epi32(_mm256_max_epi32(m0, m1), _mm256_max_epi32(m2, m3));
  __m128i h = _mm_max_epi32(_mm256_castsi256_si128(m0), _mm256_extracti128_si256(m0, 1));
  h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0x4E));
  h = _mm_max_epi32(h, _mm_shuffle_epi32(h, 0xB1));
  uint32_t m = static_cast<uint32_t>(_mm_cvtsi128_si32(h));
  for (; i < n; ++i) {
    uint32_t u;
    memcpy(&u, x + i, 4);
    u &= 0x7FFFFFFFu;
    const uint32_t k = u > 0x7F800000u ? 0u : u;
    m = k > m ? k : m;
  }
  return m;
}

// ---- amax of bf16 values ---------------------------------------------------------------------------
// max over amax_key_bf16: |b| as the bits with the sign cleared (then < 2^15, so signed 16-bit
// compares and maxes are exact), a NaN (key > 0x7F80) counted as 0. Written out because compilers
// differ on whether they vectorise the portable loop (GCC 13 leaves it scalar).
FPG_AVX2 uint16_t amax_key_bf16_run(const uint16_t* x, size_t n) {
  const __m256i mask = _mm256_set1_epi16(0x7FFF), inf = _mm256_set1_epi16(0x7F80);
  __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), mask);
    __m256i b = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16)), mask);
    a = _mm256_andnot_si256(_mm256_cmpgt_epi16(a, inf), a);
    b = _mm256_andnot_si256(_mm256_cmpgt_epi16(b, inf), b);
    m0 = _mm256_max_epi16(m0, a);
    m1 = _mm256_max_epi16(m1, b);
  }
  m0 = _mm256_max_epi16(m0, m1);
  __m128i h = _mm_max_epi16(_mm256_castsi256_si128(m0), _mm256_extracti128_si256(m0, 1));
  h = _mm_max_epi16(h, _mm_shuffle_epi32(h, 0x4E));
  h = _mm_max_epi16(h, _mm_shuffle_epi32(h, 0xB1));
  h = _mm_max_epi16(h, _mm_shufflelo_epi16(h, 0xB1));
  uint16_t m = static_cast<uint16_t>(_mm_extract_epi16(h, 0));
  for (; i < n; ++i) {
    const uint16_t a = static_cast<uint16_t>(x[i] & 0x7FFFu);
    const uint16_t k = a > 0x7F80u ? uint16_t{0} : a;
    m = k > m ? k : m;
  }
  return m;
}

}  // namespace avx2
}  // namespace fp8
}  // namespace fpg

#endif  // FPG_X86_SIMD
