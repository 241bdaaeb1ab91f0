// The bucketed layout against hand-worked examples of Megatron-Core's layout, shards and
// dp_reshardable padding chunks (each case states its own figures).
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "layout/bucketed_layout.h"
#include "layout/padding.h"
#include "layout/shard.h"
#include "model/model_spec.h"

using namespace fpg;
using namespace fpg::layout;

namespace {

// 1-D params of these sizes, named p0, p1, ... in registration order.
model::ModelSpec vectors(const std::vector<uint64_t>& sizes, DType dtype = DType::BF16) {
  model::ModelSpec spec;
  spec.name = "test";
  for (size_t i = 0; i < sizes.size(); ++i)
    spec.params.push_back({"p" + std::to_string(i), {sizes[i]}, dtype, model::Role::vector, false, false});
  return spec;
}

BucketedOptions opts(uint32_t dp, std::optional<uint64_t> bucket_size = std::nullopt, bool nccl = false) {
  BucketedOptions o;
  o.dp = dp;
  o.bucket_size = bucket_size;
  o.pad_for_nccl = nccl;
  return o;
}

struct Expect {
  uint32_t param;
  Range param_range;
  Range world_in_bucket;
};

void check_fragments(const Shard& sh, const std::vector<Expect>& want) {
  REQUIRE(sh.fragments.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(sh.rank, i);
    CHECK(sh.fragments[i].param == want[i].param);
    CHECK(sh.fragments[i].param_range == want[i].param_range);
    CHECK(sh.fragments[i].world_in_bucket == want[i].world_in_bucket);
  }
}

}  // namespace

TEST_CASE("padding rules: 64-element param starts, bucket ends at lcm(dp, 128[, 2^16])", "[layout]") {
  CHECK(pad_param_start(0) == 0);
  CHECK(pad_param_start(1) == 64);
  CHECK(pad_param_start(64) == 64);
  CHECK(pad_param_start(1064) == 1088);
  CHECK(bucket_end_divisor(1, false) == 128);
  CHECK(bucket_end_divisor(3, false) == 384);
  CHECK(bucket_end_divisor(6, false) == 384);
  CHECK(bucket_end_divisor(8, false) == 128);
  CHECK(bucket_end_divisor(64, false) == 128);
  CHECK(bucket_end_divisor(256, false) == 256);
  CHECK(bucket_end_divisor(3, true) == 3 * 65536);
  CHECK(bucket_end_divisor(6, true) == 3 * 65536);
  CHECK(bucket_end_divisor(8, true) == 65536);
  CHECK(bucket_end_divisor(64, true) == 65536);
  CHECK(pad_bucket_end(1516, 4, false) == 1536);
  CHECK(pad_bucket_end(1516, 3, false) == 1536);
  CHECK(pad_bucket_end(1537, 3, false) == 1920);
  CHECK(pad_bucket_end(4024, 8, true) == 65536);
  // The worked example's bucket at other dp sizes: 1516 elements padded to a multiple of lcm(dp, 128).
  const std::pair<uint32_t, uint64_t> sizes[] = {{3, 1536}, {6, 1536}, {8, 1536}, {64, 1536}, {5, 1920}};
  for (const auto& [dp, padded] : sizes) {
    CAPTURE(dp);
    const auto l = build_bucketed_layout(vectors({300, 100, 1000, 10}), opts(dp));
    CHECK(l.buffers[0].buckets[0].numel_unpadded == 1516);
    CHECK(l.buffers[0].buckets[0].numel() == padded);
    CHECK(l.buffers[0].buckets[0].shard_numel == padded / dp);
  }
  CHECK(default_bucket_size(8) == 40'000'000);
  CHECK(default_bucket_size(64) == 64'000'000);
}

