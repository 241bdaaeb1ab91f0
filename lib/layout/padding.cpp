#include "layout/padding.h"

#include <algorithm>

namespace fpg::layout {

uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

uint64_t gcd_u64(uint64_t a, uint64_t b) {
  while (b) {
    const uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

uint64_t lcm_u64(uint64_t a, uint64_t b) { return a / gcd_u64(a, b) * b; }

uint64_t pad_param_start(uint64_t start) { return round_up(start, kParamStartAlign); }

uint64_t bucket_end_divisor(uint32_t dp, bool pad_for_nccl) {
  uint64_t d = lcm_u64(dp, 128);
  if (pad_for_nccl) d = lcm_u64(d, uint64_t{1} << 16);
  return d;
}

uint64_t pad_bucket_end(uint64_t end, uint32_t dp, bool pad_for_nccl) {
  return round_up(end, bucket_end_divisor(dp, pad_for_nccl));
}

uint64_t default_bucket_size(uint32_t dp) { return std::max<uint64_t>(40'000'000, 1'000'000ull * dp); }

}  // namespace fpg::layout
