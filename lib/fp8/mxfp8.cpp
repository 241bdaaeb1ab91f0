#include "fp8/mxfp8.h"

#include <vector>

#include "core/error.h"
#include "fp8/amax.h"
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
    fused_impl<decltype(ft)::value, S>(p.recipe.mx_rule, start, count, static_cast<const typename S::T*>(in), amax_row,
                                    e8m0_row, out_row);
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