TEST_CASE("worked example: DP=4, one bucket", "[layout]") {
  const auto spec = vectors({300, 100, 1000, 10});
  const auto l = build_bucketed_layout(spec, opts(4));
  REQUIRE(l.buffers.size() == 1);
  const Buffer& b = l.buffers[0];
  CHECK(b.key == BufferKey{DType::BF16, DType::F32, false});
  REQUIRE(b.params.size() == 4);
  // Reverse registration order, starts padded to 64.
  CHECK(b.params[0].param == 3);
  CHECK(b.params[0].world == Range{0, 10});
  CHECK(b.params[1].param == 2);
  CHECK(b.params[1].world == Range{64, 1064});
  CHECK(b.params[2].param == 1);
  CHECK(b.params[2].world == Range{1088, 1188});
  CHECK(b.params[3].param == 0);
  CHECK(b.params[3].world == Range{1216, 1516});

  REQUIRE(b.buckets.size() == 1);
  const Bucket& k = b.buckets[0];
  CHECK(k.numel_unpadded == 1516);
  CHECK(k.world == Range{0, 1536});
  CHECK(k.shard_numel == 384);
  CHECK(b.numel == 1536);
  CHECK(k.padding == std::vector<Range>{{10, 64}, {1064, 1088}, {1188, 1216}, {1516, 1536}});

  REQUIRE(k.shards.size() == 4);
  CHECK(k.shards[0].world == Range{0, 384});
  CHECK(k.shards[1].world == Range{384, 768});
  CHECK(k.shards[2].world == Range{768, 1152});
  CHECK(k.shards[3].world == Range{1152, 1536});
  check_fragments(k.shards[0], {{3, {0, 10}, {0, 10}}, {2, {0, 320}, {64, 384}}});
  check_fragments(k.shards[1], {{2, {320, 704}, {384, 768}}});
  check_fragments(k.shards[2], {{2, {704, 1000}, {768, 1064}}, {1, {0, 64}, {1088, 1152}}});
  check_fragments(k.shards[3], {{1, {64, 100}, {1152, 1188}}, {0, {0, 300}, {1216, 1516}}});

  // Local and buffer coordinates of the fragments that straddle boundaries.
  const Fragment& f = k.shards[2].fragments[1];
  CHECK(f.local == Range{320, 384});
  CHECK(f.gbuf_world == Range{1088, 1152});
  CHECK(f.slot == 2);
  CHECK(k.shards[3].fragments[0].local == Range{0, 36});

  // The dp_reshardable chunks: each shard's padding, clipped to numel_unpadded, fills its gaps.
  CHECK(k.shards[0].padding == std::vector<Range>{{10, 64}});
  CHECK(k.shards[1].padding.empty());
  CHECK(k.shards[2].padding == std::vector<Range>{{1064, 1088}});
  CHECK(k.shards[3].padding == std::vector<Range>{{1188, 1216}, {1516, 1536}});
}

TEST_CASE("worked example: bucket_size 1000 closes bucket 0 after p2", "[layout]") {
  const auto spec = vectors({300, 100, 1000, 10});
  const auto l = build_bucketed_layout(spec, opts(4, 1000));
  REQUIRE(l.buffers.size() == 1);
  const Buffer& b = l.buffers[0];
  REQUIRE(b.buckets.size() == 2);
  CHECK(b.buckets[0].world == Range{0, 1152});
  CHECK(b.buckets[0].numel_unpadded == 1064);
  CHECK(b.buckets[0].slots == Range{0, 2});
  CHECK(b.buckets[1].world == Range{1152, 1664});
  CHECK(b.buckets[1].numel_unpadded == 428);
  CHECK(b.buckets[1].numel() == 512);
  CHECK(b.buckets[1].slots == Range{2, 4});
  CHECK(b.params[2].world == Range{1152, 1252});  // p1 at +0
  CHECK(b.params[3].world == Range{1280, 1580});  // p0 at +128
  CHECK(b.params[2].bucket == 1);
  CHECK(b.numel == 1664);
  // Bucket 1 is cut into shards of 128 from its own start.
  const Bucket& k = b.buckets[1];
  CHECK(k.shard_numel == 128);
  check_fragments(k.shards[0], {{1, {0, 100}, {0, 100}}});
  check_fragments(k.shards[1], {{0, {0, 128}, {128, 256}}});
  check_fragments(k.shards[2], {{0, {128, 256}, {256, 384}}});
  check_fragments(k.shards[3], {{0, {256, 300}, {384, 428}}});
  CHECK(k.shards[3].world == Range{1536, 1664});
  CHECK(k.shards[3].padding == std::vector<Range>{{428, 512}});
}

TEST_CASE("a bucket closes as soon as it reaches bucket_size; a param never splits", "[layout]") {
  // 3 x 100 elements, bucket_size 200: [p2 p1] reach 164+100 = 264 >= 200 at p1; p0 alone.
  const auto l = build_bucketed_layout(vectors({100, 100, 100}), opts(2, 200));
  const Buffer& b = l.buffers[0];
  REQUIRE(b.buckets.size() == 2);
  CHECK(b.buckets[0].numel_unpadded == 228);
  CHECK(b.buckets[0].world == Range{0, 256});
  CHECK(b.buckets[1].world == Range{256, 384});
  // A param bigger than bucket_size gets a bucket of its own.
  const auto big = build_bucketed_layout(vectors({10, 5000, 10}), opts(2, 1000));
  REQUIRE(big.buffers[0].buckets.size() == 2);
  CHECK(big.buffers[0].buckets[0].numel_unpadded == 5064);
  CHECK(big.buffers[0].buckets[1].numel_unpadded == 10);
}

