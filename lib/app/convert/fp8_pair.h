// An FP8 tensor NAME and its scale tensor in a safetensors model, under either of the two namings
// loaders read: the plan that dequantizes it (for `convert --dequantize` and `train --init`), and the
// name, dtype and shape `convert --fp8` gives the scale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_file.h"
#include "fp8/recipe.h"
#include "fp8/shard.h"
#include "fp8/stacked.h"

namespace fpg::app::convert {

// How the scale of FP8 tensor NAME is named and stored. Both hold the factor that multiplies the
// FP8 values to dequantize them (fpgather's scale_inv).
enum class ScaleNaming {
  // NAME_scale_inv (fpgather, DeepSeek-V3, transformers' FineGrainedFP8): F32 grids (one scale per
  // matrix is [E...], [] for a matrix), MX scales F8_E8M0 [E..., R, C/32].
  scale_inv,
  // NAME_scale, compressed-tensors' `weight_scale` of module `weight` (vLLM, transformers): one scale
  // per matrix F32 [E..., 1] ([1] for a matrix), MX scales U8 [E..., R, C/32] (E8M0 exponents,
  // rowwise, not swizzled), block grids as with scale_inv.
  compressed_tensors,
};

// NAME's scale tensor under `naming`.
std::string scale_name(const std::string& tensor, ScaleNaming naming);

// The scale tensor of NAME quantized as `p`, under `naming`.
TensorSpec scale_spec(const std::string& tensor, const fp8::StackedPlan& p, ScaleNaming naming);

// NAME's scale tensor in `model`: NAME_scale_inv, else NAME_scale, else null. NAME_scale_inv wins
// because fpgather writes it beside whatever tensors the input had, a NAME_scale among them.
const TensorFiles::Entry* find_scale(const TensorFiles& model, const std::string& tensor);

// The recipe is the metadata's when fpgather wrote the file, else read off the scale tensor
// (F8_E8M0, or U8 named NAME_scale -> mxfp8; F32 whose shape is NAME's leading dimensions ([] included)
// for NAME_scale_inv, or those followed by 1 for NAME_scale -> tensorwise; F32 [..., ceil(R/128),
// ceil(C/128)] -> 128x128 blocks; F32 [..., R, ceil(C/128)] -> 1x128 blocks). The naming is the scale
// tensor's name. The scale's rank tells how many leading dimensions stack per-expert matrices
// (fp8/stacked.h): as many as it has beyond the matrix grid's, and they must equal NAME's. FormatError
// naming the model and tensor when the scale tensor does not have exactly the plan's dtype and shape.
fp8::StackedPlan fp8_pair_plan(const TensorFiles& model, const TensorInfo& data,
                               const TensorInfo& scale);

// The scales of a pair as dequantize_stacked reads them: the E8M0 bytes in place (MX), or the fp32
// scale_inv grids copied out (the mapping gives no alignment guarantee for floats).
struct Fp8PairScales {
  std::vector<float> scale_inv;
  fp8::ScaleView view;
  Fp8PairScales(const fp8::StackedPlan& plan, const uint8_t* scale_bytes);
  Fp8PairScales(const Fp8PairScales&) = delete;  // view points into scale_inv
  Fp8PairScales& operator=(const Fp8PairScales&) = delete;
};

}  // namespace fpg::app::convert
