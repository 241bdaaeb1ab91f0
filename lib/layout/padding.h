// Megatron-Core's two padding rules for the distributed optimizer's buffers (param starts to 64
// elements, bucket ends to lcm(dp, 128[, 2^16])) and DDP's default bucket size. All in elements,
// never bytes.
#pragma once

#include <cstdint>

namespace fpg::layout {

// Every param starts on a multiple of this many elements.
constexpr uint64_t kParamStartAlign = 64;

// ceil(x / m) * m, for m >= 1.
uint64_t round_up(uint64_t x, uint64_t m);

uint64_t gcd_u64(uint64_t a, uint64_t b);
uint64_t lcm_u64(uint64_t a, uint64_t b);

// ceil(start / 64) * 64.
uint64_t pad_param_start(uint64_t start);

// The divisor bucket ends are padded to: lcm(dp, 128), or lcm(dp, 128, 2^16) with pad_for_nccl
// (Megatron's pad_buckets_for_high_nccl_busbw). Makes every bucket divisible by dp, 256-byte aligned.
uint64_t bucket_end_divisor(uint32_t dp, bool pad_for_nccl);

// ceil(end / bucket_end_divisor) * bucket_end_divisor.
uint64_t pad_bucket_end(uint64_t end, uint32_t dp, bool pad_for_nccl);

// Megatron DDP's default: max(40'000'000, 1'000'000 * dp) elements. Note that it moves bucket
// boundaries once dp > 40, which breaks bucket-space resharding; pin the size where that matters.
uint64_t default_bucket_size(uint32_t dp);

}  // namespace fpg::layout
