#include "fp8/quantize.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "fp8/batch.h"
#include "fp8/delayed.h"
#include "fp8/mxfp8.h"
#include "fp8/source.h"

namespace fpg {
namespace fp8 {

std::vector<uint64_t> scale_inv_shape(const Plan& p) {
  switch (p.recipe.scaling) {
    case Scaling::tensorwise:
    case Scaling::delayed: return {};
    default: return {p.grid.rows, p.grid.cols};
  }
}

DType scale_inv_dtype(const Plan& p) { return p.recipe.scaling == Scaling::mxfp8 ? DType::F8_E8M0 : DType::F32; }

DType data_dtype(Format f) { return f == Format::e4m3 ? DType::F8_E4M3 : DType::F8_E5M2; }

void quantize_into(const Plan& p, const void* values, uint8_t* out, uint8_t* out_col, AmaxGrid& amax,
                   Scales& scales, const QuantizeOptions& opt) {
  const Recipe& r = p.recipe;
  const uint64_t n = p.numel();
  // Reset in place: a caller that quantizes tensor after tensor keeps the grids' memory (an MX grid
  // is numel/32 floats, and fresh pages would cost page faults on every call).
  amax.row.assign(p.grid.size(), 0.0f);
  amax.col.assign(p.col_grid.size(), 0.0f);
  ThreadPool local(1);
  ThreadPool& pool = opt.pool ? *opt.pool : local;

  FragmentJob job;
  job.plan = &p;
  job.count = n;
  job.in = values;
  job.amax = amax.row.empty() ? nullptr : amax.row.data();
  job.amax_col = amax.col.empty() ? nullptr : amax.col.data();
  job.out = p.has_rowwise() ? out : nullptr;
  job.out_col = p.has_columnwise() ? out_col : nullptr;

  if (r.scaling == Scaling::delayed || opt.scale) {
    if (!opt.scale || p.grid.size() != 1)
      throw UsageError("fp8: a given scale needs a per-tensor recipe, and delayed scaling needs one");
    batch_partial_amax(&job, 1, pool);  // the amax the history records
    DelayedState st;
    st.scale = *opt.scale;
    st.scale_inv = scale_inv_of(st.scale);
    scales = delayed_scales(st);
  } else if (r.scaling == Scaling::mxfp8 && !p.has_columnwise()) {
    // Rowwise MX: blocks never straddle rows (K % 32 == 0), so amax, scale and cast run in one pass
    // over the input, slab by slab.
    scales.scale.clear();
    scales.scale_inv.clear();
    scales.e8m0_col.clear();
    scales.e8m0.resize(p.grid.size());  // every cell is written
    const uint64_t rows_per_slab = std::max<uint64_t>(1, (uint64_t{1} << 18) / std::max<uint64_t>(p.K, 1));
    const uint64_t slabs = p.K ? (p.M + rows_per_slab - 1) / rows_per_slab : 0;
    const size_t esize = input_size(p.input);
    pool.parallel_for(slabs, [&](size_t s) {
      const uint64_t start = s * rows_per_slab * p.K;
      const uint64_t count = std::min(rows_per_slab * p.K, n - start);
      mx_quantize_rowwise_fused(p, start, count, static_cast<const uint8_t*>(values) + start * esize,
                                amax.row.data(), scales.e8m0.data(), out + start);
    });
    return;
  } else {
    batch_partial_amax(&job, 1, pool);
    scales = compute_scales(p, amax);
  }
  job.scales = scales.view();
  batch_cast(&job, 1, pool);
}

QuantizedTensor quantize_tensor(const Recipe& r, Input in, const std::vector<uint64_t>& shape,
                                const void* values, std::string_view name, const QuantizeOptions& opt) {
  QuantizedTensor q;
  q.plan = make_plan(r, in, shape, name);
  const Plan& p = q.plan;
  if (r.scaling == Scaling::delayed && !opt.scale)
    throw UsageError("fp8: tensor '" + std::string(name) + "': delayed scaling needs the scale from its amax history");
  q.dtype = data_dtype(r.format);
  q.scale_dtype = scale_inv_dtype(p);
  q.scale_shape = scale_inv_shape(p);
  if (p.has_rowwise()) q.data.resize(p.numel());
  if (p.has_columnwise()) q.data_col.resize(p.numel());
  quantize_into(p, values, q.data.data(), q.data_col.data(), q.amax, q.scales, opt);
  if (r.scaling == Scaling::mxfp8) {
    q.scale_inv = q.scales.e8m0;  // compact rowwise [M, K/32] (empty for columnwise-only plans)
  } else {
    q.scale_inv.resize(q.scales.scale_inv.size() * 4);
    if (!q.scale_inv.empty()) std::memcpy(q.scale_inv.data(), q.scales.scale_inv.data(), q.scale_inv.size());
  }
  return q;
}

std::vector<float> dequantize_tensor(const Recipe& r, const std::vector<uint64_t>& shape, const uint8_t* data,
                                     const uint8_t* scale_inv, std::string_view name) {
  // The input type only matters for quantization; dequantization reads fp8 and the stored scales.
  const Plan p = make_plan(r, Input::f32, shape, name);
  std::vector<float> out(p.numel());
  ScaleView v;
  std::vector<float> inv;
  if (r.scaling == Scaling::mxfp8) {
    if (!p.has_rowwise()) throw UsageError("fp8: tensor '" + std::string(name) + "': no rowwise MX data to dequantize");
    v.e8m0 = scale_inv;
  } else {
    inv.resize(p.grid.size());
    std::memcpy(inv.data(), scale_inv, inv.size() * 4);
    v.scale_inv = inv.data();
  }
  dequantize_fragment(p, v, 0, p.numel(), data, out.data());
  return out;
}

}  // namespace fp8
}  // namespace fpg
