// Stored floating-point elements of any decodable dtype (dtype_is_decodable_float) as fp32: what a
// reader that wants plain floats gets, whatever a file holds. F64 rounds to nearest; the narrow
// formats decode exactly (core/float_codec.h).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace fpg {

// Decodes `n` little-endian elements of dtype `t` at `in` into `out`. Returns false, writing nothing,
// when `t` is not a decodable float.
bool decode_to_f32(DType t, const uint8_t* in, uint64_t n, float* out);

}  // namespace fpg
