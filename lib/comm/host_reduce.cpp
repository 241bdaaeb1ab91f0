#include "comm/host_reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "core/float_codec.h"

namespace fpg::comm {
namespace {

// Elements per block: the accumulator stays in L1 while every contribution streams through it.
constexpr size_t kBlock = 2048;

// True when b must replace a as the running max: the first NaN sticks, +0 beats −0.
inline bool max_takes(float a, float b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return b > a || (b == a && std::signbit(a) && !std::signbit(b));
}

void sum_f32(const void* const* src, int n, size_t begin, size_t end, void* const* dst, int ndst) {
  float acc[kBlock];
  for (size_t i = begin; i < end; i += kBlock) {
    const size_t len = std::min(kBlock, end - i);
    std::memcpy(acc, static_cast<const float*>(src[0]) + i, len * sizeof(float));
    for (int q = 1; q < n; ++q) {
      const float* s = static_cast<const float*>(src[q]) + i;
      for (size_t j = 0; j < len; ++j) acc[j] += s[j];
    }
    for (int d = 0; d < ndst; ++d) std::memcpy(static_cast<float*>(dst[d]) + i, acc, len * sizeof(float));
  }
}

void sum_bf16(const void* const* src, int n, size_t begin, size_t end, void* const* dst, int ndst) {
  float acc[kBlock];
  uint16_t out[kBlock];
  for (size_t i = begin; i < end; i += kBlock) {
    const size_t len = std::min(kBlock, end - i);
    const uint16_t* s0 = static_cast<const uint16_t*>(src[0]) + i;
    for (size_t j = 0; j < len; ++j) acc[j] = float_from_bf16(s0[j]);
    for (int q = 1; q < n; ++q) {
      const uint16_t* s = static_cast<const uint16_t*>(src[q]) + i;
      for (size_t j = 0; j < len; ++j) acc[j] += float_from_bf16(s[j]);
    }
    for (size_t j = 0; j < len; ++j) out[j] = bf16_from_float(acc[j]);
    for (int d = 0; d < ndst; ++d) std::memcpy(static_cast<uint16_t*>(dst[d]) + i, out, len * 2);
  }
}

// Max works on the stored bits so the winner (NaN payload included) is copied exactly.
template <class Bits, float (*decode)(Bits)>
void max_bits(const void* const* src, int n, size_t begin, size_t end, void* const* dst, int ndst) {
  Bits acc[kBlock];
  for (size_t i = begin; i < end; i += kBlock) {
    const size_t len = std::min(kBlock, end - i);
    std::memcpy(acc, static_cast<const Bits*>(src[0]) + i, len * sizeof(Bits));
    for (int q = 1; q < n; ++q) {
      const Bits* s = static_cast<const Bits*>(src[q]) + i;
      for (size_t j = 0; j < len; ++j)
        if (max_takes(decode(acc[j]), decode(s[j]))) acc[j] = s[j];
    }
    for (int d = 0; d < ndst; ++d) std::memcpy(static_cast<Bits*>(dst[d]) + i, acc, len * sizeof(Bits));
  }
}

inline float f32_from_bits(uint32_t u) { return bits_float(u); }
inline float bf16_to_float(uint16_t b) { return float_from_bf16(b); }

}  // namespace

void reduce_rank_order(DType dtype, ReduceOp op, const void* const* src, int n, size_t begin, size_t end,
                       void* const* dst, int ndst) {
  if (begin >= end) return;
  if (n < 1) throw InternalError("reduce_rank_order: no contributions");
  // One contribution reduced in place is the identity (acc starts at x0): nothing to move.
  if (n == 1 && std::all_of(dst, dst + ndst, [&](void* d) { return d == src[0]; })) return;
  if (dtype == DType::F32) {
    if (op == ReduceOp::sum) return sum_f32(src, n, begin, end, dst, ndst);
    return max_bits<uint32_t, f32_from_bits>(src, n, begin, end, dst, ndst);
  }
  if (dtype == DType::BF16) {
    if (op == ReduceOp::sum) return sum_bf16(src, n, begin, end, dst, ndst);
    return max_bits<uint16_t, bf16_to_float>(src, n, begin, end, dst, ndst);
  }
  throw InternalError("reduce_rank_order: unsupported dtype");
}

}  // namespace fpg::comm
