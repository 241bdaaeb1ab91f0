#include "fp8/mxfp8.h"

#include <vector>

#include "core/error.h"
#include "fp8/amax.h"
#include "fp8/cast_avx2.h"
#include "fp8/cast_loops.h"
#include "fp8/scale_grid.h"
#include "fp8/simd.h"

namespace fpg {
namespace fp8 {
namespace {

template <class S>
FPG_CPU_CLONES void row_amax_impl(GridMap g, uint64_t K, uint64_t start, uint64_t count, const typename S::T* x,
                                  float* grid, uint64_t base) {
  for_each_cell_run(g, K, start, count, [&](uint64_t off, uint64_t len, uint64_t cell) {
    float& a = grid[cell - base];
    a = amax_fold(a, amax_of<S>(x + off, len));
  });
}

// One grid row per 32-row band; a row piece folds elementwise into its band's row.
template <class S>
FPG_CPU_CLONES void col_amax_impl(uint64_t K, uint64_t start, uint64_t count, const typename S::T* x,
                                  float* grid, uint64_t base) {
  for_each_row_piece(K, start, count, [&](uint64_t off, uint64_t len, uint64_t r, uint64_t c) {
    amax_fold_into<S>(grid + ((r / 32) * K + c - base), x + off, len);
  });
}

template <Format F, class S>
FPG_CPU_CLONES void row_cast_impl(GridMap g, uint64_t K, uint64_t start, uint64_t count, const typename S::T* x,
                                  const uint8_t* e8m0, uint8_t* out) {
  for_each_cell_run(g, K, start, count, [&](uint64_t off, uint64_t len, uint64_t cell) {
    cast_run<F, S>(x + off, len, mx_exp2f_rcp(e8m0[cell]), out + off);
  });
}

// Columnwise: each column of a 32-row band has its own scale. When the fragment spans several rows,
// the band's multipliers are expanded to floats once per band, so the inner loop is a plain
// multiply-and-encode; short fragments convert the scale bytes per element instead.
template <Format F, class S>
FPG_CPU_CLONES void col_cast_impl(uint64_t K, uint64_t start, uint64_t count, const typename S::T* x,
                                  const uint8_t* e8m0, uint8_t* out) {
  if (count < 4 * K) {
    for_each_row_piece(K, start, count, [&](uint64_t off, uint64_t len, uint64_t r, uint64_t c) {
      cast_run_e8m0<F, S>(x + off, len, e8m0 + ((r / 32) * K + c), out + off);
    });
    return;
  }
  std::vector<float> mult(K);
  uint64_t band = ~uint64_t{0};
  for_each_row_piece(K, start, count, [&](uint64_t off, uint64_t len, uint64_t r, uint64_t c) {
    if (r / 32 != band) {
      band = r / 32;
      const uint8_t* e = e8m0 + band * K;
      for (uint64_t k = 0; k < K; ++k) mult[k] = mx_exp2f_rcp(e[k]);
    }
    cast_run_mul<F, S>(x + off, len, mult.data() + c, out + off);
  });
}

template <Format F, class S>
FPG_CPU_CLONES void fused_impl(MxRule rule, uint64_t start, uint64_t count, const typename S::T* x, float* amax,
                               uint8_t* e8m0, uint8_t* out) {
  // K % 32 == 0, so blocks are 32 consecutive flat elements and cell = flat index / 32. Groups of
  // 8 blocks: the amaxes, then the scales, then the casts, so each phase runs as a tight loop.
  constexpr uint64_t G = 8;
  const uint64_t blocks = count / 32, first = start / 32;
  for (uint64_t b0 = 0; b0 < blocks; b0 += G) {
    const uint64_t nb = blocks - b0 < G ? blocks - b0 : G;
    float m[G];
    float mult[G];
    for (uint64_t b = 0; b < nb; ++b) m[b] = amax_of<S>(x + (b0 + b) * 32, 32);
    for (uint64_t b = 0; b < nb; ++b) {
      const uint8_t s = mx_scale(m[b], F, rule);
      e8m0[first + b0 + b] = s;
      mult[b] = mx_exp2f_rcp(s);
      if (amax) amax[first + b0 + b] = amax_fold(amax[first + b0 + b], m[b]);
    }
    for (uint64_t b = 0; b < nb; ++b) cast_run<F, S>(x + (b0 + b) * 32, 32, mult[b], out + (b0 + b) * 32);
  }
}

#if FPG_X86_SIMD
// ---- fused_impl with the AVX2 kernels --------------------------------------------------------------
// 8 blocks (groups of 32) per step: their amaxes reduce into one register, the 8 scales are
// computed side by side (the scalar rules of scale_rules.h, lane by lane), and the casts reload
// the blocks from L1.

// mx_e8m0_rceil: e8m0_ceil_from_float(amax * rcp) for amax in [0, inf] (never NaN here): the
// exponent, plus one when the mantissa is non-zero (the value is not a power of two) unless the
// value is at most 2^-127; inf and anything above 2^127 give 0xFE.
FPG_AVX2 __m256i e8m0_rceil8(__m256 amax, Format f) {
  const __m256i a = _mm256_castps_si256(_mm256_mul_ps(amax, _mm256_set1_ps(format_max_rcp(f))));
  const __m256i mant = _mm256_and_si256(a, _mm256_set1_epi32(0x7FFFFF));
  const __m256i round_up = _mm256_andnot_si256(_mm256_cmpeq_epi32(mant, _mm256_setzero_si256()),
                                               _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x400000)));
  const __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(a, 23), round_up);  // round_up is -1 or 0
  return _mm256_min_epu32(e, _mm256_set1_epi32(0xFE));
}