TEST_CASE("DP=8 with a gap before the last shard's fragment", "[layout]") {
  const auto l = build_bucketed_layout(vectors({750, 900}), opts(8));
  const Bucket& k = l.buffers[0].buckets[0];
  CHECK(l.buffers[0].params[0].world == Range{0, 900});
  CHECK(l.buffers[0].params[1].world == Range{960, 1710});
  CHECK(k.numel_unpadded == 1710);
  CHECK(k.world == Range{0, 1792});
  CHECK(k.shard_numel == 224);
  check_fragments(k.shards[7], {{0, {608, 750}, {1568, 1710}}});
  CHECK(k.shards[7].padding == std::vector<Range>{{1710, 1792}});
  // Rank 4 holds the end of p1, the gap, and the start of p0.
  check_fragments(k.shards[4], {{1, {896, 900}, {896, 900}}, {0, {0, 160}, {960, 1120}}});
  CHECK(k.shards[4].padding == std::vector<Range>{{900, 960}});
}

TEST_CASE("a param spanning many rank boundaries has one fragment per rank", "[layout]") {
  const auto l = build_bucketed_layout(vectors({1000}), opts(6));
  const Bucket& k = l.buffers[0].buckets[0];
  CHECK(k.world == Range{0, 1152});  // lcm(6, 128) = 384
  CHECK(k.shard_numel == 192);
  for (uint32_t r = 0; r < 6; ++r) {
    CAPTURE(r);
    const Shard& sh = k.shards[r];
    REQUIRE(sh.fragments.size() == 1);
    const uint64_t lo = r * 192, hi = std::min<uint64_t>(1000, (r + 1) * 192);
    CHECK(sh.fragments[0].param_range == Range{lo, hi});
    CHECK(sh.fragments[0].local == Range{0, hi - lo});
  }
  CHECK(k.shards[5].padding == std::vector<Range>{{1000, 1152}});
}

TEST_CASE("ranks owning nothing in a bucket", "[layout]") {
  SECTION("bucket smaller than dp: DP=256, 1000 elements") {
    const auto l = build_bucketed_layout(vectors({1000}), opts(256));
    const Bucket& k = l.buffers[0].buckets[0];
    CHECK(k.world == Range{0, 1024});
    CHECK(k.shard_numel == 4);
    for (uint32_t r = 0; r < 256; ++r) {
      CAPTURE(r);
      CHECK(k.shards[r].fragments.empty() == (r >= 250));
      CHECK(k.shards[r].padding.empty() == (r < 250));
    }
    CHECK(rank_fragments(l, 255).empty());
    CHECK(rank_fragments(l, 0).size() == 1);
  }
  SECTION("busbw padding: DP=8, a 4024-element bucket padded to 2^16") {
    const auto l = build_bucketed_layout(vectors({4024}), opts(8, std::nullopt, true));
    const Bucket& k = l.buffers[0].buckets[0];
    CHECK(k.numel_unpadded == 4024);
    CHECK(k.world == Range{0, 65536});
    CHECK(k.shard_numel == 8192);
    check_fragments(k.shards[0], {{0, {0, 4024}, {0, 4024}}});
    for (uint32_t r = 1; r < 8; ++r) {
      CHECK(k.shards[r].fragments.empty());
      CHECK(k.shards[r].padding == std::vector<Range>{{r * 8192ull, (r + 1) * 8192ull}});
    }
  }
  SECTION("more ranks than elements in a second bucket") {
    const auto l = build_bucketed_layout(vectors({3, 5000}), opts(16, 1000));
    const Bucket& k = l.buffers[0].buckets[1];
    CHECK(k.numel_unpadded == 3);
    CHECK(k.shard_numel == 8);  // lcm(16, 128) = 128
    CHECK(k.shards[0].fragments.size() == 1);
    for (uint32_t r = 1; r < 16; ++r) CHECK(k.shards[r].fragments.empty());
  }
}

