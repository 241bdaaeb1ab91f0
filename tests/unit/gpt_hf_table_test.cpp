// The one Megatron <-> Hugging Face table read both ways: every Megatron element belongs to at most one
// HF element and only the vocabulary padding to none; an HF model seen as Megatron's tensors
// (HfMegatronView) and seen back as HF tensors (MegatronHfView) is itself, element for element, for
// every architecture and both layer specs; the padding reads as zeros; dtypes convert on the way.
// hf_config_shape reads transformers' fields and defaults and refuses what does not fit, by name.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/convert/gpt_hf_table.h"
#include "app/convert/hf_config_shape.h"
#include "app/convert/hf_megatron_view.h"
#include "app/convert/megatron_hf_view.h"
#include "catch.h"
#include "core/error.h"
#include "core/float_codec.h"
#include "core/shape.h"
#include "tools/fake_params.h"

using namespace fpg;
using namespace fpg::app::convert;

namespace {

// Every element nonzero: the padding reads as zeros, nothing else does.
using FakeModel = test::FakeParams;
constexpr uint64_t kOffset = 1;

HfModelShape shape_of(HfArch arch) {
  HfModelShape s;
  s.arch = arch;
  s.hidden = 8;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 2;
  s.vocab = 10;
  s.padded_vocab = 16;
  s.ffn = 6;
  s.moe_layer = {false, false};
  if (arch == HfArch::mixtral) s.moe_layer = {true, true};
  if (arch == HfArch::qwen3_moe) s.moe_layer = {false, true};
  if (hf_arch_is_moe(arch)) s.experts = 4, s.moe_ffn = 4, s.topk = 2;
  if (arch == HfArch::mixtral) s.ffn = 0;
  s.qkv_bias = hf_arch_has_qkv_bias(arch);
  s.qk_norm = hf_arch_has_qk_norm(arch);
  s.tied = arch == HfArch::mistral;
  return s;
}

// An HF model of the table's HF tensors.
FakeModel hf_model(const GptHfTable& t) {
  FakeModel m(kOffset);
  for (const HfTensorLink& h : t.hf) m.add(h.name, h.shape);
  return m;
}

// Whether `f` throws a UsageError whose message holds `words`.
template <class F>
bool refuses(F&& f, const std::string& words) {
  try {
    f();
  } catch (const UsageError& e) {
    INFO(e.what());
    return std::string(e.what()).find(words) != std::string::npos;
  }
  return false;
}

}  // namespace

TEST_CASE("gpt_hf_table: each Megatron element is one HF element, the vocabulary padding none") {
  for (HfArch arch : {HfArch::llama, HfArch::mistral, HfArch::qwen2, HfArch::qwen3, HfArch::mixtral, HfArch::qwen3_moe})
    for (MegatronLayerSpec spec : {MegatronLayerSpec::te, MegatronLayerSpec::local}) {
      CAPTURE(hf_arch_name(arch), megatron_layer_spec_name(spec));
      const HfModelShape s = shape_of(arch);
      const GptHfTable t = gpt_hf_table(s, spec);
      std::vector<std::vector<int>> covered;
      for (const GptTensor& g : t.megatron) covered.emplace_back(shape_volume(g.shape), 0);
      for (const HfTensorLink& h : t.hf) {
        uint64_t n = 0;
        for (const RowBlock& b : h.blocks) {
          const GptTensor& g = t.megatron[b.tensor];
          const uint64_t cols = shape_volume(g.shape) / g.shape[0];
          for (uint64_t e = b.row * cols; e < (b.row + b.rows) * cols; ++e) ++covered[b.tensor][e];
          n += b.rows * cols;
        }
        CHECK(n == shape_volume(h.shape));
      }
      for (size_t m = 0; m < t.megatron.size(); ++m) {
        const GptTensor& g = t.megatron[m];
        const bool vocab = g.name == "embedding.word_embeddings.weight" || g.name == "output_layer.weight";
        for (uint64_t e = 0; e < covered[m].size(); ++e) {
          const int want = vocab && e >= s.vocab * s.hidden ? 0 : 1;
          if (covered[m][e] != want) FAIL(g.name << " element " << e << " covered " << covered[m][e] << " times");
        }
      }
      // The TE spec names a MoE layer's pre-MLP norm apart; every module with an extra state is listed.
      bool pre_mlp = false;
      for (const GptTensor& g : t.megatron) pre_mlp |= g.module_key == "pre_mlp_layernorm.weight";
      CHECK(pre_mlp == (spec == MegatronLayerSpec::te && hf_arch_is_moe(arch)));
      bool final_extra = false;
      for (const GptExtraState& x : t.extra_states) final_extra |= x.module_key == "decoder.final_layernorm";
      CHECK(final_extra == (spec == MegatronLayerSpec::te));
    }
}

