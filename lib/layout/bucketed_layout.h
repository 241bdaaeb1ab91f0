// The bucketed distributed-optimizer layout (ZeRO-1), with Megatron's arithmetic exactly
// (Megatron-Core's `_ParamAndGradBuffer`, distributed/param_and_grad_buffer.py, as the distributed
// optimizer pads it; shards as optimizer/distrib_optimizer.py `_build_model_gbuf_range`):
//   - one contiguous buffer per BufferKey, in order of the keys' first appearance in registration order;
//   - params laid out in reverse registration order, each start padded to 64 elements;
//   - a bucket closes as soon as param_end - bucket_start >= bucket_size; a param never splits;
//   - a param flagged own_bucket (Megatron's shared embedding) closes the open bucket at its padded
//     start and is a bucket alone;
//   - a bucket's end is padded to lcm(dp, 128) (or lcm(dp, 128, 2^16) with pad_for_nccl), and the next
//     bucket starts there;
//   - rank r's shard of a bucket at offset O with padded size S is [O + r*L, O + (r+1)*L), L = S/dp,
//     cut without regard to param boundaries; the params' pieces inside it are its fragments.
//
// Coordinates: "buffer" (world) offsets run over the whole buffer; "bucket" offsets from the bucket's
// start O; "local" offsets from the rank's shard start; "param" offsets into the flattened param.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "layout/buffer_key.h"
#include "layout/range.h"
#include "model/model_spec.h"

namespace fpg::layout {

struct BucketedOptions {
  uint32_t dp = 1;
  // Elements per bucket (a soft minimum, see above); nullopt: one bucket per buffer, as Megatron without
  // overlap_grad_reduce. default_bucket_size(dp) gives Megatron's DDP default.
  std::optional<uint64_t> bucket_size;
  bool pad_for_nccl = false;        // bucket ends padded to lcm(dp, 128, 2^16)
  bool grad_reduce_in_fp32 = true;  // grad dtype F32 for every buffer, else the param dtype
  // Per spec param: stored as FP8, so it goes to a U8 buffer. Empty: no FP8 params.
  std::vector<bool> fp8;
  // Per spec param: laid out in a bucket of its own (Megatron's `shared_embedding`: the embedding and
  // the tied output layer's copy at PP > 1): the open bucket closes at its padded start, and its own
  // bucket at its end. Empty: none.
  std::vector<bool> own_bucket;
};

// A param's place in its buffer.
struct ParamSlot {
  uint32_t param = 0;   // index in ModelSpec::params
  std::string name;
  uint32_t bucket = 0;  // index in Buffer::buckets
  Range world;          // [param_start, param_end), buffer coordinates
};

// The part of one param that one rank owns in one bucket (Megatron's param range map entry).
struct Fragment {
  uint32_t param = 0;     // index in ModelSpec::params
  uint32_t slot = 0;      // index in Buffer::params
  Range local;            // shard coordinates, inside [0, L)
  Range gbuf_world;       // buffer coordinates: local + O + r*L
  Range world_in_bucket;  // bucket coordinates: gbuf_world - O
  Range param_range;      // [param_start, param_end) inside the flattened param
};

// Rank r's equal slice of a bucket.
struct Shard {
  uint32_t rank = 0;
  Range world;                      // [O + r*L, O + (r+1)*L), buffer coordinates
  std::vector<Fragment> fragments;  // by increasing offset; empty if the rank holds only padding
  std::vector<Range> padding;       // the rest of the shard, bucket coordinates, increasing
};

struct Bucket {
  Range world;                  // [O, O + S), buffer coordinates; S is padded
  uint64_t numel_unpadded = 0;  // last param end - O: inner 64-alignment gaps in, tail padding out
  uint64_t shard_numel = 0;     // L = S / dp
  Range slots;                  // its params: indices into Buffer::params
  // Every element of [0, S) that no param covers, bucket coordinates, increasing: the inner
  // 64-alignment gaps, then the tail [numel_unpadded, S) if S > numel_unpadded.
  std::vector<Range> padding;
  std::vector<Shard> shards;  // one per rank, shards[r].rank == r

  uint64_t numel() const { return world.size(); }
};

struct Buffer {
  BufferKey key;
  uint64_t numel = 0;             // padded size: the end of the last bucket
  std::vector<ParamSlot> params;  // layout order: reverse registration order
  std::vector<Bucket> buckets;
};

struct ParamLocation {
  uint32_t buffer = 0;  // index in BucketedLayout::buffers
  uint32_t slot = 0;    // index in Buffer::params
};

struct BucketedLayout {
  uint32_t dp = 1;
  std::optional<uint64_t> bucket_size;
  bool pad_for_nccl = false;
  std::vector<Buffer> buffers;

  // Where spec param `param` lives, or nothing if this layout does not hold it. Linear in #params.
  std::optional<ParamLocation> locate(uint32_t param) const;
  // Sum of all buffers' padded sizes.
  uint64_t numel() const;
};

bool operator==(const Fragment& a, const Fragment& b);
bool operator==(const Shard& a, const Shard& b);
bool operator==(const ParamSlot& a, const ParamSlot& b);
bool operator==(const Bucket& a, const Bucket& b);
bool operator==(const Buffer& a, const Buffer& b);
bool operator==(const BucketedLayout& a, const BucketedLayout& b);
inline bool operator!=(const BucketedLayout& a, const BucketedLayout& b) { return !(a == b); }

// The layout of every param of `spec`. UsageError if dp == 0 or opts.fp8 has the wrong size.
BucketedLayout build_bucketed_layout(const model::ModelSpec& spec, const BucketedOptions& opts);

// The layout of the params listed (spec indices, any order; laid out by registration order as above).
// The layer-wise layout puts its non-Muon params here.
BucketedLayout build_bucketed_layout(const model::ModelSpec& spec, const BucketedOptions& opts,
                                     const std::vector<uint32_t>& params);

// One fragment a rank owns, with the buffer and bucket it is in.
struct RankFragment {
  uint32_t buffer = 0;
  uint32_t bucket = 0;
  Fragment fragment;
};

// All of `rank`'s fragments, by buffer, bucket and offset: the batched copy-back walks this once.
std::vector<RankFragment> rank_fragments(const BucketedLayout& layout, uint32_t rank);

}  // namespace fpg::layout
