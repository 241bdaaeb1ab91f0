// The safetensors file format, as fpgather reads and writes it.
//
// Layout: u64 little-endian N, then N bytes of UTF-8 JSON (the header), then the data section.
// The header is a JSON object: an optional "__metadata__" entry (an object of string → string, or
// null), and one entry per tensor {"dtype": STR, "shape": [u64...], "data_offsets": [begin, end]},
// offsets in bytes relative to the start of the data section, end exclusive.
//
// Rules enforced on reading (each violation is an fpg::FormatError naming the file, the tensor and,
// where it helps, the byte range):
//  - the file holds at least the 8-byte length; N ≤ 100,000,000 (the reference's limit); the header
//    ends inside the file;
//  - the header is valid JSON and UTF-8, an object, with no key repeated in any object (the reference
//    silently keeps one of two duplicated tensors; a duplicate is always a broken writer, so we refuse);
//  - "__metadata__" is an object whose values are strings (or null, which the reference treats as
//    absent);
//  - each tensor entry is an object with "dtype" (a known dtype string), "shape" (array of
//    non-negative integers; [] is a scalar of one element, zero-size dimensions allowed; the element
//    count must fit in 64 bits) and "data_offsets" (two non-negative integers, begin ≤ end); other
//    keys are ignored, as the reference does;
//  - end − begin == numel × bits / 8; for the sub-byte types (F4, F6_*) numel × bits must be a
//    multiple of 8, as in the reference (safetensors ≥ 0.6 refuses "slices that do not end at a byte
//    boundary"), so no tensor shares a byte with another;
//  - every range lies inside the data section; sorted by (begin, end), the ranges are contiguous:
//    no overlap, no gap, the first starts at 0 and the last ends exactly at the end of the file.
//    Trailing bytes after the last tensor are refused, like the reference ("file not fully covered"):
//    bytes no tensor owns are either garbage or a truncated header rewrite.
//
// Rules of the writer: the header is the compact JSON the reference writes ("__metadata__" first,
// then the tensors in file order, keys dtype, shape, data_offsets), padded with spaces so the data
// section starts at a multiple of 8. Tensors are laid out in the reference's order (see
// reference_order_less), so for the same tensors and at most one metadata key our files are
// byte-identical to safetensors' own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace fpg::safetensors {

// Largest header the reference accepts.
constexpr uint64_t kMaxHeaderSize = 100'000'000;
// The writer pads the header so the data section starts at a multiple of this.
constexpr uint64_t kHeaderAlignment = 8;
// The reserved header key of the string → string metadata map.
constexpr const char* kMetadataKey = "__metadata__";

// Element count of `shape` ([] → 1), or false on 64-bit overflow (core/shape.h).
using fpg::checked_numel;

// Byte size of `numel` elements of `dtype`, or false when numel × bits overflows 64 bits or, for a
// sub-byte type, is not a whole number of bytes.
bool checked_nbytes(DType dtype, uint64_t numel, uint64_t* nbytes);

// Rank of a dtype in the reference implementation's Dtype enum (BOOL, F4, F6_E2M3, F6_E3M2, U8, I8,
// F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, I16, U16, F16, BF16, I32, U32, F32, C64, F64,
// I64, U64), which its writer treats as increasing alignment.
int reference_dtype_rank(DType dtype);

// The reference writer's tensor order: dtype rank descending, then name (bytewise) ascending.
// Putting the widest types first keeps every tensor aligned to its element size.
bool reference_order_less(DType a_dtype, const std::string& a_name, DType b_dtype,
                          const std::string& b_name);

// 'name' for messages: quotes and backslashes as \x27 and \x5c, the rest as printable() writes it
// (core/printable.h), so a hostile header cannot garble a terminal or a log line.
std::string quote_name(std::string_view name);

}  // namespace fpg::safetensors