TEST_CASE("gpt_hf_table: an HF model to Megatron and back is itself; padding zeros; dtypes converted") {
  for (HfArch arch : {HfArch::llama, HfArch::mistral, HfArch::qwen2, HfArch::qwen3, HfArch::mixtral, HfArch::qwen3_moe})
    for (MegatronLayerSpec spec : {MegatronLayerSpec::te, MegatronLayerSpec::local}) {
      CAPTURE(hf_arch_name(arch), megatron_layer_spec_name(spec));
      const HfModelShape s = shape_of(arch);
      const GptHfTable t = gpt_hf_table(s, spec);
      const FakeModel hf = hf_model(t);
      std::vector<std::string> notes;
      const HfMegatronView megatron(hf, t, DType::F32, notes);
      REQUIRE(megatron.tensors().size() == t.megatron.size());
      const MegatronGptTensors mt = megatron_gpt_tensors(megatron, "weight");
      const MegatronHfView back(mt, s);
      REQUIRE(back.tensors().size() == hf.tensors().size());
      for (size_t i = 0; i < back.tensors().size(); ++i) {
        const ckpt::ParamTensor& bt = back.tensors()[i];
        CHECK(bt.name == hf.tensors()[i].name);
        std::vector<float> got(bt.numel());
        back.read(i, 0, bt.numel(), got.data());
        for (uint64_t e = 0; e < got.size(); ++e)
          if (got[e] != hf.value(i, e)) FAIL(bt.name << " element " << e << ": " << got[e]);
      }
      // The embedding's padding rows are zeros, its real rows the HF embedding's.
      std::vector<float> emb(s.padded_vocab * s.hidden);
      megatron.read(0, 0, emb.size(), emb.data());
      CHECK(emb[0] == hf.value(0, 0));
      for (uint64_t e = s.vocab * s.hidden; e < emb.size(); ++e) REQUIRE(emb[e] == 0.0f);
    }
  // BF16 HF tensors widen exactly; written BF16 from F32 they round to nearest even.
  const HfModelShape s = shape_of(HfArch::llama);
  const GptHfTable t = gpt_hf_table(s, MegatronLayerSpec::local);
  FakeModel hf(kOffset);
  for (const HfTensorLink& h : t.hf) hf.add(h.name, h.shape, DType::BF16);
  std::vector<std::string> notes;
  const HfMegatronView wide(hf, t, DType::F32, notes);
  std::vector<float> w(8);
  wide.read(1, 0, 8, w.data());  // decoder.layers.0.self_attention.linear_qkv.layer_norm_weight
  CHECK(wide.tensors()[1].name == "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight");
  CHECK(w[3] == float_from_bf16(bf16_from_float(hf.value(1, 3))));
  const FakeModel f32 = hf_model(t);
  const HfMegatronView narrow(f32, t, DType::BF16, notes);
  std::vector<uint16_t> b(8);
  narrow.read(1, 0, 8, b.data());
  CHECK(b[3] == bf16_from_float(f32.value(1, 3)));
}

TEST_CASE("hf_config_shape: transformers' fields and defaults; what does not fit, named") {
  const HfModelShape want = shape_of(HfArch::qwen3_moe);
  const FakeModel hf = hf_model(gpt_hf_table(want, MegatronLayerSpec::local));
  nlohmann::json c = {{"model_type", "qwen3_moe"}, {"hidden_size", 8},  {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},  {"num_key_value_heads", 2}, {"head_dim", 2},
                      {"vocab_size", 10},          {"intermediate_size", 6},   {"moe_intermediate_size", 4},
                      {"num_experts", 4},          {"num_experts_per_tok", 2}, {"mlp_only_layers", {0}}};
  HfModelShape s = hf_config_shape(HfArch::qwen3_moe, c, "c", hf);
  CHECK(s.moe_layer == std::vector<bool>{false, true});
  CHECK(s.qk_norm);
  CHECK_FALSE(s.qkv_bias);
  CHECK_FALSE(s.norm_topk_prob);  // transformers' default
  CHECK(s.experts == 4);
  c["mlp_only_layers"] = nlohmann::json::array();
  c["decoder_sparse_step"] = 2;  // every second layer: layer 1
  CHECK(hf_config_shape(HfArch::qwen3_moe, c, "c", hf).moe_layer == std::vector<bool>{false, true});
  c.erase("num_experts");
  CHECK(refuses([&] { hf_config_shape(HfArch::qwen3_moe, c, "c", hf); }, "c: no num_experts"));
  c["num_experts"] = -4;
  CHECK(refuses([&] { hf_config_shape(HfArch::qwen3_moe, c, "c", hf); }, "num_experts is -4, not a positive integer"));
  c["num_experts"] = 4;
  CHECK(refuses([&] { hf_config_shape(HfArch::qwen3, c, "c", hf); }, "model_type is \"qwen3_moe\", not qwen3"));
  c.erase("model_type");
  CHECK(refuses([&] { hf_config_shape(HfArch::llama, c, "c", hf); }, "holds q/k norms"));
  CHECK(refuses([&] { hf_arch_of_config(nlohmann::json{{"model_type", "gpt2"}}, "c"); },
                "model_type \"gpt2\" is not an architecture"));
  // num_key_value_heads and head_dim default as transformers defaults them.
  const FakeModel llama = hf_model(gpt_hf_table(shape_of(HfArch::llama), MegatronLayerSpec::local));
  const nlohmann::json l = {{"hidden_size", 8}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                            {"vocab_size", 10}, {"intermediate_size", 6}};
  s = hf_config_shape(HfArch::llama, l, "c", llama);
  CHECK(s.kv_heads == 4);
  CHECK(s.head_dim == 2);
  CHECK_FALSE(s.tied);
  CHECK(megatron_padded_vocab(10, 8, 2) == 16);
  CHECK(megatron_padded_vocab(128, 128, 1) == 128);
  CHECK(megatron_padded_vocab(151936, 128, 8) == 152576);
}
