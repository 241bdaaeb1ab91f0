#include "app/convert/hf_config_shape.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "core/error.h"

namespace fpg::app::convert {
namespace {

const nlohmann::json* member(const nlohmann::json& c, const char* name) {
  auto it = c.find(name);
  return it == c.end() || it->is_null() ? nullptr : &*it;
}

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& c, const std::string& name) : c_(c), name_(name) {}

  // A size: a positive integer below 2^32, checked before it shapes anything.
  std::optional<uint64_t> size(const char* field) const {
    const nlohmann::json* v = member(c_, field);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() >= (int64_t{1} << 32))
      throw UsageError(fmt::format("{}: {} is {}, not a positive integer below 2^32", name_, field, v->dump()));
    return v->get<uint64_t>();
  }
  uint64_t required(const char* field) const {
    if (auto v = size(field)) return *v;
    throw UsageError(fmt::format("{}: no {}: a Hugging Face model's config.json gives it", name_, field));
  }
  std::optional<bool> flag(const char* field) const {
    const nlohmann::json* v = member(c_, field);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw UsageError(fmt::format("{}: {} is {}, not true or false", name_, field, v->dump()));
    return v->get<bool>();
  }
  std::optional<double> number(const char* field) const {
    const nlohmann::json* v = member(c_, field);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw UsageError(fmt::format("{}: {} is {}, not a number", name_, field, v->dump()));
    return v->get<double>();
  }
  // A list of layer indices.
  std::vector<uint64_t> layers(const char* field, uint64_t count) const {
    std::vector<uint64_t> out;
    const nlohmann::json* v = member(c_, field);
    if (!v) return out;
    if (!v->is_array()) throw UsageError(fmt::format("{}: {} is {}, not a list of layers", name_, field, v->dump()));
    for (const nlohmann::json& x : *v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<uint64_t>() >= count)
        throw UsageError(fmt::format("{}: {} holds {}, not a layer of {}", name_, field, x.dump(), count));
      out.push_back(x.get<uint64_t>());
    }
    return out;
  }

 private:
  const nlohmann::json& c_;
  const std::string& name_;
};

std::string number_text(double v) {
  std::string s = fmt::format("{}", v);
  return s;
}

}  // namespace

HfArch hf_arch_of_config(const nlohmann::json& config, const std::string& config_name) {
  const nlohmann::json* mt = member(config, "model_type");
  if (!mt || !mt->is_string())
    throw UsageError(config_name + ": no model_type: give the architecture (" + hf_arch_names() + ")");
  if (auto a = parse_hf_arch(mt->get<std::string>())) return *a;
  throw UsageError(fmt::format("{}: model_type {} is not an architecture fpgather maps to Megatron ({})", config_name,
                               mt->dump(), hf_arch_names()));
}

HfModelShape hf_config_shape(HfArch arch, const nlohmann::json& config, const std::string& config_name,
                             const ckpt::ParamSource& hf) {
  if (!config.is_object()) throw UsageError(config_name + ": not a JSON object (a config.json)");
  if (const nlohmann::json* mt = member(config, "model_type"); mt && (!mt->is_string() || mt->get<std::string>() != hf_arch_name(arch)))
    throw UsageError(fmt::format("{}: model_type is {}, not {}", config_name, mt->dump(), hf_arch_name(arch)));
  const ConfigReader c(config, config_name);
  std::set<std::string> names;
  for (const ckpt::ParamTensor& t : hf.tensors()) names.insert(t.name);

  HfModelShape s;
  s.arch = arch;
  s.hidden = c.required("hidden_size");
  s.layers = c.required("num_hidden_layers");
  // Every layer, and every expert of a MoE layer, has tensors of its own in the model (the table of
  // gpt_hf_table.h names them): counts beyond the model's tensors are refused before they size it.
  const uint64_t tensors = hf.tensors().size();
  if (s.layers > tensors)
    throw UsageError(fmt::format("{}: num_hidden_layers {} is more layers than {} has tensors ({})", config_name,
                                 s.layers, hf.describe(), tensors));
  s.heads = c.required("num_attention_heads");
  s.kv_heads = c.size("num_key_value_heads").value_or(s.heads);
  if (s.heads % s.kv_heads)
    throw UsageError(fmt::format("{}: {} attention heads are not a multiple of {} key/value heads", config_name, s.heads,
                                 s.kv_heads));
  if (auto d = c.size("head_dim")) {
    s.head_dim = *d;
  } else {
    if (s.hidden % s.heads)
      throw UsageError(fmt::format("{}: hidden_size {} is not a multiple of {} heads, and there is no head_dim",
                                   config_name, s.hidden, s.heads));
    s.head_dim = s.hidden / s.heads;
  }
  s.vocab = s.padded_vocab = c.required("vocab_size");
  s.tied = c.flag("tie_word_embeddings").value_or(false);  // the default of every architecture here
  s.qkv_bias = names.count("model.layers.0.self_attn.q_proj.bias") > 0;
  s.qk_norm = names.count("model.layers.0.self_attn.q_norm.weight") > 0;
  if (s.qkv_bias != hf_arch_has_qkv_bias(arch))
    throw UsageError(s.qkv_bias ? fmt::format("{}: holds q/k/v biases (model.layers.0.self_attn.q_proj.bias); {} has none "
                                              "(qwen2 has)", hf.describe(), hf_arch_name(arch))
                                : fmt::format("{}: {} has q/k/v biases; there is no model.layers.0.self_attn.q_proj.bias",
                                              hf.describe(), hf_arch_name(arch)));
  if (s.qk_norm != hf_arch_has_qk_norm(arch))
    throw UsageError(s.qk_norm ? fmt::format("{}: holds q/k norms (model.layers.0.self_attn.q_norm.weight); {} has none "
                                             "(qwen3 and qwen3_moe have)", hf.describe(), hf_arch_name(arch))
                               : fmt::format("{}: {} has q/k norms; there is no model.layers.0.self_attn.q_norm.weight",
                                             hf.describe(), hf_arch_name(arch)));
  s.moe_layer.assign(s.layers, false);
  switch (arch) {
    case HfArch::mixtral:
      s.experts = c.required("num_local_experts");
      s.moe_ffn = c.required("intermediate_size");
      s.topk = c.required("num_experts_per_tok");
      s.moe_layer.assign(s.layers, true);
      break;
    case HfArch::qwen3_moe: {
      s.experts = c.required("num_experts");
      s.moe_ffn = c.required("moe_intermediate_size");
      s.topk = c.required("num_experts_per_tok");
      s.norm_topk_prob = c.flag("norm_topk_prob").value_or(false);  // transformers' default
      const uint64_t step = c.size("decoder_sparse_step").value_or(1);
      std::vector<bool> dense(s.layers, false);
      for (uint64_t l : c.layers("mlp_only_layers", s.layers)) dense[l] = true;
      for (uint64_t l = 0; l < s.layers; ++l) s.moe_layer[l] = !dense[l] && (l + 1) % step == 0;
      if (std::find(s.moe_layer.begin(), s.moe_layer.end(), false) != s.moe_layer.end())
        s.ffn = c.required("intermediate_size");
      break;
    }
    default:
      s.ffn = c.required("intermediate_size");
  }
  if (s.topk > s.experts)
    throw UsageError(fmt::format("{}: num_experts_per_tok {} exceeds the {} experts", config_name, s.topk, s.experts));
  const uint64_t moe_layers = static_cast<uint64_t>(std::count(s.moe_layer.begin(), s.moe_layer.end(), true));
  if (s.experts * 3 * moe_layers > tensors)  // each expert's gate, up and down projections
    throw UsageError(fmt::format("{}: {} experts in each of {} MoE layers are more expert tensors than {} has tensors "
                                 "({})", config_name, s.experts, moe_layers, hf.describe(), tensors));
  return s;
}

