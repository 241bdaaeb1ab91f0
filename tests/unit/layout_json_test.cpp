// Layout JSON round trips, rejection of inconsistent layouts, and the printable description.
#include <string>

#include "catch.h"
#include "core/error.h"
#include "layout/describe.h"
#include "layout/layout_json.h"
#include "model/presets.h"

using namespace fpg;
using namespace fpg::layout;

namespace {

model::ModelSpec worked_example() {
  model::ModelSpec spec;
  spec.name = "example";
  const uint64_t sizes[] = {300, 100, 1000, 10};
  for (int i = 0; i < 4; ++i)
    spec.params.push_back({"p" + std::to_string(i), {sizes[i]}, DType::BF16, model::Role::vector, false, false});
  return spec;
}

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("bucketed layout JSON round-trips", "[layout]") {
  auto spec = model::preset("tiny");
  model::mark_keep_in_fp32(spec, "norm");
  for (uint32_t dp : {1u, 3u, 8u, 64u}) {
    BucketedOptions o;
    o.dp = dp;
    o.bucket_size = 20000;
    o.pad_for_nccl = dp == 8;
    const auto l = build_bucketed_layout(spec, o);
    const std::string text = to_json(l);
    const auto back = bucketed_layout_from_json(text, "t.json");
    CHECK(back == l);
    CHECK(to_json(back, 2) == to_json(l, 2));
  }
  BucketedOptions one;
  one.dp = 4;
  const auto l = build_bucketed_layout(worked_example(), one);
  CHECK(bucketed_layout_from_json(to_json(l), "x") == l);
  CHECK(bucketed_layout_from_json(to_json(l), "x").buffers[0].buckets[0].shards[3].padding.size() == 2);
}

TEST_CASE("layer-wise layout JSON round-trips", "[layout]") {
  auto spec = model::preset("tiny");
  model::mark_keep_in_fp32(spec, "blocks\\.1\\.fc2|final_norm");
  for (bool fp32 : {false, true}) {
    BucketedOptions o;
    o.dp = 3;
    LayerWiseOptions lw;
    lw.fp32_matrices = fp32;
    const auto l = build_layer_wise_layout(spec, o, lw);
    CHECK(layer_wise_layout_from_json(to_json(l), "lw.json") == l);
  }
  BucketedOptions o;
  o.dp = 16;
  const auto l = build_layer_wise_layout(spec, o);
  CHECK(layer_wise_layout_from_json(to_json(l, 2), "lw.json") == l);
}

TEST_CASE("layout JSON errors name the source and the field", "[layout]") {
  BucketedOptions o;
  o.dp = 4;
  const std::string good = to_json(build_bucketed_layout(worked_example(), o));

  auto fails_with = [](const std::string& text, const std::string& needle) {
    try {
      bucketed_layout_from_json(text, "ckpt/index.json");
    } catch (const FormatError& e) {
      const std::string msg = e.what();
      CAPTURE(msg);
      CHECK(msg.find("ckpt/index.json") != std::string::npos);
      CHECK(msg.find(needle) != std::string::npos);
      return;
    }
    FAIL("no FormatError for: " + text);
  };
  fails_with("{", "invalid JSON");
  fails_with(replace_once(good, "\"numel_unpadded\":1516", "\"numel_unpadded\":1500"), "numel_unpadded");
  fails_with(replace_once(good, "\"start\":64", "\"start\":65"), "64-aligned");
  fails_with(replace_once(good, "\"end\":1536", "\"end\":1535"), "buffers[0]");
  fails_with(replace_once(good, "\"dp\":4", "\"dp\":0"), "dp");
  fails_with(replace_once(good, "\"dp\":4", "\"dp\":\"4\""), "dp");
  fails_with(replace_once(good, "\"param_dtype\":\"BF16\"", "\"param_dtype\":\"BF17\""), "param_dtype");
  fails_with(replace_once(good, "\"kind\":\"bucketed\"", "\"kind\":\"layer_wise\""), "kind");
  fails_with(replace_once(good, "\"index\":2", "\"index\":3"), "appears twice");

  BucketedOptions o3;
  o3.dp = 3;
  const std::string lw = to_json(build_layer_wise_layout(model::preset("tiny"), o3));
  try {
    layer_wise_layout_from_json(replace_once(lw, "\"owner\":0", "\"owner\":3"), "lw.json");
    FAIL("owner out of range accepted");
  } catch (const FormatError& e) {
    CHECK(std::string(e.what()).find("owner") != std::string::npos);
  }
}

TEST_CASE("describe prints buckets, shards and fragments", "[layout]") {
  BucketedOptions o;
  o.dp = 4;
  const std::string s = describe(build_bucketed_layout(worked_example(), o));
  CAPTURE(s);
  CHECK(s.find("buffer 0 (BF16, F32)") != std::string::npos);
  CHECK(s.find("numel_unpadded 1516 padded 1536 shard 384") != std::string::npos);
  CHECK(s.find("rank 3 shard [1152, 1536)") != std::string::npos);
  CHECK(s.find("[1516, 1536)") != std::string::npos);

  BucketedOptions o8;
  o8.dp = 8;
  const std::string t = describe(build_layer_wise_layout(model::preset("tiny"), o8));
  CAPTURE(t);
  CHECK(t.find("layer-wise layout: dp 8, 8 Muon matrices") != std::string::npos);
  CHECK(t.find("blocks.3.fc1.weight") != std::string::npos);
  CHECK(t.find("scalar optimizer params:") != std::string::npos);
}
