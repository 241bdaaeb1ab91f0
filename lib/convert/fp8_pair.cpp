#include "convert/fp8_pair.h"

#include <cstring>

#include "convert/quantize_model.h"
#include "core/error.h"
#include "fp8/quantize.h"

namespace fpg::convert {

fp8::Plan fp8_pair_plan(const safetensors::Model& model, const safetensors::TensorInfo& data,
                        const safetensors::TensorInfo& scale) {
  fp8::Recipe r;
  r.format = data.dtype == DType::F8_E4M3 ? fp8::Format::e4m3 : fp8::Format::e5m2;
  const auto& meta = model.metadata();
  const auto recorded = meta.find(kMetadataRecipe);
  if (recorded != meta.end()) {
    const auto s = fp8::parse_scaling(recorded->second);
    if (!s) throw FormatError(model.path() + ": unknown " + kMetadataRecipe + " '" + recorded->second + "'");
    r.scaling = *s;
  } else if (scale.dtype == DType::F8_E8M0) {
    r.scaling = fp8::Scaling::mxfp8;
  } else if (scale.shape.empty()) {
    r.scaling = fp8::Scaling::tensorwise;
  } else {
    const fp8::Plan p128 = fp8::make_plan(fp8::Recipe::blockwise_128x128(r.format), fp8::Input::f32, data.shape, data.name);
    r.scaling = fp8::scale_inv_shape(p128) == scale.shape ? fp8::Scaling::blockwise_128x128
                                                          : fp8::Scaling::blockwise_1x128;
  }
  if (r.scaling == fp8::Scaling::delayed) r.scaling = fp8::Scaling::tensorwise;  // one scale either way
  const fp8::Plan p = fp8::make_plan(r, fp8::Input::f32, data.shape, data.name);
  if (fp8::scale_inv_shape(p) != scale.shape || fp8::scale_inv_dtype(p) != scale.dtype)
    throw FormatError(model.path() + ": tensor '" + scale.name + "' has dtype " +
                      std::string(dtype_name(scale.dtype)) + " and a shape that " +
                      std::string(fp8::scaling_name(r.scaling)) + " scales of '" + data.name +
                      "' cannot have");
  return p;
}

Fp8PairScales::Fp8PairScales(const fp8::Plan& plan, const uint8_t* scale_bytes) {
  if (plan.recipe.scaling == fp8::Scaling::mxfp8) {
    view.e8m0 = scale_bytes;
    return;
  }
  scale_inv.resize(plan.grid.size());
  std::memcpy(scale_inv.data(), scale_bytes, scale_inv.size() * 4);
  view.scale_inv = scale_inv.data();
}

}  // namespace fpg::convert
