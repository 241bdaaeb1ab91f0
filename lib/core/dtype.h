// Element types of stored tensors, named as safetensors names them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fpg {

enum class DType : uint8_t {
  BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, F4, F6_E2M3, F6_E3M2,
  I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64,
};

// "BF16", "F8_E4M3", ... exactly as in a safetensors header.
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);

// Storage size in bits of one element (4 for F4, 6 for the F6 types).
int dtype_bits(DType t);

// Bytes for `numel` elements; sub-byte types are packed and the count rounded up to whole bytes.
uint64_t dtype_bytes(DType t, uint64_t numel);

// True for the formats fpgather can decode to fp32 (BF16, F16, F32, F64, F8_E4M3, F8_E5M2, F8_E8M0).
bool dtype_is_decodable_float(DType t);

// True for every floating type (including FP8, FP4/FP6 and the MX scale type).
bool dtype_is_float(DType t);

}  // namespace fpg
