#include "app/convert/fp8_pair.h"

#include <cstring>

#include "app/convert/quantize_model.h"
#include "core/printable.h"
#include "core/error.h"
#include "fp8/quantize.h"

namespace fpg::app::convert {
namespace {

bool is_prefix(const std::vector<uint64_t>& prefix, const std::vector<uint64_t>& of) {
  return prefix.size() <= of.size() && std::equal(prefix.begin(), prefix.end(), of.begin());
}

// Expert dimensions a scale of `scale_rank` implies for a matrix grid of `grid_rank` (0, 1 or 2);
// none when it cannot be (the shape check below then names the mismatch).
size_t expert_dims_of(size_t scale_rank, size_t grid_rank, size_t data_rank) {
  if (scale_rank < grid_rank) return 0;
  const size_t k = scale_rank - grid_rank;
  return k > 0 && k + 2 > data_rank ? 0 : k;
}

// A scale of `shape` is one per matrix of NAME (of `data_shape`): NAME's leading dimensions, followed
// by compressed-tensors' 1 under that naming.
bool per_tensor_shape(std::vector<uint64_t> shape, const std::vector<uint64_t>& data_shape, ScaleNaming naming) {
  if (naming == ScaleNaming::compressed_tensors) {
    if (shape.empty() || shape.back() != 1) return false;
    shape.pop_back();
  }
  return is_prefix(shape, data_shape) && (shape.empty() || shape.size() + 2 <= data_shape.size());
}

constexpr const char* kCompressedTensorsScaleSuffix = "_scale";

}  // namespace

std::string scale_name(const std::string& tensor, ScaleNaming naming) {
  return tensor + (naming == ScaleNaming::scale_inv ? kScaleSuffix : kCompressedTensorsScaleSuffix);
}

TensorSpec scale_spec(const std::string& tensor, const fp8::StackedPlan& p, ScaleNaming naming) {
  TensorSpec s{scale_name(tensor, naming), fp8::scale_inv_dtype(p.matrix), fp8::scale_inv_shape(p)};
  if (naming == ScaleNaming::compressed_tensors) {
    if (p.matrix.recipe.scaling == fp8::Scaling::mxfp8) s.dtype = DType::U8;  // the same E8M0 bytes
    if (p.matrix.recipe.scaling == fp8::Scaling::tensorwise) s.shape.push_back(1);
  }
  return s;
}

const TensorFiles::Entry* find_scale(const TensorFiles& model, const std::string& tensor) {
  if (const auto* inv = model.find(scale_name(tensor, ScaleNaming::scale_inv))) return inv;
  return model.find(scale_name(tensor, ScaleNaming::compressed_tensors));
}

fp8::StackedPlan fp8_pair_plan(const TensorFiles& model, const TensorInfo& data,
                               const TensorInfo& scale) {
  fp8::Recipe r;
  r.format = data.dtype == DType::F8_E4M3 ? fp8::Format::e4m3 : fp8::Format::e5m2;
  const size_t rank = data.shape.size(), srank = scale.shape.size();
  const ScaleNaming naming = scale.name == scale_name(data.name, ScaleNaming::compressed_tensors)
                                 ? ScaleNaming::compressed_tensors
                                 : ScaleNaming::scale_inv;
  const auto& meta = model.metadata();
  const auto recorded = meta.find(kMetadataRecipe);
  if (recorded != meta.end()) {
    const auto s = fp8::parse_scaling(recorded->second);
    if (!s) throw FormatError(model.path() + ": unknown " + kMetadataRecipe + " " + quoted_name(recorded->second));
    r.scaling = *s == fp8::Scaling::delayed ? fp8::Scaling::tensorwise : *s;  // one scale either way
  } else if (scale.dtype == DType::F8_E8M0 || (naming == ScaleNaming::compressed_tensors && scale.dtype == DType::U8)) {
    r.scaling = fp8::Scaling::mxfp8;
  } else if (per_tensor_shape(scale.shape, data.shape, naming)) {
    r.scaling = fp8::Scaling::tensorwise;
  } else {
    const size_t k = expert_dims_of(srank, 2, rank);
    const fp8::StackedPlan p128 = fp8::make_stacked_plan(fp8::Recipe::blockwise_128x128(r.format), fp8::Input::f32,
                                                         data.shape, k, data.name);
    r.scaling = fp8::scale_inv_shape(p128) == scale.shape ? fp8::Scaling::blockwise_128x128
                                                          : fp8::Scaling::blockwise_1x128;
  }
  // A matrix's grid: none for one scale (compressed-tensors' [1] under its naming), else 2-D.
  const size_t grid_rank = r.scaling != fp8::Scaling::tensorwise           ? 2
                           : naming == ScaleNaming::compressed_tensors ? 1
                                                                       : 0;
  const fp8::StackedPlan p =
      fp8::make_stacked_plan(r, fp8::Input::f32, data.shape, expert_dims_of(srank, grid_rank, rank), data.name);
  const TensorSpec want = scale_spec(data.name, p, naming);
  if (want.shape != scale.shape || want.dtype != scale.dtype)
    throw FormatError(model.path() + ": tensor " + quoted_name(scale.name) + " has dtype " +
                      std::string(dtype_name(scale.dtype)) + " and a shape that " +
                      std::string(fp8::scaling_name(r.scaling)) + " scales of '" + data.name +
                      "' cannot have");
  return p;
}

Fp8PairScales::Fp8PairScales(const fp8::StackedPlan& plan, const uint8_t* scale_bytes) {
  if (plan.matrix.recipe.scaling == fp8::Scaling::mxfp8) {
    view.e8m0 = scale_bytes;
    return;
  }
  scale_inv.resize(plan.cells());
  if (!scale_inv.empty()) std::memcpy(scale_inv.data(), scale_bytes, scale_inv.size() * 4);
  view.scale_inv = scale_inv.data();
}

}  // namespace fpg::app::convert
