// FP8 quantization of a whole tensor with a recipe, as `fpgather convert --fp8` quantizes each tensor
// of a model, and its inverse. A tensor of shape (d0, ..., dn) is the matrix (M, K) with
// M = d0*...*d(n-1) and K = dn; the scales (stored as scale_inv, what dequantization multiplies by):
//   tensorwise       F32 []
//   blockwise        F32 [ceil(M/128), ceil(K/128)]  (128x128 blocks)
//   blockwise-1x128  F32 [M, ceil(K/128)]
//   mxfp8            F8_E8M0 [M, K/32]  (K a multiple of 32)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fpgather/span.h>

namespace fpgather {

struct Recipe {
  std::string scaling = "tensorwise";  // tensorwise, blockwise, blockwise-1x128 or mxfp8
  std::string format = "e4m3";         // e4m3 or e5m2
  // Scales rounded down to powers of two; unset: the recipe's default (blockwise on, tensorwise off).
  std::optional<bool> pow2_scales;
  std::string mx_scale = "rceil";  // mxfp8's scale rule: rceil (TE, cuBLAS) or floor (OCP MX)
};

struct QuantizedTensor {
  std::vector<uint64_t> shape;
  std::string dtype;  // F8_E4M3 or F8_E5M2
  std::vector<uint8_t> data;  // one byte per element, row-major
  std::string scale_dtype;    // F32 or F8_E8M0
  std::vector<uint64_t> scale_shape;
  std::vector<uint8_t> scale_inv;  // little-endian F32, or E8M0 bytes
};

// Error(usage) for an unknown recipe name, a shape the recipe cannot take, or values not as many as
// the shape has elements.
QuantizedTensor quantize(const Recipe& recipe, const std::vector<uint64_t>& shape, Span<const float> values);

// The fp32 values data * scale_inv stands for. Error(usage) when `q` does not have the sizes the
// recipe gives its shape.
std::vector<float> dequantize(const Recipe& recipe, const QuantizedTensor& q);

}  // namespace fpgather
