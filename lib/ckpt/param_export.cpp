#include "ckpt/param_export.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/float_codec.h"
#include "core/float_decode.h"

namespace fpg::ckpt {

uint64_t ExportTensor::bytes() const {
  uint64_t n = 1;
  for (uint64_t d : spec.shape) n *= d;
  return dtype_bytes(spec.dtype, n);
}

void convert_elements(const uint8_t* src, DType from, uint8_t* dst, DType to, uint64_t n) {
  if (from == to) {
    std::memcpy(dst, src, dtype_bytes(from, n));
    return;
  }
  if (from != DType::F32 && from != DType::BF16 && from != DType::F16 && from != DType::F64)
    throw InternalError("export: no conversion from " + std::string(dtype_name(from)));
  // Decoded to fp32 a block at a time, then kept or rounded to bf16.
  constexpr uint64_t kBlock = 4096;
  float f[kBlock];
  for (uint64_t at = 0; at < n; at += kBlock) {
    const uint64_t k = std::min(kBlock, n - at);
    decode_to_f32(from, src + dtype_bytes(from, at), k, f);
    if (to == DType::F32) {
      std::memcpy(dst + 4 * at, f, 4 * k);
      continue;
    }
    for (uint64_t i = 0; i < k; ++i) {
      const uint16_t h = bf16_from_float(f[i]);
      std::memcpy(dst + 2 * (at + i), &h, 2);
    }
  }
}

}  // namespace fpg::ckpt
