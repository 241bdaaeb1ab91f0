// Whole-tensor quantization in the layouts `fpgather convert` writes, built on the shard
// API as the single fragment [0, numel):
//   NAME            F8_E4M3 / F8_E5M2, the input's shape
//   NAME_scale_inv  tensorwise / delayed  F32 []
//                   blockwise (128x128)   F32 [ceil(M/128), ceil(K/128)]
//                   blockwise-1x128       F32 [M, ceil(K/128)]
//                   mxfp8 (rowwise)       F8_E8M0 [M, K/32], compact (mx_swizzle.h for the GEMM layout)
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "fp8/recipe.h"
#include "fp8/shard.h"

namespace fpg {
namespace fp8 {

struct QuantizedTensor {
  Plan plan;
  DType dtype = DType::F8_E4M3;            // of data
  std::vector<uint8_t> data;               // rowwise data (all recipes but MX columnwise-only)
  std::vector<uint8_t> data_col;           // MX columnwise data, the input's shape
  DType scale_dtype = DType::F32;          // of scale_inv: F32, or F8_E8M0 for MX
  std::vector<uint64_t> scale_shape;       // of scale_inv, as above
  std::vector<uint8_t> scale_inv;          // its bytes (fp32 little-endian, or E8M0)
  AmaxGrid amax;                           // the combined amax grids
  Scales scales;                           // the full scale grids (scale and scale_inv, or E8M0)
};

struct QuantizeOptions {
  ThreadPool* pool = nullptr;              // null: the calling thread only
  std::optional<float> scale;              // per-tensor scale to cast with (delayed scaling: required)
};

// Quantizes a whole tensor of `shape` from `values` (fp32, bf16 raw bits, or fp32 read as bf16, per
// `in`). Throws
// UsageError naming `name` when the recipe cannot take the shape.
QuantizedTensor quantize_tensor(const Recipe& r, Input in, const std::vector<uint64_t>& shape,
                                const void* values, std::string_view name = {},
                                const QuantizeOptions& opt = {});

// The core of quantize_tensor, into the caller's buffers (numel bytes each: out when the plan has
// rowwise data, out_col when it has MX columnwise data), e.g. straight into an output file mapping.
// amax and scales are overwritten with the plan's grids.
void quantize_into(const Plan& p, const void* values, uint8_t* out, uint8_t* out_col, AmaxGrid& amax,
                   Scales& scales, const QuantizeOptions& opt = {});

// The inverse from the stored pair (data, scale_inv bytes in the layout above) to fp32.
std::vector<float> dequantize_tensor(const Recipe& r, const std::vector<uint64_t>& shape, const uint8_t* data,
                                     const uint8_t* scale_inv, std::string_view name = {});

// The shape and dtype of NAME_scale_inv for a plan.
std::vector<uint64_t> scale_inv_shape(const Plan& p);
DType scale_inv_dtype(const Plan& p);
DType data_dtype(Format f);

}  // namespace fp8
}  // namespace fpg
