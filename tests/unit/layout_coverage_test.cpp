// Properties of the bucketed layout over random specs: every element of every param is owned by
// exactly one (rank, fragment); fragments lie inside their shards; padding and fragments tile each
// bucket exactly; Megatron's bucket-size and alignment rules hold.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "catch.h"
#include "layout/bucketed_layout.h"
#include "layout/padding.h"
#include "model/model_spec.h"

using namespace fpg;
using namespace fpg::layout;

namespace {

model::ModelSpec random_spec(std::mt19937_64& rng) {
  model::ModelSpec spec;
  spec.name = "random";
  const int n = std::uniform_int_distribution<int>(1, 24)(rng);
  for (int i = 0; i < n; ++i) {
    model::Param p;
    p.name = "p" + std::to_string(i);
    const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
    if (kind < 5) {
      p.role = model::Role::vector;
      p.shape = {std::uniform_int_distribution<uint64_t>(1, 300)(rng)};
    } else {
      p.role = model::Role::matrix;
      p.shape = {std::uniform_int_distribution<uint64_t>(1, 90)(rng),
                 std::uniform_int_distribution<uint64_t>(1, 90)(rng)};
    }
    if (std::uniform_int_distribution<int>(0, 4)(rng) == 0) {
      p.dtype = DType::F32;
      p.keep_in_fp32 = true;
    }
    spec.params.push_back(p);
  }
  return spec;
}

void check_layout(const model::ModelSpec& spec, const BucketedLayout& l) {
  const uint64_t div = bucket_end_divisor(l.dp, l.pad_for_nccl);
  std::vector<int> seen(spec.params.size(), 0);
  for (const Buffer& b : l.buffers) {
    REQUIRE(!b.params.empty());
    REQUIRE(b.buckets.front().world.begin == 0);
    REQUIRE(b.buckets.back().world.end == b.numel);
    for (size_t s = 0; s < b.params.size(); ++s) {
      const ParamSlot& ps = b.params[s];
      ++seen[ps.param];
      CHECK(ps.world.begin % 64 == 0);
      CHECK(ps.world.size() == spec.params[ps.param].numel());
      if (s > 0) CHECK(b.params[s - 1].param > ps.param);  // reverse registration order
    }
    for (size_t ki = 0; ki < b.buckets.size(); ++ki) {
      const Bucket& k = b.buckets[ki];
      CAPTURE(l.dp, ki, k.world.begin, k.world.end);
      const uint64_t o = k.world.begin, sz = k.numel();
      REQUIRE(sz % l.dp == 0);
      CHECK(sz % div == 0);
      CHECK(o % div == 0);
      CHECK(k.shard_numel * l.dp == sz);
      CHECK(k.numel_unpadded <= sz);
      CHECK(sz - k.numel_unpadded < div);
      CHECK(k.numel_unpadded == b.params[k.slots.end - 1].world.end - o);
      if (ki + 1 < b.buckets.size()) CHECK(b.buckets[ki + 1].world.begin == k.world.end);
      // Bucket-size rule: only the last param of a bucket may reach the size; every closed bucket did.
      if (l.bucket_size) {
        for (uint64_t s = k.slots.begin; s + 1 < k.slots.end; ++s) CHECK(b.params[s].world.end - o < *l.bucket_size);
        if (ki + 1 < b.buckets.size()) CHECK(k.numel_unpadded >= *l.bucket_size);
      } else {
        CHECK(b.buckets.size() == 1);
      }
      for (uint64_t s = k.slots.begin; s < k.slots.end; ++s) {
        CHECK(b.params[s].bucket == ki);
        CHECK(k.world.contains(b.params[s].world));
        const uint64_t prev_end = s == k.slots.begin ? o : b.params[s - 1].world.end;
        CHECK(b.params[s].world.begin - prev_end < 64);  // no gap wider than the alignment
      }

      // Tiling of [0, S) in bucket coordinates by all shards' fragments and padding.
      std::vector<Range> tiles;
      std::vector<Range> pad_union;
      std::vector<std::vector<Range>> per_param(b.params.size());
      REQUIRE(k.shards.size() == l.dp);
      for (uint32_t r = 0; r < l.dp; ++r) {
        const Shard& sh = k.shards[r];
        CHECK(sh.rank == r);
        CHECK(sh.world == Range{o + r * k.shard_numel, o + (r + 1) * k.shard_numel});
        const Range in_bucket = sh.world.shift_down(o);
        uint64_t last = 0;
        for (const Fragment& f : sh.fragments) {
          CHECK(!f.local.empty());
          CHECK(Range{0, k.shard_numel}.contains(f.local));
          CHECK(sh.world.contains(f.gbuf_world));
          CHECK(f.gbuf_world == f.local.shift_up(sh.world.begin));
          CHECK(f.world_in_bucket == f.gbuf_world.shift_down(o));
          REQUIRE(f.slot < b.params.size());
          CHECK(b.params[f.slot].param == f.param);
          CHECK(f.param_range == f.gbuf_world.shift_down(b.params[f.slot].world.begin));
          CHECK(f.local.begin >= last);
          last = f.local.end;
          tiles.push_back(f.world_in_bucket);
          per_param[f.slot].push_back(f.param_range);
        }
        for (const Range& p : sh.padding) {
          CHECK(in_bucket.contains(p));
          tiles.push_back(p);
          pad_union.push_back(p);
        }
      }
      std::sort(tiles.begin(), tiles.end(), [](const Range& a, const Range& c) { return a.begin < c.begin; });
      uint64_t cursor = 0;
      for (const Range& t : tiles) {
        REQUIRE(t.begin == cursor);
        cursor = t.end;
      }
      CHECK(cursor == sz);
      // The bucket's padding list is the union of the shards' padding.
      uint64_t pad_total = 0, pad_union_total = 0;
      for (const Range& p : k.padding) pad_total += p.size();
      for (const Range& p : pad_union) pad_union_total += p.size();
      CHECK(pad_total == pad_union_total);
      if (k.numel_unpadded < sz) {
        REQUIRE(!k.padding.empty());
        CHECK(k.padding.back() == Range{k.numel_unpadded, sz});
      }
      // Each param of the bucket is tiled exactly by its fragments, in rank order.
      for (uint64_t s = k.slots.begin; s < k.slots.end; ++s) {
        uint64_t c = 0;
        for (const Range& pr : per_param[s]) {
          REQUIRE(pr.begin == c);
          c = pr.end;
        }
        CHECK(c == spec.params[b.params[s].param].numel());
      }
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == 1);
}

}  // namespace

TEST_CASE("coverage: every element owned exactly once, padding and fragments tile buckets", "[layout]") {
  std::mt19937_64 rng(20260901);
  const std::vector<uint32_t> dps = {1, 2, 3, 4, 5, 6, 7, 8, 16, 64};
  for (int trial = 0; trial < 40; ++trial) {
    const auto spec = random_spec(rng);
    for (uint32_t dp : dps) {
      BucketedOptions o;
      o.dp = dp;
      const int bs = std::uniform_int_distribution<int>(0, 3)(rng);
      if (bs == 1) o.bucket_size = std::uniform_int_distribution<uint64_t>(1, 3000)(rng);
      if (bs == 2) o.bucket_size = std::uniform_int_distribution<uint64_t>(3000, 20000)(rng);
      o.pad_for_nccl = std::uniform_int_distribution<int>(0, 7)(rng) == 0;
      CAPTURE(trial, dp, o.pad_for_nccl, o.bucket_size.value_or(0));
      const auto l = build_bucketed_layout(spec, o);
      check_layout(spec, l);
      // Every rank's fragments together cover each param once.
      uint64_t owned = 0;
      for (uint32_t r = 0; r < dp; ++r)
        for (const auto& rf : rank_fragments(l, r)) owned += rf.fragment.param_range.size();
      CHECK(owned == spec.numel());
    }
  }
}
