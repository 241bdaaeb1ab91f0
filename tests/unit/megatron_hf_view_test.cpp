// MegatronHfView and resolve_hf_model over a small in-memory Megatron GPT: q/k/v split by query
// group, SwiGLU halves, vocab padding cut, reads of any element range (across the pieces an HF tensor
// is gathered from), and the refusals that name what does not fit.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/convert/hf_model.h"
#include "app/convert/megatron_hf_view.h"
#include "catch.h"
#include "core/error.h"
#include "tools/fake_params.h"

using namespace fpg;
using namespace fpg::app::convert;

namespace {

using FakeMegatron = test::FakeParams;

// hidden 8, 4 heads of 2 in 2 query groups, FFN 6, vocab 10 padded to 16, 2 layers.
FakeMegatron llama(bool tied = false, bool bias = false) {
  FakeMegatron m;
  m.add("embedding.word_embeddings.weight", {16, 8});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "decoder.layers." + std::to_string(l) + ".";
    m.add(p + "self_attention.linear_qkv.layer_norm_weight", {8});
    m.add(p + "self_attention.linear_qkv.weight", {16, 8});  // (4 + 2 * 2) heads x 2
    if (bias) m.add(p + "self_attention.linear_qkv.bias", {16});
    m.add(p + "self_attention.linear_proj.weight", {8, 8});
    m.add(p + "pre_mlp_layernorm.weight", {8});
    m.add(p + "mlp.linear_fc1.weight", {12, 8});
    m.add(p + "mlp.linear_fc2.weight", {8, 6});
  }
  m.add("decoder.final_layernorm.weight", {8});
  if (!tied) m.add("output_layer.weight", {16, 8});
  return m;
}

