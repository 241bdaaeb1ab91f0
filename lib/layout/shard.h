// Cutting a bucket into dp equal shards and a param into the fragments those shards own
// (Megatron-Core optimizer/distrib_optimizer.py: _build_model_gbuf_range,
// _build_model_gbuf_param_range_map).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "layout/bucketed_layout.h"

namespace fpg::layout {

// The piece of the param at buffer range `param_world` that rank `rank` owns in a bucket at buffer
// offset `bucket_offset` with shard size `shard_numel`, or nothing if they do not overlap.
// Fills local, gbuf_world, world_in_bucket and param_range (param and slot are left 0).
std::optional<Fragment> fragment_of(const Range& param_world, uint64_t bucket_offset, uint64_t shard_numel,
                                    uint32_t rank);

// Fills bucket.shard_numel, bucket.padding and bucket.shards from bucket.world, bucket.slots and the
// slots' ranges. bucket.world.size() must be divisible by dp.
void cut_bucket(Bucket& bucket, const std::vector<ParamSlot>& slots, uint32_t dp);

// The first structural rule `buf` breaks for this dp and padding, or "" (for layouts read from files):
// buckets tile [0, numel) from 0, end on multiples of bucket_end_divisor; slots in increasing,
// disjoint, 64-aligned ranges inside their bucket, bucket indices non-decreasing and matching
// Bucket::slots; numel_unpadded equals the last slot's end minus the bucket start.
std::string check_buffer(const Buffer& buf, uint32_t dp, bool pad_for_nccl);

}  // namespace fpg::layout
