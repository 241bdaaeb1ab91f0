#include "layout/bucketed_layout.h"

#include <algorithm>

#include "core/error.h"
#include "layout/padding.h"
#include "layout/shard.h"

namespace fpg::layout {

bool operator==(const Fragment& a, const Fragment& b) {
  return a.param == b.param && a.slot == b.slot && a.local == b.local && a.gbuf_world == b.gbuf_world &&
         a.world_in_bucket == b.world_in_bucket && a.param_range == b.param_range;
}
bool operator==(const Shard& a, const Shard& b) {
  return a.rank == b.rank && a.world == b.world && a.fragments == b.fragments && a.padding == b.padding;
}
bool operator==(const ParamSlot& a, const ParamSlot& b) {
  return a.param == b.param && a.name == b.name && a.bucket == b.bucket && a.world == b.world;
}
bool operator==(const Bucket& a, const Bucket& b) {
  return a.world == b.world && a.numel_unpadded == b.numel_unpadded && a.shard_numel == b.shard_numel &&
         a.slots == b.slots && a.padding == b.padding && a.shards == b.shards;
}
bool operator==(const Buffer& a, const Buffer& b) {
  return a.key == b.key && a.numel == b.numel && a.params == b.params && a.buckets == b.buckets;
}
bool operator==(const BucketedLayout& a, const BucketedLayout& b) {
  return a.dp == b.dp && a.bucket_size == b.bucket_size && a.pad_for_nccl == b.pad_for_nccl &&
         a.buffers == b.buffers;
}

std::optional<ParamLocation> BucketedLayout::locate(uint32_t param) const {
  for (size_t b = 0; b < buffers.size(); ++b)
    for (size_t s = 0; s < buffers[b].params.size(); ++s)
      if (buffers[b].params[s].param == param)
        return ParamLocation{static_cast<uint32_t>(b), static_cast<uint32_t>(s)};
  return std::nullopt;
}

uint64_t BucketedLayout::numel() const {
  uint64_t n = 0;
  for (const auto& b : buffers) n += b.numel;
  return n;
}

namespace {

BufferKey key_of(const model::Param& p, bool fp8, const BucketedOptions& opts) {
  BufferKey k;
  k.param_dtype = fp8 ? DType::U8 : p.dtype;
  k.grad_dtype = opts.grad_reduce_in_fp32 ? DType::F32 : p.dtype;
  return k;
}

// Lays out one buffer's params (given in registration order) and cuts its buckets into shards.
Buffer lay_out_buffer(const model::ModelSpec& spec, const BufferKey& key, const std::vector<uint32_t>& members,
                      const BucketedOptions& opts) {
  Buffer buf;
  buf.key = key;
  uint64_t bucket_start = 0;
  uint64_t cursor = 0;
  uint64_t first_slot = 0;
  auto close_bucket = [&](uint64_t last_end) {
    Bucket b;
    b.world = {bucket_start, pad_bucket_end(last_end, opts.dp, opts.pad_for_nccl)};
    b.numel_unpadded = last_end - bucket_start;
    b.slots = {first_slot, buf.params.size()};
    buf.buckets.push_back(std::move(b));
    bucket_start = cursor = buf.buckets.back().world.end;
    first_slot = buf.params.size();
  };
  for (auto it = members.rbegin(); it != members.rend(); ++it) {
    const model::Param& p = spec.params[*it];
    const bool own = !opts.own_bucket.empty() && opts.own_bucket[*it];
    if (own && buf.params.size() > first_slot) close_bucket(pad_param_start(cursor));
    ParamSlot slot;
    slot.param = *it;
    slot.name = p.name;
    slot.bucket = static_cast<uint32_t>(buf.buckets.size());
    slot.world.begin = pad_param_start(cursor);
    slot.world.end = slot.world.begin + p.numel();
    buf.params.push_back(slot);
    cursor = slot.world.end;
    if (own || (opts.bucket_size && slot.world.end - bucket_start >= *opts.bucket_size)) close_bucket(slot.world.end);
  }
  if (buf.params.size() > first_slot) close_bucket(buf.params.back().world.end);
  buf.numel = buf.buckets.back().world.end;
  for (auto& b : buf.buckets) cut_bucket(b, buf.params, opts.dp);
  return buf;
}

}  // namespace

BucketedLayout build_bucketed_layout(const model::ModelSpec& spec, const BucketedOptions& opts) {
  std::vector<uint32_t> all(spec.params.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>(i);
  return build_bucketed_layout(spec, opts, all);
}

BucketedLayout build_bucketed_layout(const model::ModelSpec& spec, const BucketedOptions& opts,
                                     const std::vector<uint32_t>& params) {
  if (opts.dp == 0) throw UsageError("layout: dp must be at least 1");
  if (!opts.own_bucket.empty() && opts.own_bucket.size() != spec.params.size())
    throw UsageError("layout: own-bucket flags for " + std::to_string(opts.own_bucket.size()) + " params, model has " +
                     std::to_string(spec.params.size()));
  if (!opts.fp8.empty() && opts.fp8.size() != spec.params.size())
    throw UsageError("layout: fp8 flags for " + std::to_string(opts.fp8.size()) + " params, model has " +
                     std::to_string(spec.params.size()));
  std::vector<uint32_t> members = params;
  std::sort(members.begin(), members.end());
  if (std::adjacent_find(members.begin(), members.end()) != members.end())
    throw UsageError("layout: a param is listed twice");
  if (!members.empty() && members.back() >= spec.params.size())
    throw UsageError("layout: param index " + std::to_string(members.back()) + " out of range");

  // Group by key in order of first appearance (Megatron's group_params_for_buffers fills a dict).
  std::vector<BufferKey> keys;
  std::vector<std::vector<uint32_t>> groups;
  for (uint32_t i : members) {
    const BufferKey k = key_of(spec.params[i], !opts.fp8.empty() && opts.fp8[i], opts);
    auto at = std::find(keys.begin(), keys.end(), k);
    if (at == keys.end()) {
      keys.push_back(k);
      groups.emplace_back();
      at = keys.end() - 1;
    }
    groups[static_cast<size_t>(at - keys.begin())].push_back(i);
  }

  BucketedLayout layout;
  layout.dp = opts.dp;
  layout.bucket_size = opts.bucket_size;
  layout.pad_for_nccl = opts.pad_for_nccl;
  for (size_t g = 0; g < keys.size(); ++g) layout.buffers.push_back(lay_out_buffer(spec, keys[g], groups[g], opts));
  return layout;
}

std::vector<RankFragment> rank_fragments(const BucketedLayout& layout, uint32_t rank) {
  std::vector<RankFragment> out;
  if (rank >= layout.dp) return out;
  for (size_t b = 0; b < layout.buffers.size(); ++b) {
    const Buffer& buf = layout.buffers[b];
    for (size_t k = 0; k < buf.buckets.size(); ++k)
      for (const Fragment& f : buf.buckets[k].shards[rank].fragments)
        out.push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(k), f});
  }
  return out;
}

}  // namespace fpg::layout
