#include "fp8/blockwise.h"

#include "fp8/amax.h"
#include "fp8/cast_loops.h"
#include "fp8/scale_grid.h"
#include "fp8/simd.h"

namespace fpg {
namespace fp8 {
namespace {

template <class S>
FPG_CPU_CLONES void amax_impl(GridMap g, uint64_t K, uint64_t start, uint64_t count, const typename S::T* x,
                              float* grid, uint64_t base) {
  for_each_cell_run(g, K, start, count, [&](uint64_t off, uint64_t len, uint64_t cell) {
    float& a = grid[cell - base];
    a = amax_fold(a, amax_of<S>(x + off, len));
  });
}

template <Format F, class S>
FPG_CPU_CLONES void cast_impl(GridMap g, uint64_t K, uint64_t start, uint64_t count, const typename S::T* x,
                              const float* scale, uint8_t* out) {
  for_each_cell_run(g, K, start, count, [&](uint64_t off, uint64_t len, uint64_t cell) {
    cast_run<F, S>(x + off, len, scale[cell], out + off);
  });
}

}  // namespace

void blockwise_partial_amax(const Plan& p, uint64_t start, uint64_t count, const void* in, float* grid,
                            uint64_t grid_base) {
  const GridMap g = grid_map(p);
  dispatch_source(p.input, [&](auto src) {
    using S = decltype(src);
    amax_impl<S>(g, p.K, start, count, static_cast<const typename S::T*>(in), grid, grid_base);
  });
}

void blockwise_cast(const Plan& p, const float* scale, uint64_t start, uint64_t count, const void* in,
                    uint8_t* out) {
  const GridMap g = grid_map(p);
  dispatch(p.recipe.format, p.input, [&](auto ft, auto src) {
    using S = decltype(src);
    cast_impl<decltype(ft)::value, S>(g, p.K, start, count, static_cast<const typename S::T*>(in), scale, out);
  });
}

void blockwise_dequant(const Plan& p, const float* scale_inv, uint64_t start, uint64_t count,
                       const uint8_t* q, float* out) {
  const DecodeTable& t = decode_table(p.recipe.format);
  for_each_cell_run(grid_map(p), p.K, start, count, [&](uint64_t off, uint64_t len, uint64_t cell) {
    dequant_run(t, q + off, len, scale_inv[cell], out + off);
  });
}

}  // namespace fp8
}  // namespace fpg
