#include "layout/shard.h"

#include "layout/padding.h"

namespace fpg::layout {

std::optional<Fragment> fragment_of(const Range& param_world, uint64_t bucket_offset, uint64_t shard_numel,
                                    uint32_t rank) {
  const uint64_t w0 = bucket_offset + uint64_t{rank} * shard_numel;
  const Range owned = param_world.intersect({w0, w0 + shard_numel});
  if (owned.empty()) return std::nullopt;
  Fragment f;
  f.local = owned.shift_down(w0);
  f.gbuf_world = owned;
  f.world_in_bucket = owned.shift_down(bucket_offset);
  f.param_range = owned.shift_down(param_world.begin);
  return f;
}

void cut_bucket(Bucket& bucket, const std::vector<ParamSlot>& slots, uint32_t dp) {
  const uint64_t o = bucket.world.begin;
  bucket.shard_numel = bucket.numel() / dp;
  const uint64_t l = bucket.shard_numel;

  // The gaps between params, then the tail: everything in [0, S) that no slot covers.
  bucket.padding.clear();
  uint64_t cursor = 0;
  for (uint64_t s = bucket.slots.begin; s < bucket.slots.end; ++s) {
    const Range in_bucket = slots[s].world.shift_down(o);
    if (in_bucket.begin > cursor) bucket.padding.push_back({cursor, in_bucket.begin});
    cursor = in_bucket.end;
  }
  if (bucket.numel() > cursor) bucket.padding.push_back({cursor, bucket.numel()});

  bucket.shards.assign(dp, Shard{});
  uint64_t first = bucket.slots.begin;  // first slot that may still reach this or a later shard
  size_t pad = 0;                       // same, for padding intervals
  for (uint32_t r = 0; r < dp; ++r) {
    Shard& sh = bucket.shards[r];
    sh.rank = r;
    sh.world = {o + uint64_t{r} * l, o + uint64_t{r + 1} * l};
    const Range in_bucket = sh.world.shift_down(o);
    for (uint64_t s = first; s < bucket.slots.end && slots[s].world.begin < sh.world.end; ++s) {
      if (auto f = fragment_of(slots[s].world, o, l, r)) {
        f->param = slots[s].param;
        f->slot = static_cast<uint32_t>(s);
        sh.fragments.push_back(*f);
      }
      if (slots[s].world.end <= sh.world.end) first = s + 1;
    }
    for (size_t i = pad; i < bucket.padding.size() && bucket.padding[i].begin < in_bucket.end; ++i) {
      const Range piece = bucket.padding[i].intersect(in_bucket);
      if (!piece.empty()) sh.padding.push_back(piece);
      if (bucket.padding[i].end <= in_bucket.end) pad = i + 1;
    }
  }
}

std::string check_buffer(const Buffer& buf, uint32_t dp, bool pad_for_nccl) {
  if (buf.params.empty()) return "a buffer without params";
  const uint64_t div = bucket_end_divisor(dp, pad_for_nccl);
  uint64_t expect_start = 0;
  uint64_t next_slot = 0;
  for (size_t b = 0; b < buf.buckets.size(); ++b) {
    const Bucket& bk = buf.buckets[b];
    const std::string where = "bucket " + std::to_string(b) + ": ";
    if (bk.world.begin != expect_start || bk.world.end <= bk.world.begin)
      return where + "range " + to_string(bk.world) + " does not follow the previous bucket";
    if (bk.world.end % div != 0)
      return where + "end " + std::to_string(bk.world.end) + " is not a multiple of " + std::to_string(div);
    if (bk.slots.begin != next_slot || bk.slots.empty() || bk.slots.end > buf.params.size())
      return where + "param slots " + to_string(bk.slots) + " are not the next ones";
    uint64_t cursor = bk.world.begin;
    for (uint64_t s = bk.slots.begin; s < bk.slots.end; ++s) {
      const ParamSlot& ps = buf.params[s];
      const std::string pw = "param '" + ps.name + "': ";
      if (ps.bucket != b) return pw + "bucket " + std::to_string(ps.bucket) + " should be " + std::to_string(b);
      if (ps.world.empty() || ps.world.begin < cursor || ps.world.end > bk.world.end)
        return pw + "range " + to_string(ps.world) + " overlaps a neighbour or leaves bucket " +
               std::to_string(b) + " " + to_string(bk.world);
      if (ps.world.begin % kParamStartAlign != 0)
        return pw + "start " + std::to_string(ps.world.begin) + " is not 64-aligned";
      cursor = ps.world.end;
    }
    if (bk.numel_unpadded != cursor - bk.world.begin)
      return where + "numel_unpadded " + std::to_string(bk.numel_unpadded) + " should be " +
             std::to_string(cursor - bk.world.begin);
    expect_start = bk.world.end;
    next_slot = bk.slots.end;
  }
  if (next_slot != buf.params.size()) return "params after the last bucket";
  if (buf.numel != expect_start)
    return "numel " + std::to_string(buf.numel) + " should be " + std::to_string(expect_start);
  return "";
}

}  // namespace fpg::layout
