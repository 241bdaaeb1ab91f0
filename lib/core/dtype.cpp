#include "core/dtype.h"

#include <array>

namespace fpg {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  int bits;
  bool is_float;
};

constexpr std::array<DTypeInfo, 22> kTypes = {{
    {DType::BOOL, "BOOL", 8, false},         {DType::U8, "U8", 8, false},
    {DType::I8, "I8", 8, false},             {DType::F8_E5M2, "F8_E5M2", 8, true},
    {DType::F8_E4M3, "F8_E4M3", 8, true},    {DType::F8_E8M0, "F8_E8M0", 8, true},
    {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8, true}, {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8, true},
    {DType::F4, "F4", 4, true},              {DType::F6_E2M3, "F6_E2M3", 6, true},
    {DType::F6_E3M2, "F6_E3M2", 6, true},    {DType::I16, "I16", 16, false},
    {DType::U16, "U16", 16, false},          {DType::F16, "F16", 16, true},
    {DType::BF16, "BF16", 16, true},         {DType::I32, "I32", 32, false},
    {DType::U32, "U32", 32, false},          {DType::F32, "F32", 32, true},
    {DType::C64, "C64", 64, false},          {DType::F64, "F64", 64, true},
    {DType::I64, "I64", 64, false},          {DType::U64, "U64", 64, false},
}};

const DTypeInfo& info(DType t) { return kTypes[static_cast<size_t>(t)]; }

}  // namespace

std::string_view dtype_name(DType t) { return info(t).name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& i : kTypes)
    if (i.name == name) return i.type;
  return std::nullopt;
}

int dtype_bits(DType t) { return info(t).bits; }

uint64_t dtype_bytes(DType t, uint64_t numel) {
  return (numel * static_cast<uint64_t>(dtype_bits(t)) + 7) / 8;
}

bool dtype_is_float(DType t) { return info(t).is_float; }

bool dtype_is_decodable_float(DType t) {
  switch (t) {
    case DType::BF16: case DType::F16: case DType::F32: case DType::F64:
    case DType::F8_E4M3: case DType::F8_E5M2: case DType::F8_E8M0:
      return true;
    default:
      return false;
  }
}

}  // namespace fpg
