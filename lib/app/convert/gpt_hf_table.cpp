#include "app/convert/gpt_hf_table.h"

#include <map>

#include <fmt/format.h>

#include "core/error.h"

namespace fpg::app::convert {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

class TableBuilder {
 public:
  explicit TableBuilder(GptHfTable& t) : t_(t) {}

  // Adds Megatron tensor `module_key` of layer `layer` (and expert `expert`); returns its index.
  size_t megatron(const std::string& module_key, std::vector<uint64_t> shape, std::optional<uint64_t> layer = {},
                  std::optional<uint64_t> expert = {}, bool gated = false) {
    GptTensor g;
    g.module_key = module_key;
    g.shape = std::move(shape);
    g.layer = layer;
    g.expert = expert;
    g.gated = gated;
    g.name = module_key;
    if (layer) {
      std::string key = module_key;
      if (expert) {
        const std::string experts = "mlp.experts.experts.";
        if (key.rfind(experts, 0) != 0) throw InternalError("hf: expert tensor " + key);
        key = experts + std::to_string(*expert) + "." + key.substr(experts.size());
      }
      g.name = fmt::format("decoder.layers.{}.{}", *layer, key);
    }
    by_name_[g.name] = t_.megatron.size();
    t_.megatron.push_back(std::move(g));
    return t_.megatron.size() - 1;
  }

  void extra_state(const std::string& module_key, std::optional<uint64_t> layer = {},
                   std::optional<uint64_t> expert = {}) {
    t_.extra_states.push_back({layer, expert, module_key});
  }

  // Rows [row, row + rows) of the Megatron tensor named `name`.
  RowBlock rows(const std::string& name, uint64_t row, uint64_t rows) const {
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) throw InternalError("hf: no Megatron tensor " + name);
    const GptTensor& g = t_.megatron[it->second];
    if (g.shape.empty() || row + rows > g.shape[0])
      throw InternalError(fmt::format("hf: rows [{}, {}) of {}", row, row + rows, name));
    return {it->second, row, rows};
  }
  RowBlock whole(const std::string& name) const {
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) throw InternalError("hf: no Megatron tensor " + name);
    return rows(name, 0, t_.megatron[it->second].shape.at(0));
  }

  void hf(const std::string& name, std::vector<uint64_t> shape, std::vector<RowBlock> blocks) {
    t_.hf.push_back({name, std::move(shape), std::move(blocks)});
  }

 private:
  GptHfTable& t_;
  std::map<std::string, size_t> by_name_;
};

}  // namespace

std::optional<MegatronLayerSpec> parse_megatron_layer_spec(const std::string& name) {
  if (name == "te") return MegatronLayerSpec::te;
  if (name == "local") return MegatronLayerSpec::local;
  return std::nullopt;
}

const char* megatron_layer_spec_name(MegatronLayerSpec s) { return s == MegatronLayerSpec::te ? "te" : "local"; }

std::string megatron_norm_alias(const std::string& name) {
  const std::pair<const char*, const char*> pairs[] = {
      {"self_attention.linear_qkv.layer_norm_weight", "input_layernorm.weight"},
      {"mlp.linear_fc1.layer_norm_weight", "pre_mlp_layernorm.weight"}};
  for (const auto& [a, b] : pairs) {
    if (ends_with(name, a)) return name.substr(0, name.size() - std::string(a).size()) + b;
    if (ends_with(name, b)) return name.substr(0, name.size() - std::string(b).size()) + a;
  }
  return "";
}

