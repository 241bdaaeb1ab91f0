// fpgather/quantize.h over fp8/quantize.h, with the recipes `fpgather convert --fp8` builds.
#include <fpgather/quantize.h>

#include "api/boundary.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/thread_pool.h"
#include "fp8/quantize.h"
#include "fp8/recipe.h"

namespace fpgather {
namespace {

fpg::fp8::Recipe internal_recipe(const Recipe& r) {
  const auto scaling = fpg::fp8::parse_scaling(r.scaling);
  if (!scaling || *scaling == fpg::fp8::Scaling::delayed)
    throw fpg::UsageError("quantize: scaling must be tensorwise, blockwise, blockwise-1x128 or mxfp8, not '" +
                          r.scaling + "'");
  const auto format = fpg::fp8::parse_format(r.format);
  if (!format) throw fpg::UsageError("quantize: format must be e4m3 or e5m2, not '" + r.format + "'");
  const auto rule = fpg::fp8::parse_mx_rule(r.mx_scale);
  if (!rule) throw fpg::UsageError("quantize: mx_scale must be rceil or floor, not '" + r.mx_scale + "'");
  switch (*scaling) {
    case fpg::fp8::Scaling::tensorwise: return fpg::fp8::Recipe::tensorwise(*format, r.pow2_scales.value_or(false));
    case fpg::fp8::Scaling::blockwise_1x128:
      return fpg::fp8::Recipe::blockwise_1x128(*format, r.pow2_scales.value_or(true));
    case fpg::fp8::Scaling::blockwise_128x128:
      return fpg::fp8::Recipe::blockwise_128x128(*format, r.pow2_scales.value_or(true));
    default: return fpg::fp8::Recipe::mxfp8(*format, *rule);
  }
}

uint64_t element_count(const std::vector<uint64_t>& shape) {
  uint64_t n = 0;
  if (!fpg::checked_numel(shape, &n))
    throw fpg::UsageError("quantize: shape " + fpg::shape_string(shape) + " overflows");
  return n;
}

}  // namespace

QuantizedTensor quantize(const Recipe& recipe, const std::vector<uint64_t>& shape, Span<const float> values) {
  return api::at_boundary([&] {
    const fpg::fp8::Recipe r = internal_recipe(recipe);
    const uint64_t n = element_count(shape);
    if (n != values.size())
      throw fpg::UsageError("quantize: shape " + fpg::shape_string(shape) + " holds " + std::to_string(n) +
                            " elements, not " + std::to_string(values.size()));
    fpg::fp8::QuantizeOptions o;
    o.pool = &fpg::ThreadPool::global();
    fpg::fp8::QuantizedTensor t = fpg::fp8::quantize_tensor(r, fpg::fp8::Input::f32, shape, values.data(), {}, o);
    QuantizedTensor q;
    q.shape = shape;
    q.dtype = std::string(fpg::dtype_name(t.dtype));
    q.data = std::move(t.data);
    q.scale_dtype = std::string(fpg::dtype_name(t.scale_dtype));
    q.scale_shape = std::move(t.scale_shape);
    q.scale_inv = std::move(t.scale_inv);
    return q;
  });
}

std::vector<float> dequantize(const Recipe& recipe, const QuantizedTensor& q) {
  return api::at_boundary([&] {
    const fpg::fp8::Recipe r = internal_recipe(recipe);
    const fpg::fp8::Plan p = fpg::fp8::make_plan(r, fpg::fp8::Input::f32, q.shape);
    const uint64_t scale_bytes =
        fpg::dtype_bytes(fpg::fp8::scale_inv_dtype(p), element_count(fpg::fp8::scale_inv_shape(p)));
    if (q.data.size() != p.numel() || q.scale_inv.size() != scale_bytes)
      throw fpg::UsageError("dequantize: shape " + fpg::shape_string(q.shape) + " under this recipe needs " +
                            std::to_string(p.numel()) + " data bytes and " + std::to_string(scale_bytes) +
                            " scale bytes, not " + std::to_string(q.data.size()) + " and " +
                            std::to_string(q.scale_inv.size()));
    return fpg::fp8::dequantize_tensor(r, q.shape, q.data.data(), q.scale_inv.data());
  });
}

}  // namespace fpgather
