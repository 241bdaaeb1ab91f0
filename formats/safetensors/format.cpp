#include "formats/safetensors/format.h"

#include <limits>

#include "core/printable.h"

namespace fpg::safetensors {

bool checked_nbytes(DType dtype, uint64_t numel, uint64_t* nbytes) {
  const uint64_t bits = static_cast<uint64_t>(dtype_bits(dtype));
  if (numel > std::numeric_limits<uint64_t>::max() / bits) return false;
  const uint64_t total_bits = numel * bits;
  if (total_bits % 8 != 0) return false;
  *nbytes = total_bits / 8;
  return true;
}

int reference_dtype_rank(DType dtype) {
  switch (dtype) {
    case DType::BOOL: return 0;
    case DType::F4: return 1;
    case DType::F6_E2M3: return 2;
    case DType::F6_E3M2: return 3;
    case DType::U8: return 4;
    case DType::I8: return 5;
    case DType::F8_E5M2: return 6;
    case DType::F8_E4M3: return 7;
    case DType::F8_E8M0: return 8;
    case DType::F8_E4M3FNUZ: return 9;
    case DType::F8_E5M2FNUZ: return 10;
    case DType::I16: return 11;
    case DType::U16: return 12;
    case DType::F16: return 13;
    case DType::BF16: return 14;
    case DType::I32: return 15;
    case DType::U32: return 16;
    case DType::F32: return 17;
    case DType::C64: return 18;
    case DType::F64: return 19;
    case DType::I64: return 20;
    case DType::U64: return 21;
  }
  return -1;
}

bool reference_order_less(DType a_dtype, const std::string& a_name, DType b_dtype,
                          const std::string& b_name) {
  const int ra = reference_dtype_rank(a_dtype), rb = reference_dtype_rank(b_dtype);
  if (ra != rb) return ra > rb;
  return a_name < b_name;  // std::string compares bytes, as Rust's String ordering does
}

std::string quote_name(std::string_view name) {
  // Quotes and backslashes escaped first, so that a name cannot close its own quotes or pass for an
  // escape; printable() escapes the rest and keeps those escapes as they are.
  std::string s;
  s.reserve(name.size());
  for (char c : name) {
    if (c == '\'') s += "\\x27";
    else if (c == '\\') s += "\\x5c";
    else s += c;
  }
  return "'" + printable(s) + "'";
}

}  // namespace fpg::safetensors
