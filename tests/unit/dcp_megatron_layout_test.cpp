// Megatron's buffer layout recovered from what a torch_dist checkpoint stores, against the buffers
// Megatron-Core itself built (testdata/megatron/*/truth.json, written by make_megatron_fixtures.py).
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch.h"
#include "core/error.h"
#include "formats/dcp/megatron/megatron_layout.h"

using namespace fpg;
using namespace fpg::dcp;

namespace {

nlohmann::json truth(const std::string& name) {
  std::ifstream in(std::string(FPG_TESTDATA_DIR) + "/megatron/" + name + "/truth.json");
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

DType torch_dtype(const std::string& s) {
  if (s == "torch.bfloat16") return DType::BF16;
  if (s == "torch.float32") return DType::F32;
  FAIL("dtype " << s);
  return DType::U8;
}

// The model keys as the checkpoint's metadata lists them: per-layer parameters stacked, in
// registration order, with Megatron's "module." prefix.
std::vector<ModelKey> model_keys(const nlohmann::json& t) {
  std::vector<ModelKey> keys;
  std::map<std::string, size_t> stacked;
  for (const auto& p : t["params"]) {
    std::string key = p["key"];
    std::vector<uint64_t> shape = p["shape"].get<std::vector<uint64_t>>();
    if (p["layer"].is_null()) {
      keys.push_back({"module." + key, torch_dtype(p["dtype"]), shape});
      continue;
    }
    const std::string layer = std::to_string(p["layer"].get<uint64_t>()) + ".";
    key.erase(key.rfind("layers.") + 7, layer.size());
    auto [it, fresh] = stacked.emplace(key, keys.size());
    if (fresh) {
      shape.insert(shape.begin(), 1);
      keys.push_back({"module." + key, torch_dtype(p["dtype"]), shape});
    } else {
      keys[it->second].shape[0] += 1;
    }
  }
  return keys;
}

std::vector<StoredBuffer> stored_buffers(const nlohmann::json& t) {
  std::vector<StoredBuffer> out;
  for (const auto& b : t["buffers"]) {
    StoredBuffer s{torch_dtype(b["param_dtype"]), torch_dtype(b["grad_dtype"]), {}, {}};
    for (const auto& k : b["buckets"]) {
      s.numel.push_back(k["numel"]);
      s.numel_unpadded.push_back(k["numel_unpadded"]);
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("stacked keys and the module prefix", "[dcp][megatron]") {
  CHECK(is_stacked_key("module.decoder.layers.mlp.linear_fc1.weight"));
  CHECK_FALSE(is_stacked_key("module.decoder.layers.3.mlp.linear_fc1.weight"));
  CHECK_FALSE(is_stacked_key("module.embedding.word_embeddings.weight"));
  CHECK_FALSE(is_stacked_key("module.decoder.sublayers.mlp.weight"));
  CHECK(strip_module_prefix("module.output_layer.weight") == "output_layer.weight");
  CHECK(strip_module_prefix("output_layer.weight") == "output_layer.weight");
}

TEST_CASE("parameters come out in Megatron's registration order", "[dcp][megatron]") {
  const auto t = truth("dp1-one-bucket");
  const std::vector<MegatronParam> params = megatron_params(model_keys(t));
  REQUIRE(params.size() == t["params"].size());
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK(params[i].name == t["params"][i]["key"].get<std::string>());
    CHECK(params[i].shape == t["params"][i]["shape"].get<std::vector<uint64_t>>());
  }
}

TEST_CASE("a stacked key without a layer axis or with another layer count is refused", "[dcp][megatron]") {
  CHECK_THROWS_AS(megatron_params({{"decoder.layers.w", DType::F32, {}}}), FormatError);
  CHECK_THROWS_AS(megatron_params({{"decoder.layers.a", DType::F32, {2, 4}}, {"decoder.layers.b", DType::F32, {3, 4}}}),
                  FormatError);
}

TEST_CASE("the recovered layout is the one Megatron built", "[dcp][megatron]") {
  for (const std::string name : {"dp1-one-bucket", "dp1-buckets-padded"}) {
    INFO(name);
    const auto t = truth(name);
    const std::vector<MegatronParam> params = megatron_params(model_keys(t));
    std::string mismatch;
    const auto r = recover_layout(params, stored_buffers(t), 1, mismatch);
    INFO(mismatch);
    REQUIRE(r);
    REQUIRE(r->layout.buffers.size() == t["buffers"].size());
    for (size_t b = 0; b < r->layout.buffers.size(); ++b) {
      const auto& want = t["buffers"][r->gbuf[b]];
      const layout::Buffer& got = r->layout.buffers[b];
      CHECK(got.numel == want["numel"].get<uint64_t>());
      REQUIRE(got.buckets.size() == want["buckets"].size());
      for (size_t k = 0; k < got.buckets.size(); ++k) {
        const auto& wk = want["buckets"][k];
        CHECK(got.buckets[k].world.begin == wk["offset"].get<uint64_t>());
        for (const auto& wp : wk["params"]) {
          const int64_t idx = r->spec.find(wp["name"].get<std::string>());
          REQUIRE(idx >= 0);
          const auto loc = r->layout.locate(static_cast<uint32_t>(idx));
          REQUIRE(loc);
          CHECK(loc->buffer == b);
          CHECK(got.params[loc->slot].bucket == k);
          CHECK(got.params[loc->slot].world.begin == wp["start"].get<uint64_t>());
          CHECK(got.params[loc->slot].world.end == wp["end"].get<uint64_t>());
        }
      }
    }
    if (name == "dp1-buckets-padded") {
      CHECK(r->layout.pad_for_nccl);
      REQUIRE(r->bucket_size_lo);
      CHECK(*r->bucket_size_lo < 6000);  // the generator's bucket_size
      CHECK((!r->bucket_size_hi || *r->bucket_size_hi >= 6000));
    } else {
      CHECK_FALSE(r->layout.pad_for_nccl);
      CHECK_FALSE(r->bucket_size_lo);
    }
  }
}

TEST_CASE("stored bucket sizes the layout cannot reproduce are reported, not guessed", "[dcp][megatron]") {
  const auto t = truth("dp1-buckets-padded");
  const std::vector<MegatronParam> params = megatron_params(model_keys(t));
  std::string mismatch;

  auto stored = stored_buffers(t);
  stored[0].numel_unpadded[0] += 64;  // a bucket end inside a parameter
  CHECK_FALSE(recover_layout(params, stored, 1, mismatch));
  CHECK(mismatch.find("bucket 0") != std::string::npos);

  stored = stored_buffers(t);
  stored[0].numel[1] = 6144;  // padded to neither 128 nor 65536 multiples consistently
  CHECK_FALSE(recover_layout(params, stored, 1, mismatch));
  CHECK(mismatch.find("multiples") != std::string::npos);

  stored = stored_buffers(t);
  stored.pop_back();  // the fp32 norms' buffer missing
  CHECK_FALSE(recover_layout(params, stored, 1, mismatch));
  CHECK(mismatch.find("belongs to no stored optimizer buffer") != std::string::npos);

  std::vector<MegatronParam> reordered = params;
  std::swap(reordered[2], reordered[3]);  // registration order not the one Megatron used
  CHECK_FALSE(recover_layout(reordered, stored_buffers(t), 1, mismatch));
}
