#include "fp8/stacked.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/shape.h"
#include "fp8/quantize.h"

namespace fpg {
namespace fp8 {

uint64_t StackedPlan::matrices() const {
  uint64_t n = 1;
  for (uint64_t d : expert_shape) n *= d;
  return n;
}

StackedPlan make_stacked_plan(const Recipe& r, Input in, const std::vector<uint64_t>& shape, size_t expert_dims,
                              std::string_view name) {
  StackedPlan p;
  if (expert_dims == 0) {
    p.matrix = make_plan(r, in, shape, name);
    return p;
  }
  if (shape.size() < expert_dims + 2)
    throw UsageError("tensor '" + std::string(name) + "' of shape " + shape_string(shape) + " cannot stack " +
                     std::to_string(expert_dims) + " expert dimension(s) over [rows, columns] matrices");
  p.expert_shape.assign(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(expert_dims));
  const std::vector<uint64_t> matrix(shape.end() - 2, shape.end());
  p.matrix = make_plan(r, in, matrix, name);
  return p;
}

std::vector<uint64_t> scale_inv_shape(const StackedPlan& p) {
  std::vector<uint64_t> s = p.expert_shape;
  const std::vector<uint64_t> m = scale_inv_shape(p.matrix);
  s.insert(s.end(), m.begin(), m.end());
  return s;
}

ScaleView matrix_scales(const StackedPlan& p, const ScaleView& all, uint64_t m) {
  const uint64_t cell0 = m * p.matrix.grid.size();
  ScaleView v;
  if (all.scale) v.scale = all.scale + cell0;
  if (all.scale_inv) v.scale_inv = all.scale_inv + cell0;
  if (all.e8m0) v.e8m0 = all.e8m0 + cell0;
  return v;
}

void dequantize_stacked(const StackedPlan& p, const ScaleView& all, uint64_t start, uint64_t count,
                        const uint8_t* q, float* out) {
  const uint64_t per = p.matrix.numel();
  if (per == 0 || count == 0) return;
  uint64_t done = 0;
  while (done < count) {
    const uint64_t at = start + done;
    const uint64_t m = at / per, off = at % per;
    const uint64_t n = std::min(count - done, per - off);
    dequantize_fragment(p.matrix, matrix_scales(p, all, m), off, n, q + done, out + done);
    done += n;
  }
}

}  // namespace fp8
}  // namespace fpg