// mx_e8m0_floor for amax in [0, inf]: the exponent field minus emax, at least 0; inf gives 0xFF.
FPG_AVX2 __m256i e8m0_floor8(__m256 amax, Format f) {
  const __m256i field = _mm256_srli_epi32(_mm256_castps_si256(amax), 23);
  const __m256i e = _mm256_max_epi32(_mm256_sub_epi32(field, _mm256_set1_epi32(format_emax(f))), _mm256_setzero_si256());
  return _mm256_or_si256(e, _mm256_and_si256(_mm256_cmpeq_epi32(field, _mm256_set1_epi32(0xFF)), _mm256_set1_epi32(0xFF)));
}

// mx_exp2f_rcp lane by lane: (254 - e) << 23, 2^-127 for e = 254, NaN for e = 255.
FPG_AVX2 __m256 exp2f_rcp8(__m256i e) {
  const __m256i is254 = _mm256_cmpeq_epi32(e, _mm256_set1_epi32(0xFE));
  const __m256i is255 = _mm256_cmpeq_epi32(e, _mm256_set1_epi32(0xFF));
  const __m256i normal = _mm256_andnot_si256(_mm256_or_si256(is254, is255),
                                             _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), e), 23));
  const __m256i special = _mm256_or_si256(_mm256_and_si256(is254, _mm256_set1_epi32(0x00400000)),
                                          _mm256_and_si256(is255, _mm256_set1_epi32(0x7FC00000)));
  return _mm256_castsi256_ps(_mm256_or_si256(normal, special));
}

// amax_fold(acc[i], m[i]) for m without NaN: an integer max of the ordering keys.
FPG_AVX2 void amax_fold8(float* acc, __m256 m) {
  const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc)),
                                     _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i key = _mm256_andnot_si256(_mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000)), a);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc), _mm256_max_epi32(key, _mm256_castps_si256(m)));
}

// The low byte of each lane, in order, as 8 bytes.
FPG_AVX2 void store_bytes8(uint8_t* out, __m256i e) {
  const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(e, e), e);  // byte k of each lane's dword 0 = e[k]
  const __m256i lo = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(lo));
}