nlohmann::json config() {
  return {{"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"vocab_size", 10}, {"rope_theta", 10000.0},
          {"rms_norm_eps", 1e-5},      {"max_position_embeddings", 32}};
}

std::vector<float> read(const ckpt::ParamSource& s, const std::string& name, uint64_t lo, uint64_t hi) {
  for (size_t t = 0; t < s.tensors().size(); ++t)
    if (s.tensors()[t].name == name) {
      std::vector<float> out(hi - lo);
      s.read(t, lo, hi, out.data());
      return out;
    }
  FAIL("no HF tensor " << name);
  return {};
}

// The message of the UsageError `f` throws ("" when it throws none).
template <class F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("hf view: q/k/v by query group, gate/up halves, padding cut, any range") {
  const FakeMegatron m = llama();
  const MegatronGptTensors t = megatron_gpt_tensors(m, "weight");
  const HfModel model = resolve_hf_model(HfArch::llama, t, nullptr, config(), "config.json", "bfloat16");
  CHECK(model.shape.head_dim == 2);
  CHECK(model.shape.kv_heads == 2);
  CHECK(model.shape.ffn == 6);
  CHECK(model.config["vocab_size"] == 10);
  CHECK(model.config["architectures"][0] == "LlamaForCausalLM");
  const MegatronHfView view(t, model.shape);
  const size_t qkv = m.index("decoder.layers.1.self_attention.linear_qkv.weight");
  const float base = static_cast<float>(qkv * 100000);
  // Per group g (4 rows of 8): rows 4g, 4g+1 query heads (2 per group x head_dim... 2 heads x 2 = 4
  // rows), then key 2 rows, value 2 rows. Groups of (2 q heads + k + v) x 2 rows = 8 rows.
  const std::vector<float> q = read(view, "model.layers.1.self_attn.q_proj.weight", 0, 64);
  for (uint64_t r = 0; r < 8; ++r)
    for (uint64_t c = 0; c < 8; ++c) {
      const uint64_t g = r / 4, src_row = g * 8 + r % 4;
      CHECK(q[r * 8 + c] == base + static_cast<float>(src_row * 8 + c));
    }
  const std::vector<float> k = read(view, "model.layers.1.self_attn.k_proj.weight", 0, 32);
  const std::vector<float> v = read(view, "model.layers.1.self_attn.v_proj.weight", 0, 32);
  for (uint64_t r = 0; r < 4; ++r) {
    const uint64_t g = r / 2;
    CHECK(k[r * 8] == base + static_cast<float>((g * 8 + 4 + r % 2) * 8));
    CHECK(v[r * 8] == base + static_cast<float>((g * 8 + 6 + r % 2) * 8));
  }
  // A range straddling the two groups' pieces of q_proj equals the same elements of the whole read.
  const std::vector<float> part = read(view, "model.layers.1.self_attn.q_proj.weight", 29, 37);
  CHECK(part == std::vector<float>(q.begin() + 29, q.begin() + 37));
  const size_t fc1 = m.index("decoder.layers.0.mlp.linear_fc1.weight");
  const std::vector<float> up = read(view, "model.layers.0.mlp.up_proj.weight", 0, 48);
  CHECK(up[0] == static_cast<float>(fc1 * 100000 + 48));  // the second half of the rows
  // The vocabulary padding is cut: 10 of 16 rows.
  bool found = false;
  for (const auto& ht : view.tensors())
    if (ht.name == "lm_head.weight") {
      found = true;
      CHECK(ht.shape == std::vector<uint64_t>{10, 8});
    }
  CHECK(found);
  CHECK(view.tensors().size() == 1 + 2 * 9 + 1 + 1);
}

TEST_CASE("hf view: tied, biases, and what does not fit, named") {
  {
    const FakeMegatron m = llama(true, true);
    const MegatronGptTensors t = megatron_gpt_tensors(m, "weight");
    const HfModel model = resolve_hf_model(HfArch::qwen2, t, nullptr, config(), "c", "bfloat16");
    CHECK(model.config["tie_word_embeddings"] == true);
    const MegatronHfView view(t, model.shape);
    bool bias = false, head = false;
    for (const auto& ht : view.tensors()) {
      if (ht.name == "model.layers.0.self_attn.k_proj.bias") {
        bias = true;
        CHECK(ht.shape == std::vector<uint64_t>{4});
      }
      if (ht.name == "lm_head.weight") head = true;
    }
    CHECK(bias);
    CHECK_FALSE(head);
    CHECK(usage_error([&] { resolve_hf_model(HfArch::llama, t, nullptr, config(), "c", "bfloat16"); }).find("has none (use qwen2)") != std::string::npos);
  }
  {
    FakeMegatron m = llama();
    m.add("decoder.layers.0.mlp.linear_fc2.bias", {8});
    const MegatronGptTensors t = megatron_gpt_tensors(m, "weight");
    const HfModel model = resolve_hf_model(HfArch::llama, t, nullptr, config(), "c", "bfloat16");
    CHECK(usage_error([&] { MegatronHfView(t, model.shape); }).find("decoder.layers.0.mlp.linear_fc2.bias") != std::string::npos);
  }
  {
    const FakeMegatron m = llama();
    const MegatronGptTensors t = megatron_gpt_tensors(m, "weight");
    nlohmann::json c = config();
    c.erase("rope_theta");
    c.erase("num_attention_heads");
    CHECK(usage_error([&] { resolve_hf_model(HfArch::llama, t, nullptr, c, "c", "bfloat16"); }).find("num_attention_heads, rope_theta") != std::string::npos);
    // The saved args stand in for the template.
    const nlohmann::json args = {{"num_attention_heads", 4}, {"group_query_attention", true}, {"num_query_groups", 2},
                                 {"rotary_base", 500000}, {"norm_epsilon", 1e-6}, {"max_position_embeddings", 64},
                                 {"vocab_size", 10}};
    const HfModel model = resolve_hf_model(HfArch::llama, t, args, nullptr, "", "float32");
    CHECK(model.config["rope_theta"] == 500000.0);
    CHECK(model.config["rms_norm_eps"] == 1e-6);
    CHECK(model.config["torch_dtype"] == "float32");
    nlohmann::json bad = config();
    bad["num_attention_heads"] = -4;  // a size is checked before it shapes anything
    CHECK(usage_error([&] { resolve_hf_model(HfArch::llama, t, nullptr, bad, "c", "bfloat16"); })
              .find("num_attention_heads is -4, not a positive integer") != std::string::npos);
    const nlohmann::json swish = {{"num_attention_heads", 4}, {"swiglu", false}};
    CHECK(usage_error([&] { resolve_hf_model(HfArch::llama, t, swish, nullptr, "", "float32"); }).find("swiglu is False") != std::string::npos);
  }
}
