#include "ckpt/param_export.h"

#include <cstring>

#include "core/error.h"
#include "core/float_codec.h"

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
  for (uint64_t i = 0; i < n; ++i) {
    float v = 0;
    switch (from) {
      case DType::F32: std::memcpy(&v, src + 4 * i, 4); break;
      case DType::BF16: { uint16_t h; std::memcpy(&h, src + 2 * i, 2); v = float_from_bf16(h); break; }
      case DType::F16: { uint16_t h; std::memcpy(&h, src + 2 * i, 2); v = float_from_fp16(h); break; }
      case DType::F64: { double d; std::memcpy(&d, src + 8 * i, 8); v = static_cast<float>(d); break; }
      default: throw InternalError("export: no conversion from " + std::string(dtype_name(from)));
    }
    if (to == DType::F32) {
      std::memcpy(dst + 4 * i, &v, 4);
    } else {
      const uint16_t h = bf16_from_float(v);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  }
}

}  // namespace fpg::ckpt
