// Order-preserving integer keys for the max reduction, so a device backend can run max as an integer
// max (exact, NaN-aware) instead of NCCL's float max, which drops NaNs (fmaxf).
//
// key(a) > key(b) exactly when reduce_op.h's max prefers a over b: NaN above everything (+inf
// included), +0 above −0, otherwise the float order. Decoding gives back the bits, except that a
// NaN comes back with its sign bit cleared; among several NaNs the largest payload wins (the threads
// backend keeps the lowest rank's NaN bits instead — the one documented difference).
// BF16 values use the same keys on their bits shifted left by 16.
#pragma once

#include <cstdint>

#include "core/hostdevice.h"

namespace fpg::comm {

FPG_HD uint32_t max_key_from_f32_bits(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return u | 0x80000000u;  // NaN: above +inf whatever its sign
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

FPG_HD uint32_t f32_bits_from_max_key(uint32_t k) { return (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k; }

FPG_HD uint32_t max_key_from_bf16(uint16_t b) { return max_key_from_f32_bits(static_cast<uint32_t>(b) << 16); }

FPG_HD uint16_t bf16_from_max_key(uint32_t k) { return static_cast<uint16_t>(f32_bits_from_max_key(k) >> 16); }

}  // namespace fpg::comm