uint64_t megatron_padded_vocab(uint64_t vocab, uint64_t divisible_by, uint32_t tp) {
  const uint64_t multiple = divisible_by * tp;
  return (vocab + multiple - 1) / multiple * multiple;
}

std::vector<std::string> megatron_lm_args(const HfModelShape& s, const nlohmann::json& config, uint64_t divisible_by,
                                          uint32_t tp, uint32_t pp, uint32_t ep, bool te_spec) {
  const ConfigReader c(config, "config.json");
  std::vector<std::string> a = {"--num-layers " + std::to_string(s.layers), "--hidden-size " + std::to_string(s.hidden),
                                "--num-attention-heads " + std::to_string(s.heads)};
  if (s.ffn) a.push_back("--ffn-hidden-size " + std::to_string(s.ffn));
  if (s.kv_heads != s.heads) {
    a.push_back("--group-query-attention");
    a.push_back("--num-query-groups " + std::to_string(s.kv_heads));
  }
  a.push_back("--kv-channels " + std::to_string(s.head_dim));
  a.push_back("--normalization RMSNorm");
  if (auto eps = c.number("rms_norm_eps")) a.push_back("--norm-epsilon " + number_text(*eps));
  a.push_back("--swiglu");
  a.push_back("--disable-bias-linear");
  if (s.qkv_bias) a.push_back("--add-qkv-bias");
  if (s.qk_norm) a.push_back("--qk-layernorm");
  a.push_back("--position-embedding-type rope");
  std::optional<double> theta = c.number("rope_theta");
  if (const nlohmann::json* rp = member(config, "rope_parameters"); !theta && rp && rp->is_object())
    theta = ConfigReader(*rp, "rope_parameters").number("rope_theta");
  if (theta) a.push_back("--rotary-base " + number_text(*theta));
  if (const nlohmann::json* rs = member(config, "rope_scaling"); rs && rs->is_object()) {
    const nlohmann::json* type = member(*rs, "rope_type");
    if (type && type->is_string() && type->get<std::string>() == "llama3") {
      a.push_back("--use-rope-scaling");
      if (auto f = ConfigReader(*rs, "rope_scaling").number("factor")) a.push_back("--rope-scaling-factor " + number_text(*f));
    }
  }
  if (auto p = c.size("max_position_embeddings")) a.push_back("--max-position-embeddings " + std::to_string(*p));
  if (!s.tied) a.push_back("--untie-embeddings-and-output-weights");
  a.push_back("--make-vocab-size-divisible-by " + std::to_string(divisible_by));
  if (s.experts) {
    a.push_back("--num-experts " + std::to_string(s.experts));
    a.push_back("--moe-ffn-hidden-size " + std::to_string(s.moe_ffn));
    a.push_back("--moe-router-topk " + std::to_string(s.topk));
    if (std::find(s.moe_layer.begin(), s.moe_layer.end(), false) != s.moe_layer.end()) {
      std::string freq = "[";
      for (size_t l = 0; l < s.moe_layer.size(); ++l) freq += (l ? "," : "") + std::string(s.moe_layer[l] ? "1" : "0");
      a.push_back("--moe-layer-freq '" + freq + "]'");
    }
    if (!s.norm_topk_prob) a.push_back("--moe-router-pre-softmax");
  }
  a.push_back("--tensor-model-parallel-size " + std::to_string(tp));
  a.push_back("--pipeline-model-parallel-size " + std::to_string(pp));
  if (ep > 1) a.push_back("--expert-model-parallel-size " + std::to_string(ep));
  if (!te_spec) a.push_back("--transformer-impl local");
  return a;
}

}  // namespace fpg::app::convert