TEST_CASE("one buffer per key: fp32-kept params apart, keys in order of first appearance", "[layout]") {
  model::ModelSpec spec = vectors({100, 200, 300, 400, 500});
  spec.params[1].dtype = DType::F32;
  spec.params[1].keep_in_fp32 = true;
  spec.params[3].dtype = DType::F32;
  spec.params[3].keep_in_fp32 = true;
  const auto l = build_bucketed_layout(spec, opts(4));
  REQUIRE(l.buffers.size() == 2);
  CHECK(l.buffers[0].key == BufferKey{DType::BF16, DType::F32, false});
  CHECK(l.buffers[1].key == BufferKey{DType::F32, DType::F32, false});
  REQUIRE(l.buffers[0].params.size() == 3);
  CHECK(l.buffers[0].params[0].param == 4);
  CHECK(l.buffers[0].params[1].param == 2);
  CHECK(l.buffers[0].params[2].param == 0);
  REQUIRE(l.buffers[1].params.size() == 2);
  CHECK(l.buffers[1].params[0].param == 3);
  CHECK(l.buffers[1].params[0].world == Range{0, 400});
  CHECK(l.buffers[1].params[1].param == 1);
  CHECK(l.buffers[1].params[1].world == Range{448, 648});
  // Each buffer starts at 0 and is cut on its own: the fp32 one is [0, 768), L = 192.
  CHECK(l.buffers[1].buckets[0].world == Range{0, 768});
  // At dp = 8 the fp32 buffer is [0, 768) in shards of 96: rank 7 owns none of it.
  const auto l8 = build_bucketed_layout(spec, opts(8));
  CHECK(l8.buffers[1].buckets[0].shard_numel == 96);
  CHECK(l8.buffers[1].buckets[0].shards[7].fragments.empty());
  CHECK(l8.buffers[1].buckets[0].shards[6].fragments.size() == 1);
  const auto loc = l.locate(3);
  REQUIRE(loc);
  CHECK(loc->buffer == 1);
  CHECK(loc->slot == 0);
  CHECK(!build_bucketed_layout(spec, opts(4), {0, 2}).locate(3));

  SECTION("grads in the param dtype") {
    BucketedOptions o = opts(4);
    o.grad_reduce_in_fp32 = false;
    const auto m = build_bucketed_layout(spec, o);
    CHECK(m.buffers[0].key == BufferKey{DType::BF16, DType::BF16, false});
  }
  SECTION("FP8 params go to a U8 buffer") {
    BucketedOptions o = opts(4);
    o.fp8 = {true, false, false, false, true};
    const auto m = build_bucketed_layout(spec, o);
    REQUIRE(m.buffers.size() == 3);
    CHECK(m.buffers[0].key.param_dtype == DType::U8);
    CHECK(m.buffers[0].params.size() == 2);
    o.fp8 = {true};
    CHECK_THROWS_AS(build_bucketed_layout(spec, o), UsageError);
  }
  CHECK_THROWS_AS(build_bucketed_layout(spec, opts(0)), UsageError);
}

TEST_CASE("fragment_of follows Megatron's _build_model_gbuf_param_range_map", "[layout]") {
  // Bucket at 1152, L = 128, param at [1280, 1580): rank 1 owns [0, 128) of it.
  auto f = fragment_of({1280, 1580}, 1152, 128, 1);
  REQUIRE(f);
  CHECK(f->local == Range{0, 128});
  CHECK(f->gbuf_world == Range{1280, 1408});
  CHECK(f->world_in_bucket == Range{128, 256});
  CHECK(f->param_range == Range{0, 128});
  CHECK(!fragment_of({1280, 1580}, 1152, 128, 0));
  CHECK(!fragment_of({0, 10}, 0, 384, 1));
}

TEST_CASE("bucketed layout: a shared embedding is a bucket of its own", "[layout][bucketed]") {
  // Registration [emb 200, a 100, b 70]; layout order b, a, emb. Megatron's shared_embedding closes
  // the open bucket at emb's padded start (pad64(228) = 256) and emb's own bucket at its end.
  BucketedOptions o = opts(1);
  o.own_bucket = {true, false, false};
  const BucketedLayout L = build_bucketed_layout(vectors({200, 100, 70}), o);
  REQUIRE(L.buffers.size() == 1);
  const Buffer& b = L.buffers[0];
  REQUIRE(b.buckets.size() == 2);
  CHECK(b.buckets[0].world == Range{0, 256});
  CHECK(b.buckets[0].numel_unpadded == 256);
  CHECK(b.buckets[1].world == Range{256, 512});
  CHECK(b.buckets[1].numel_unpadded == 200);
  CHECK(b.params[2].world == Range{256, 456});
  CHECK(b.numel == 512);
  // A bucket size closes buckets as before, the shared embedding still alone: b + a reach 228 >= 200.
  o.bucket_size = 200;
  const BucketedLayout S = build_bucketed_layout(vectors({200, 100, 70}), o);
  REQUIRE(S.buffers[0].buckets.size() == 2);
  CHECK(S.buffers[0].buckets[0].numel_unpadded == 228);
  CHECK(S.buffers[0].buckets[1].world == Range{256, 512});
  // First in layout order (registered last): nothing to close before it.
  o.bucket_size = std::nullopt;
  o.own_bucket = {false, false, true};
  const BucketedLayout F = build_bucketed_layout(vectors({200, 100, 70}), o);
  REQUIRE(F.buffers[0].buckets.size() == 2);
  CHECK(F.buffers[0].buckets[0].numel_unpadded == 70);
  CHECK(F.buffers[0].buckets[1].world.begin == 128);
  o.own_bucket = {true};
  CHECK_THROWS_AS(build_bucketed_layout(vectors({200, 100, 70}), o), UsageError);
}