template <Format F, class S>
FPG_AVX2 void fused_avx2(MxRule rule, uint64_t start, uint64_t count, const typename S::T* x, float* amax,
                         uint8_t* e8m0, uint8_t* out) {
  constexpr uint64_t G = 8;
  const uint64_t blocks = count / 32, first = start / 32;
  uint64_t b0 = 0;
  for (; b0 + G <= blocks; b0 += G) {
    const typename S::T* xg = x + b0 * 32;
    __m256 lanes[G], v[4];
    for (uint64_t b = 0; b < G; ++b) {
      avx2::Group<S>::load(xg + b * 32, v);
      lanes[b] = avx2::lane_amax(v);
    }
    const __m256 m = avx2::reduce_max8(lanes);
    const __m256i e = rule == MxRule::rceil ? e8m0_rceil8(m, F) : e8m0_floor8(m, F);
    store_bytes8(e8m0 + first + b0, e);
    if (amax) amax_fold8(amax + first + b0, m);
    const __m256 mult = exp2f_rcp8(e);
    for (uint64_t b = 0; b < G; ++b) {
      avx2::Group<S>::load(xg + b * 32, v);
      const __m256 mb = _mm256_permutevar8x32_ps(mult, _mm256_set1_epi32(static_cast<int>(b)));
      avx2::encode_group<F, S>(v, mb, out + (b0 + b) * 32);
    }
  }
  if (b0 < blocks) fused_impl<F, S>(rule, start + b0 * 32, count - b0 * 32, x + b0 * 32, amax, e8m0, out + b0 * 32);
}
#endif

}  // namespace

void mx_partial_amax(const Plan& p, uint64_t start, uint64_t count, const void* in, float* row,
                     uint64_t row_base, float* col, uint64_t col_base) {
  dispatch_source(p.input, [&](auto src) {
    using S = decltype(src);
    const typename S::T* x = static_cast<const typename S::T*>(in);
    if (p.has_rowwise() && row) row_amax_impl<S>(grid_map(p), p.K, start, count, x, row, row_base);
    if (p.has_columnwise() && col) col_amax_impl<S>(p.K, start, count, x, col, col_base);
  });
}

void mx_cast(const Plan& p, const uint8_t* e8m0_row, const uint8_t* e8m0_col, uint64_t start,
             uint64_t count, const void* in, uint8_t* out_row, uint8_t* out_col) {
  const GridMap g = grid_map(p);
  dispatch(p.recipe.format, p.input, [&](auto ft, auto src) {
    using S = decltype(src);
    constexpr Format F = decltype(ft)::value;
    const typename S::T* x = static_cast<const typename S::T*>(in);
    if (p.has_rowwise() && out_row) row_cast_impl<F, S>(g, p.K, start, count, x, e8m0_row, out_row);
    if (p.has_columnwise() && out_col) col_cast_impl<F, S>(p.K, start, count, x, e8m0_col, out_col);
  });
}

void mx_quantize_rowwise_fused(const Plan& p, uint64_t start, uint64_t count, const void* in,
                               float* amax_row, uint8_t* e8m0_row, uint8_t* out_row) {
  if (!p.has_rowwise() || start % 32 != 0 || count % 32 != 0)
    throw InternalError("mx_quantize_rowwise_fused needs a rowwise plan and a 32-aligned fragment");
  dispatch(p.recipe.format, p.input, [&](auto ft, auto src) {
    using S = decltype(src);
    constexpr Format F = decltype(ft)::value;
    const typename S::T* x = static_cast<const typename S::T*>(in);
#if FPG_X86_SIMD
    if (avx2_enabled()) return fused_avx2<F, S>(p.recipe.mx_rule, start, count, x, amax_row, e8m0_row, out_row);
#endif
    fused_impl<F, S>(p.recipe.mx_rule, start, count, x, amax_row, e8m0_row, out_row);
  });
}

void mx_dequant(const Plan& p, const uint8_t* e8m0, bool columnwise, uint64_t start, uint64_t count,
                const uint8_t* q, float* out) {
  const DecodeTable& t = decode_table(p.recipe.format);
  if (columnwise) {
    for_each_row_piece(p.K, start, count, [&](uint64_t off, uint64_t len, uint64_t r, uint64_t c) {
      dequant_run_e8m0(t, q + off, len, e8m0 + ((r / 32) * p.K + c), out + off);
    });
  } else {
    for_each_cell_run(grid_map(p), p.K, start, count, [&](uint64_t off, uint64_t len, uint64_t cell) {
      dequant_run(t, q + off, len, mx_scale_value(e8m0[cell]), out + off);
    });
  }
}

}  // namespace fp8
}  // namespace fpg
