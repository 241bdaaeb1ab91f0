// An FP8 tensor NAME and its NAME_scale_inv in a safetensors model (the naming of `convert --fp8`,
// quantize_model.h): the plan that dequantizes it, for `convert --dequantize` and `train --init`.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8/recipe.h"
#include "fp8/shard.h"
#include "fp8/stacked.h"
#include "formats/safetensors/model.h"

namespace fpg::convert {

// The recipe is the metadata's when fpgather wrote the file, else read off the scale tensor
// (F8_E8M0 -> mxfp8; F32 whose shape is NAME's leading dimensions, [] included -> tensorwise;
// F32 [..., ceil(R/128), ceil(C/128)] -> 128x128 blocks; F32 [..., R, ceil(C/128)] -> 1x128 blocks).
// The scale's rank tells how many leading dimensions stack per-expert matrices (fp8/stacked.h):
// as many as it has beyond the matrix grid's (0 or 2), and they must equal NAME's. FormatError
// naming the model and tensor when the scale tensor does not have exactly the plan's dtype and shape.
fp8::StackedPlan fp8_pair_plan(const safetensors::Model& model, const safetensors::TensorInfo& data,
                               const safetensors::TensorInfo& scale);

// The scales of a pair as dequantize_stacked reads them: the E8M0 bytes in place (MX), or the fp32
// scale_inv grids copied out (the mapping gives no alignment guarantee for floats).
struct Fp8PairScales {
  std::vector<float> scale_inv;
  fp8::ScaleView view;
  Fp8PairScales(const fp8::StackedPlan& plan, const uint8_t* scale_bytes);
  Fp8PairScales(const Fp8PairScales&) = delete;  // view points into scale_inv
  Fp8PairScales& operator=(const Fp8PairScales&) = delete;
};

}  // namespace fpg::convert
