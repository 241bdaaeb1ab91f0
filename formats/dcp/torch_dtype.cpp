#include "formats/dcp/torch_dtype.h"

#include <iterator>

namespace fpg::dcp {
namespace {

// Every dtype torch 2.15 defines, with its itemsize. Sub-byte integer placeholders and
// the packed float4 pair occupy one byte per element as torch stores them.
constexpr TorchDType kDTypes[] = {
    {"float32", 4, DType::F32, "FloatStorage"},
    {"float64", 8, DType::F64, "DoubleStorage"},
    {"float16", 2, DType::F16, "HalfStorage"},
    {"bfloat16", 2, DType::BF16, "BFloat16Storage"},
    {"int64", 8, DType::I64, "LongStorage"},
    {"int32", 4, DType::I32, "IntStorage"},
    {"int16", 2, DType::I16, "ShortStorage"},
    {"int8", 1, DType::I8, "CharStorage"},
    {"uint8", 1, DType::U8, "ByteStorage"},
    {"bool", 1, DType::BOOL, "BoolStorage"},
    {"complex64", 8, DType::C64, "ComplexFloatStorage"},
    {"complex128", 16, std::nullopt, "ComplexDoubleStorage"},
    {"complex32", 4, std::nullopt, ""},
    {"bcomplex32", 4, std::nullopt, ""},
    {"qint8", 1, std::nullopt, "QInt8Storage"},
    {"qint32", 4, std::nullopt, "QInt32Storage"},
    {"quint8", 1, std::nullopt, "QUInt8Storage"},
    {"quint4x2", 1, std::nullopt, "QUInt4x2Storage"},
    {"quint2x4", 1, std::nullopt, "QUInt2x4Storage"},
    {"uint16", 2, DType::U16, ""},
    {"uint32", 4, DType::U32, ""},
    {"uint64", 8, DType::U64, ""},
    {"float8_e4m3fn", 1, DType::F8_E4M3, ""},
    {"float8_e5m2", 1, DType::F8_E5M2, ""},
    {"float8_e4m3fnuz", 1, DType::F8_E4M3FNUZ, ""},
    {"float8_e5m2fnuz", 1, DType::F8_E5M2FNUZ, ""},
    {"float8_e8m0fnu", 1, DType::F8_E8M0, ""},
    {"float4_e2m1fn_x2", 1, std::nullopt, ""},
    {"bits8", 1, std::nullopt, ""},
    {"bits16", 2, std::nullopt, ""},
    {"bits1x8", 1, std::nullopt, ""},
    {"bits2x4", 1, std::nullopt, ""},
    {"bits4x2", 1, std::nullopt, ""},
    {"uint1", 1, std::nullopt, ""},
    {"uint2", 1, std::nullopt, ""},
    {"uint3", 1, std::nullopt, ""},
    {"uint4", 1, std::nullopt, ""},
    {"uint5", 1, std::nullopt, ""},
    {"uint6", 1, std::nullopt, ""},
    {"uint7", 1, std::nullopt, ""},
    {"int1", 1, std::nullopt, ""},
    {"int2", 1, std::nullopt, ""},
    {"int3", 1, std::nullopt, ""},
    {"int4", 1, std::nullopt, ""},
    {"int5", 1, std::nullopt, ""},
    {"int6", 1, std::nullopt, ""},
    {"int7", 1, std::nullopt, ""},
};

}  // namespace

const TorchDType* find_torch_dtype(std::string_view name) {
  for (const TorchDType& d : kDTypes)
    if (d.name == name) return &d;
  return nullptr;
}

const TorchDType* find_torch_dtype_by_storage(std::string_view storage_class) {
  if (storage_class.empty()) return nullptr;
  for (const TorchDType& d : kDTypes)
    if (d.storage_class == storage_class) return &d;
  return nullptr;
}

std::string_view torch_dtype_name(DType t) {
  for (const TorchDType& d : kDTypes)
    if (d.dtype == t) return d.name;
  return {};
}

}  // namespace fpg::dcp
