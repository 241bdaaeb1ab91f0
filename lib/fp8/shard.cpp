#include "fp8/shard.h"

#include <string>

#include "core/error.h"
#include "fp8/amax.h"
#include "fp8/blockwise.h"
#include "fp8/mxfp8.h"
#include "fp8/tensorwise.h"

namespace fpg {
namespace fp8 {
namespace {

void check_fragment(const Plan& p, uint64_t start, uint64_t count) {
  if (start > p.numel() || count > p.numel() - start)
    throw InternalError("fp8: fragment [" + std::to_string(start) + ", " + std::to_string(start + count) +
                        ") is outside a tensor of " + std::to_string(p.numel()) + " elements");
}

bool per_tensor(const Plan& p) {
  return p.recipe.scaling == Scaling::tensorwise || p.recipe.scaling == Scaling::delayed;
}

}  // namespace

AmaxGrid::AmaxGrid(const Plan& p) : row(p.grid.size(), 0.0f), col(p.col_grid.size(), 0.0f) {}

void AmaxGrid::combine(const AmaxGrid& o) {
  if (o.row.size() != row.size() || o.col.size() != col.size())
    throw InternalError("fp8: combining amax grids of different shapes");
  combine_max(row.data(), o.row.data(), row.size());
  combine_max(col.data(), o.col.data(), col.size());
}

ScaleView Scales::view() const {
  ScaleView v;
  v.scale = scale.empty() ? nullptr : scale.data();
  v.scale_inv = scale_inv.empty() ? nullptr : scale_inv.data();
  v.e8m0 = e8m0.empty() ? nullptr : e8m0.data();
  v.e8m0_col = e8m0_col.empty() ? nullptr : e8m0_col.data();
  return v;
}

CellRange touched_row_cells(const Plan& p, uint64_t start, uint64_t count) {
  if (!p.has_rowwise()) return {};
  return touched_cells(grid_map(p), p.K, start, count);
}

CellRange touched_col_cells(const Plan& p, uint64_t start, uint64_t count) {
  if (!p.has_columnwise()) return {};
  return touched_cells(col_grid_map(p), p.K, start, count);
}

void partial_amax_window(const Plan& p, uint64_t start, uint64_t count, const void* in, float* row,
                         CellRange row_range, float* col, CellRange col_range) {
  check_fragment(p, start, count);
  if (count == 0) return;
  switch (p.recipe.scaling) {
    case Scaling::tensorwise:
    case Scaling::delayed:
      // One cell, so a non-empty fragment's range is [0, 1).
      row[0] = amax_fold(row[0], amax_contiguous(p.input, in, count));
      break;
    case Scaling::blockwise_1x128:
    case Scaling::blockwise_128x128:
      blockwise_partial_amax(p, start, count, in, row, row_range.begin);
      break;
    case Scaling::mxfp8:
      mx_partial_amax(p, start, count, in, row, row_range.begin, col, col_range.begin);
      break;
  }
}

void partial_amax(const Plan& p, uint64_t start, uint64_t count, const void* in, float* amax,
                  float* amax_col) {
  partial_amax_window(p, start, count, in, amax, {0, p.grid.size()}, amax_col, {0, p.col_grid.size()});
}

void partial_amax(const Plan& p, uint64_t start, uint64_t count, const void* in, AmaxGrid& g) {
  if (g.row.size() != p.grid.size() || g.col.size() != p.col_grid.size())
    throw InternalError("fp8: amax grid does not match the plan");
  partial_amax(p, start, count, in, g.row.data(), g.col.empty() ? nullptr : g.col.data());
}

void compute_scales(const Plan& p, const float* amax, const float* amax_col, float* scale, float* scale_inv,
                    uint8_t* e8m0, uint8_t* e8m0_col) {
  const Recipe& r = p.recipe;
  switch (r.scaling) {
    case Scaling::delayed:
      throw UsageError("fp8: delayed scaling takes its scale from the amax history (DelayedState)");
    case Scaling::tensorwise:
    case Scaling::blockwise_1x128:
    case Scaling::blockwise_128x128:
      for (uint64_t i = 0; i < p.grid.size(); ++i) {
        const float s = per_tensor(p) ? tensorwise_scale(amax[i], r.format, r.pow2, r.amax_epsilon)
                                      : blockwise_scale(amax[i], r.format, r.pow2, r.amax_epsilon, p.input);
        if (scale) scale[i] = s;
        if (scale_inv) scale_inv[i] = scale_inv_of(s);
      }
      break;
    case Scaling::mxfp8:
      if (e8m0)
        for (uint64_t i = 0; i < p.grid.size(); ++i) e8m0[i] = mx_scale(amax[i], r.format, r.mx_rule);
      if (e8m0_col)
        for (uint64_t i = 0; i < p.col_grid.size(); ++i) e8m0_col[i] = mx_scale(amax_col[i], r.format, r.mx_rule);
      break;
  }
}

Scales compute_scales(const Plan& p, const AmaxGrid& g) {
  Scales s;
  if (p.recipe.scaling == Scaling::mxfp8) {
    s.e8m0.resize(p.grid.size());
    s.e8m0_col.resize(p.col_grid.size());
    compute_scales(p, g.row.data(), g.col.data(), nullptr, nullptr, s.e8m0.data(), s.e8m0_col.data());
  } else {
    s.scale.resize(p.grid.size());
    s.scale_inv.resize(p.grid.size());
    compute_scales(p, g.row.data(), nullptr, s.scale.data(), s.scale_inv.data(), nullptr, nullptr);
  }
  return s;
}

void cast_fragment(const Plan& p, const ScaleView& s, uint64_t start, uint64_t count, const void* in,
                   uint8_t* out, uint8_t* out_col) {
  check_fragment(p, start, count);
  if (count == 0) return;
  switch (p.recipe.scaling) {
    case Scaling::tensorwise:
    case Scaling::delayed:
      cast_contiguous(p.recipe.format, p.input, in, count, s.scale[0], out);
      break;
    case Scaling::blockwise_1x128:
    case Scaling::blockwise_128x128:
      blockwise_cast(p, s.scale, start, count, in, out);
      break;
    case Scaling::mxfp8:
      mx_cast(p, s.e8m0, s.e8m0_col, start, count, in, out, out_col);
      break;
  }
}

void dequantize_fragment(const Plan& p, const ScaleView& s, uint64_t start, uint64_t count,
                         const uint8_t* q, float* out, bool columnwise) {
  check_fragment(p, start, count);
  if (count == 0) return;
  switch (p.recipe.scaling) {
    case Scaling::tensorwise:
    case Scaling::delayed:
      dequant_contiguous(p.recipe.format, q, count, s.scale_inv[0], out);
      break;
    case Scaling::blockwise_1x128:
    case Scaling::blockwise_128x128:
      blockwise_dequant(p, s.scale_inv, start, count, q, out);
      break;
    case Scaling::mxfp8:
      mx_dequant(p, columnwise ? s.e8m0_col : s.e8m0, columnwise, start, count, q, out);
      break;
  }
}

}  // namespace fp8
}  // namespace fpg