GptHfTable gpt_hf_table(const HfModelShape& s, MegatronLayerSpec spec) {
  if (s.kv_heads == 0 || s.heads % s.kv_heads || s.moe_layer.size() != s.layers)
    throw InternalError("hf: an unresolved model shape");
  GptHfTable t;
  TableBuilder b(t);
  const bool te = spec == MegatronLayerSpec::te;
  const uint64_t H = s.hidden, d = s.head_dim, per_group = s.heads / s.kv_heads;
  const uint64_t qkv_rows = (s.heads + 2 * s.kv_heads) * d;

  // The Megatron tensors, in registration order.
  b.megatron("embedding.word_embeddings.weight", {s.padded_vocab, H});
  for (uint64_t l = 0; l < s.layers; ++l) {
    b.megatron("self_attention.linear_qkv.layer_norm_weight", {H}, l);
    b.megatron("self_attention.linear_proj.weight", {H, s.heads * d}, l);
    b.extra_state("self_attention.linear_proj", l);
    b.megatron("self_attention.linear_qkv.weight", {qkv_rows, H}, l);
    if (s.qkv_bias) b.megatron("self_attention.linear_qkv.bias", {qkv_rows}, l);
    b.extra_state("self_attention.linear_qkv", l);
    if (s.qk_norm)
      for (const char* n : {"q_layernorm", "k_layernorm"}) {
        b.megatron(std::string("self_attention.") + n + ".weight", {d}, l);
        if (te) b.extra_state(std::string("self_attention.") + n, l);
      }
    if (!s.moe_layer[l]) {
      b.megatron("mlp.linear_fc1.layer_norm_weight", {H}, l);
      b.megatron("mlp.linear_fc1.weight", {2 * s.ffn, H}, l, {}, true);
      b.extra_state("mlp.linear_fc1", l);
      b.megatron("mlp.linear_fc2.weight", {H, s.ffn}, l);
      b.extra_state("mlp.linear_fc2", l);
      continue;
    }
    if (te) {
      b.megatron("pre_mlp_layernorm.weight", {H}, l);
      b.extra_state("pre_mlp_layernorm", l);
    } else {
      b.megatron("mlp.linear_fc1.layer_norm_weight", {H}, l);
    }
    b.megatron("mlp.router.weight", {s.experts, H}, l);
    for (uint64_t e = 0; e < s.experts; ++e) {
      b.megatron("mlp.experts.experts.linear_fc1.weight", {2 * s.moe_ffn, H}, l, e, true);
      b.extra_state("mlp.experts.experts.linear_fc1", l, e);
      b.megatron("mlp.experts.experts.linear_fc2.weight", {H, s.moe_ffn}, l, e);
      b.extra_state("mlp.experts.experts.linear_fc2", l, e);
    }
  }
  b.megatron("decoder.final_layernorm.weight", {H});
  if (te) b.extra_state("decoder.final_layernorm");
  if (!s.tied) b.megatron("output_layer.weight", {s.padded_vocab, H});

  // The HF tensors, each made of Megatron row blocks.
  b.hf("model.embed_tokens.weight", {s.vocab, H}, {b.rows("embedding.word_embeddings.weight", 0, s.vocab)});
  for (uint64_t l = 0; l < s.layers; ++l) {
    const std::string m = fmt::format("decoder.layers.{}.", l), h = fmt::format("model.layers.{}.", l);
    b.hf(h + "input_layernorm.weight", {H}, {b.whole(m + "self_attention.linear_qkv.layer_norm_weight")});
    for (const char* part : {"weight", "bias"}) {
      const bool w = std::string(part) == "weight";
      if (!w && !s.qkv_bias) continue;
      const std::string qkv = m + "self_attention.linear_qkv." + part;
      std::vector<RowBlock> q, k, v;
      for (uint64_t g = 0; g < s.kv_heads; ++g) {
        const uint64_t base = g * (per_group + 2) * d;
        q.push_back(b.rows(qkv, base, per_group * d));
        k.push_back(b.rows(qkv, base + per_group * d, d));
        v.push_back(b.rows(qkv, base + (per_group + 1) * d, d));
      }
      auto shp = [&](uint64_t r) { return w ? std::vector<uint64_t>{r, H} : std::vector<uint64_t>{r}; };
      b.hf(h + "self_attn.q_proj." + part, shp(s.heads * d), std::move(q));
      b.hf(h + "self_attn.k_proj." + part, shp(s.kv_heads * d), std::move(k));
      b.hf(h + "self_attn.v_proj." + part, shp(s.kv_heads * d), std::move(v));
    }
    b.hf(h + "self_attn.o_proj.weight", {H, s.heads * d}, {b.whole(m + "self_attention.linear_proj.weight")});
    if (s.qk_norm) {
      b.hf(h + "self_attn.q_norm.weight", {d}, {b.whole(m + "self_attention.q_layernorm.weight")});
      b.hf(h + "self_attn.k_norm.weight", {d}, {b.whole(m + "self_attention.k_layernorm.weight")});
    }
    const bool moe = s.moe_layer[l];
    b.hf(h + "post_attention_layernorm.weight", {H},
         {b.whole(m + (moe && te ? "pre_mlp_layernorm.weight" : "mlp.linear_fc1.layer_norm_weight"))});
    if (!moe) {
      const std::string fc1 = m + "mlp.linear_fc1.weight";
      b.hf(h + "mlp.gate_proj.weight", {s.ffn, H}, {b.rows(fc1, 0, s.ffn)});
      b.hf(h + "mlp.up_proj.weight", {s.ffn, H}, {b.rows(fc1, s.ffn, s.ffn)});
      b.hf(h + "mlp.down_proj.weight", {H, s.ffn}, {b.whole(m + "mlp.linear_fc2.weight")});
      continue;
    }
    const bool mixtral = s.arch == HfArch::mixtral;
    const std::string gate = h + (mixtral ? "block_sparse_moe." : "mlp.");
    b.hf(gate + "gate.weight", {s.experts, H}, {b.whole(m + "mlp.router.weight")});
    for (uint64_t e = 0; e < s.experts; ++e) {
      const std::string x = fmt::format("{}mlp.experts.experts.{}.", m, e), y = fmt::format("{}experts.{}.", gate, e);
      const std::string fc1 = x + "linear_fc1.weight";
      b.hf(y + (mixtral ? "w1.weight" : "gate_proj.weight"), {s.moe_ffn, H}, {b.rows(fc1, 0, s.moe_ffn)});
      b.hf(y + (mixtral ? "w3.weight" : "up_proj.weight"), {s.moe_ffn, H}, {b.rows(fc1, s.moe_ffn, s.moe_ffn)});
      b.hf(y + (mixtral ? "w2.weight" : "down_proj.weight"), {H, s.moe_ffn}, {b.whole(x + "linear_fc2.weight")});
    }
  }
  b.hf("model.norm.weight", {H}, {b.whole("decoder.final_layernorm.weight")});
  if (!s.tied) b.hf("lm_head.weight", {s.vocab, H}, {b.rows("output_layer.weight", 0, s.vocab)});
  return t;
}

}  // namespace fpg::app::convert
