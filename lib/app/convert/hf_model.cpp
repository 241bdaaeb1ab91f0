#include "app/convert/hf_model.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <fmt/format.h>

#include "core/error.h"

namespace fpg::app::convert {
namespace {

struct ArchInfo {
  HfArch arch;
  const char* name;        // --arch and config.json's model_type
  const char* class_name;  // config.json's architectures[0]
  bool moe, qk_norm, qkv_bias;
};

constexpr ArchInfo kArchs[] = {
    {HfArch::llama, "llama", "LlamaForCausalLM", false, false, false},
    {HfArch::mistral, "mistral", "MistralForCausalLM", false, false, false},
    {HfArch::qwen2, "qwen2", "Qwen2ForCausalLM", false, false, true},
    {HfArch::qwen3, "qwen3", "Qwen3ForCausalLM", false, true, false},
    {HfArch::mixtral, "mixtral", "MixtralForCausalLM", true, false, false},
    {HfArch::qwen3_moe, "qwen3_moe", "Qwen3MoeForCausalLM", true, true, false},
};

const ArchInfo& info(HfArch a) {
  for (const ArchInfo& i : kArchs)
    if (i.arch == a) return i;
  throw InternalError("hf: unknown architecture");
}

const nlohmann::json* member(const nlohmann::json& obj, const char* name) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<uint64_t> count_of(const nlohmann::json& obj, const char* name, const std::string& where) {
  const nlohmann::json* v = member(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
    throw UsageError(fmt::format("{}: {} is {}, not a non-negative integer", where, name, v->dump()));
  return v->get<uint64_t>();
}

std::optional<double> number_of(const nlohmann::json& obj, const char* name, const std::string& where) {
  const nlohmann::json* v = member(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw UsageError(fmt::format("{}: {} is {}, not a number", where, name, v->dump()));
  return v->get<double>();
}

// A size (heads, dimensions, vocabulary, positions, top-k): a positive integer below 2^32, checked
// before it shapes anything; UsageError naming the field otherwise.
std::optional<double> size_of(const nlohmann::json& obj, const char* name, const std::string& where) {
  const nlohmann::json* v = member(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() >= (int64_t{1} << 32))
    throw UsageError(fmt::format("{}: {} is {}, not a positive integer below 2^32", where, name, v->dump()));
  return static_cast<double>(v->get<int64_t>());
}

std::optional<bool> flag_of(const nlohmann::json& obj, const char* name) {
  const nlohmann::json* v = member(obj, name);
  if (!v || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

std::string layer_prefix(uint64_t l) { return fmt::format("decoder.layers.{}.", l); }

// One of two names a Megatron layer spec gives a norm: the TE spec fuses it into the next linear
// (linear_qkv.layer_norm_weight), the local spec keeps a module of its own (input_layernorm.weight).
const ckpt::ParamTensor* either(const MegatronGptTensors& t, const std::string& a, const std::string& b) {
  if (const ckpt::ParamTensor* x = t.find(a)) return x;
  return t.find(b);
}

std::string shape_text(const std::vector<uint64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

std::optional<HfArch> parse_hf_arch(const std::string& name) {
  for (const ArchInfo& i : kArchs)
    if (name == i.name) return i.arch;
  return std::nullopt;
}

const char* hf_arch_name(HfArch a) { return info(a).name; }

std::string hf_arch_names() {
  std::string r;
  for (const ArchInfo& i : kArchs) r += (r.empty() ? "" : "|") + std::string(i.name);
  return r;
}

bool hf_arch_is_moe(HfArch a) { return info(a).moe; }
bool hf_arch_has_qk_norm(HfArch a) { return info(a).qk_norm; }
bool hf_arch_has_qkv_bias(HfArch a) { return info(a).qkv_bias; }

const ckpt::ParamTensor* MegatronGptTensors::find(const std::string& name) const {
  auto it = std::lower_bound(by_name.begin(), by_name.end(), name,
                             [](const auto& e, const std::string& n) { return e.first < n; });
  if (it == by_name.end() || it->first != name) return nullptr;
  return &source->tensors()[it->second];
}

size_t MegatronGptTensors::index(const std::string& name) const {
  auto it = std::lower_bound(by_name.begin(), by_name.end(), name,
                             [](const auto& e, const std::string& n) { return e.first < n; });
  if (it == by_name.end() || it->first != name) throw InternalError("hf: no tensor " + name);
  return it->second;
}

MegatronGptTensors megatron_gpt_tensors(const ckpt::ParamSource& src, const std::string& role) {
  MegatronGptTensors t;
  t.source = &src;
  const auto& ts = src.tensors();
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].role == role) t.by_name.emplace_back(ts[i].param, i);
  if (t.by_name.empty())
    throw FormatError(src.describe() + ": holds no " + (role == "master" ? "fp32 masters" : "model weights"));
  std::sort(t.by_name.begin(), t.by_name.end());
  return t;
}

HfModel resolve_hf_model(HfArch arch, const MegatronGptTensors& t, const nlohmann::json& args,
                         const nlohmann::json& tmpl, const std::string& template_name, const std::string& dtype_name) {
  const ArchInfo& ai = info(arch);
  const std::string src = t.source->describe();
  const std::string targs = src + ": saved args";
  HfModel m;
  HfModelShape& s = m.shape;
  s.arch = arch;

  if (const nlohmann::json* mt = member(tmpl, "model_type"); mt && (!mt->is_string() || *mt != ai.name))
    throw UsageError(fmt::format("{}: model_type is {}, not --arch {}", template_name, mt->dump(), ai.name));

  // ---- what the tensors say ----
  const ckpt::ParamTensor* emb = t.find("embedding.word_embeddings.weight");
  if (!emb || emb->shape.size() != 2)
    throw UsageError(src + ": no embedding.word_embeddings.weight [vocab, hidden]: not a Megatron GPT model");
  s.padded_vocab = emb->shape[0];
  s.hidden = emb->shape[1];
  s.tied = t.find("output_layer.weight") == nullptr;
  for (const auto& [name, i] : t.by_name) {
    if (name.rfind("decoder.layers.", 0) != 0) continue;
    const size_t dot = name.find('.', 15);
    const std::string num = name.substr(15, dot == std::string::npos ? std::string::npos : dot - 15);
    if (num.empty() || num.size() > 9 || num.find_first_not_of("0123456789") != std::string::npos)
      throw UsageError(src + ": tensor " + name + ": not a layer of a Megatron GPT decoder");
    s.layers = std::max<uint64_t>(s.layers, std::stoull(num) + 1);
  }
  if (s.layers == 0) throw UsageError(src + ": no decoder.layers.N tensors: not a Megatron GPT model");
  if (!t.find("decoder.final_layernorm.weight")) throw UsageError(src + ": no decoder.final_layernorm.weight");
  uint64_t qkv_rows = 0;
  std::optional<uint64_t> qk_dim;
  for (uint64_t l = 0; l < s.layers; ++l) {
    const std::string p = layer_prefix(l);
    const ckpt::ParamTensor* qkv = t.find(p + "self_attention.linear_qkv.weight");
    if (!qkv || qkv->shape.size() != 2 || qkv->shape[1] != s.hidden)
      throw UsageError(fmt::format("{}: layer {}: no {}self_attention.linear_qkv.weight [*, {}]", src, l, p, s.hidden));
    if (l == 0) qkv_rows = qkv->shape[0];
    if (qkv->shape[0] != qkv_rows)
      throw UsageError(fmt::format("{}: layer {}: linear_qkv has {} rows, layer 0 {}", src, l, qkv->shape[0], qkv_rows));
    const bool bias = t.find(p + "self_attention.linear_qkv.bias") != nullptr;
    const bool qn = t.find(p + "self_attention.q_layernorm.weight") != nullptr;
    if (l == 0) s.qkv_bias = bias, s.qk_norm = qn;
    if (bias != s.qkv_bias || qn != s.qk_norm)
      throw UsageError(fmt::format("{}: layer {} differs from layer 0 in its qkv bias or q/k norm", src, l));
    if (qn) {
      const ckpt::ParamTensor* q = t.find(p + "self_attention.q_layernorm.weight");
      if (q->shape.size() != 1) throw UsageError(src + ": " + q->name + " is not 1-D");
      qk_dim = q->shape[0];
    }
    if (!either(t, p + "self_attention.linear_qkv.layer_norm_weight", p + "input_layernorm.weight"))
      throw UsageError(fmt::format("{}: layer {}: no input norm ({0}self_attention.linear_qkv.layer_norm_weight or "
                                   "{0}input_layernorm.weight)", src, l, p));
    if (!either(t, p + "mlp.linear_fc1.layer_norm_weight", p + "pre_mlp_layernorm.weight"))
      throw UsageError(fmt::format("{}: layer {}: no pre-MLP norm", src, l));
    const bool moe = t.find(p + "mlp.router.weight") != nullptr;
    s.moe_layer.push_back(moe);
    if (moe) {
      uint64_t e = 0;
      while (t.find(fmt::format("{}mlp.experts.experts.{}.linear_fc1.weight", p, e))) ++e;
      const ckpt::ParamTensor* router = t.find(p + "mlp.router.weight");
      if (e == 0) throw UsageError(fmt::format("{}: layer {}: a router but no mlp.experts.experts.0.linear_fc1.weight", src, l));
      if (router->shape != std::vector<uint64_t>{e, s.hidden})
        throw UsageError(fmt::format("{}: {} is {}, for {} experts [{}, {}]", src, router->name, shape_text(router->shape), e, e, s.hidden));
      if (s.experts && e != s.experts) throw UsageError(fmt::format("{}: layer {} has {} experts, others {}", src, l, e, s.experts));
      s.experts = e;
      const ckpt::ParamTensor* fc1 = t.find(fmt::format("{}mlp.experts.experts.0.linear_fc1.weight", p));
      if (fc1->shape.size() != 2 || fc1->shape[0] % 2) throw UsageError(src + ": " + fc1->name + " is not a gated [2F, H] weight");
      s.moe_ffn = fc1->shape[0] / 2;
    } else {
      const ckpt::ParamTensor* fc1 = t.find(p + "mlp.linear_fc1.weight");
      if (!fc1 || fc1->shape.size() != 2 || fc1->shape[0] % 2)
        throw UsageError(fmt::format("{}: layer {}: no gated {}mlp.linear_fc1.weight [2F, {}]", src, l, p, s.hidden));
      if (s.ffn && fc1->shape[0] / 2 != s.ffn) throw UsageError(fmt::format("{}: layer {}: FFN size differs from other layers", src, l));
      s.ffn = fc1->shape[0] / 2;
    }
  }
  const bool any_moe = std::find(s.moe_layer.begin(), s.moe_layer.end(), true) != s.moe_layer.end();
  const bool all_moe = std::find(s.moe_layer.begin(), s.moe_layer.end(), false) == s.moe_layer.end();

  // ---- the architecture's demands ----
  if (ai.moe && !any_moe)
    throw UsageError(fmt::format("{}: --arch {} is a mixture of experts; this model has no MoE layer", src, ai.name));
  if (!ai.moe && any_moe)
    throw UsageError(fmt::format("{}: has MoE layers; --arch {} is dense (use mixtral or qwen3_moe)", src, ai.name));
  if (arch == HfArch::mixtral && !all_moe)
    throw UsageError(src + ": mixtral has experts in every layer; this model has dense layers (use qwen3_moe)");
  if (ai.qk_norm && !s.qk_norm)
    throw UsageError(fmt::format("{}: --arch {} has q/k norms; this model has no self_attention.q_layernorm", src, ai.name));
  if (!ai.qk_norm && s.qk_norm)
    throw UsageError(fmt::format("{}: has q/k norms (self_attention.q_layernorm); --arch {} has none (use qwen3)", src, ai.name));
  if (ai.qkv_bias && !s.qkv_bias)
    throw UsageError(fmt::format("{}: --arch {} has q/k/v biases; this model has no linear_qkv.bias", src, ai.name));
  if (!ai.qkv_bias && s.qkv_bias)
    throw UsageError(fmt::format("{}: has q/k/v biases (linear_qkv.bias); --arch {} has none (use qwen2)", src, ai.name));

  // ---- the saved args: facts the tensors cannot tell, checks of what they can ----
  if (args.is_object()) {
    if (auto v = flag_of(args, "swiglu"); v && !*v) throw UsageError(targs + ": swiglu is False: " + ai.name + " is gated (SwiGLU)");
    if (const nlohmann::json* v = member(args, "normalization"); v && v->is_string() && *v != "RMSNorm")
      throw UsageError(targs + ": normalization is " + v->dump() + ": " + ai.name + " uses RMSNorm");
    if (const nlohmann::json* v = member(args, "position_embedding_type"); v && v->is_string() && *v != "rope")
      throw UsageError(targs + ": position_embedding_type is " + v->dump() + ": " + ai.name + " uses rotary embeddings");
    if (auto v = flag_of(args, "add_bias_linear"); v && *v)
      throw UsageError(targs + ": add_bias_linear is True: " + ai.name + " has no linear biases");
    if (const nlohmann::json* v = member(args, "moe_router_score_function"); v && v->is_string() && *v != "softmax")
      throw UsageError(targs + ": moe_router_score_function is " + v->dump() + ": " + ai.name + " routes by softmax");
    if (auto v = flag_of(args, "moe_router_pre_softmax"); v && *v) {
      if (arch == HfArch::mixtral)
        throw UsageError(targs + ": moe_router_pre_softmax is True: mixtral renormalizes its top-k weights");
      s.norm_topk_prob = false;
    }
    if (auto v = flag_of(args, "use_rope_scaling"); v && *v && arch != HfArch::llama)
      throw UsageError(targs + ": use_rope_scaling is True (Llama 3 scaling): only --arch llama has it");
  }
  std::vector<std::string> missing;
  // A config field from the template, else from the args; sizes checked as sizes.
  auto field = [&](const char* hf, std::optional<double> from_args, auto& out, bool required) {
    constexpr bool size = std::is_integral_v<std::decay_t<decltype(out)>>;
    std::optional<double> v = size ? size_of(tmpl, hf, template_name) : number_of(tmpl, hf, template_name);
    if (!v) v = from_args;
    if (v) out = static_cast<std::decay_t<decltype(out)>>(*v);
    else if (required) missing.push_back(hf);
    return v.has_value();
  };
  uint64_t heads = 0;
  field("num_attention_heads", size_of(args, "num_attention_heads", targs), heads, true);
  std::optional<double> args_kv;
  if (args.is_object()) {
    if (auto gqa = flag_of(args, "group_query_attention"); gqa && *gqa) args_kv = size_of(args, "num_query_groups", targs);
    else if (auto h = size_of(args, "num_attention_heads", targs)) args_kv = h;
  }
  double rope_theta = 0, eps = 0;
  uint64_t positions = 0;
  std::optional<double> theta_tmpl;
  if (const nlohmann::json* rp = member(tmpl, "rope_parameters")) theta_tmpl = number_of(*rp, "rope_theta", template_name);
  if (!number_of(tmpl, "rope_theta", template_name) && theta_tmpl) rope_theta = *theta_tmpl;
  else field("rope_theta", number_of(args, "rotary_base", targs), rope_theta, true);
  field("rms_norm_eps", number_of(args, "norm_epsilon", targs), eps, true);
  field("max_position_embeddings", size_of(args, "max_position_embeddings", targs), positions, true);
  if (ai.moe) field("num_experts_per_tok", size_of(args, "moe_router_topk", targs), s.topk, true);
  if (!missing.empty()) {
    std::string list;
    for (const auto& f : missing) list += (list.empty() ? "" : ", ") + f;
    throw UsageError(src + ": the config fields " + list +
                     " are not in the checkpoint's tensors" + (args.is_object() ? " nor its saved args" : " (it saved no training args)") +
                     ": give a config.json with them (--hf-config)");
  }
  s.heads = heads;
  if (s.heads == 0) throw UsageError(src + ": num_attention_heads is 0");
  // head_dim: the template's, the args' kv_channels, the q/k norm's width, else hidden / heads.
  std::optional<double> hd = size_of(tmpl, "head_dim", template_name);
  if (!hd) hd = size_of(args, "kv_channels", targs);
  if (!hd && qk_dim) hd = static_cast<double>(*qk_dim);
  if (!hd) {
    if (s.hidden % s.heads) throw UsageError(fmt::format("{}: hidden {} is not a multiple of {} heads: give head_dim", src, s.hidden, s.heads));
    hd = static_cast<double>(s.hidden / s.heads);
  }
  s.head_dim = static_cast<uint64_t>(*hd);
  if (s.head_dim == 0) throw UsageError(src + ": head_dim is 0");
  if (qk_dim && *qk_dim != s.head_dim)
    throw UsageError(fmt::format("{}: q_layernorm is {} wide, head_dim {}", src, *qk_dim, s.head_dim));
  std::optional<double> kv = size_of(tmpl, "num_key_value_heads", template_name);
  if (!kv) kv = args_kv;
  if (kv) {
    s.kv_heads = static_cast<uint64_t>(*kv);
  } else {
    if (qkv_rows % s.head_dim || qkv_rows / s.head_dim < s.heads || (qkv_rows / s.head_dim - s.heads) % 2)
      throw UsageError(fmt::format("{}: linear_qkv's {} rows are no (heads {} + 2 kv heads) x head_dim {}", src, qkv_rows, s.heads, s.head_dim));
    s.kv_heads = (qkv_rows / s.head_dim - s.heads) / 2;
  }
  if (s.kv_heads == 0 || s.heads % s.kv_heads)
    throw UsageError(fmt::format("{}: {} attention heads are not a multiple of {} key/value heads", src, s.heads, s.kv_heads));
  if (qkv_rows != (s.heads + 2 * s.kv_heads) * s.head_dim)
    throw UsageError(fmt::format("{}: linear_qkv has {} rows; {} heads and {} key/value heads of {} need {}", src, qkv_rows,
                                 s.heads, s.kv_heads, s.head_dim, (s.heads + 2 * s.kv_heads) * s.head_dim));
  for (uint64_t l = 0; l < s.layers; ++l) {
    const ckpt::ParamTensor* o = t.find(layer_prefix(l) + "self_attention.linear_proj.weight");
    if (!o || o->shape != std::vector<uint64_t>{s.hidden, s.heads * s.head_dim})
      throw UsageError(fmt::format("{}: layer {}: self_attention.linear_proj.weight should be [{}, {}]", src, l, s.hidden, s.heads * s.head_dim));
  }
  // The vocabulary: Megatron pads the embedding's rows; the model's own size is the template's or
  // the args' vocab_size, else the padded rows are kept (and said).
  std::optional<double> vocab = size_of(tmpl, "vocab_size", template_name);
  if (!vocab) vocab = size_of(args, "vocab_size", targs);
  if (vocab) {
    s.vocab = static_cast<uint64_t>(*vocab);
  } else {
    s.vocab = s.padded_vocab;
    s.notes.push_back(fmt::format("vocab_size {}: the embedding's rows, padded as Megatron pads them (no vocab size "
                                  "given: --hf-config sets it)", s.vocab));
  }
  if (s.vocab == 0 || s.vocab > s.padded_vocab)
    throw UsageError(fmt::format("{}: vocab_size {} is not within the embedding's {} rows", src, s.vocab, s.padded_vocab));
  if (!s.tied && t.find("output_layer.weight")->shape != emb->shape)
    throw UsageError(src + ": output_layer.weight's shape differs from the embedding's");

  // ---- the template's shape fields, checked ----
  auto check = [&](const char* name, uint64_t want) {
    if (auto v = count_of(tmpl, name, template_name); v && *v != want)
      throw UsageError(fmt::format("{}: {} is {}, but the checkpoint's tensors give {}", template_name, name, *v, want));
  };
  if (tmpl.is_object()) {
    check("hidden_size", s.hidden);
    check("num_hidden_layers", s.layers);
    if (arch == HfArch::mixtral) {
      check("intermediate_size", s.moe_ffn);
      check("num_local_experts", s.experts);
    } else if (arch == HfArch::qwen3_moe) {
      check("moe_intermediate_size", s.moe_ffn);
      check("num_experts", s.experts);
      if (s.ffn) check("intermediate_size", s.ffn);
    } else {
      check("intermediate_size", s.ffn);
    }
    if (auto tie = flag_of(tmpl, "tie_word_embeddings"); tie && *tie != s.tied)
      throw UsageError(fmt::format("{}: tie_word_embeddings is {}, but the checkpoint {} an output layer", template_name,
                                   *tie ? "true" : "false", s.tied ? "has no" : "has"));
    if (auto b = flag_of(tmpl, "attention_bias"); b && *b)
      throw UsageError(template_name + ": attention_bias is true (biases on q/k/v and o): the checkpoint has none on linear_proj");
    if (auto v = flag_of(tmpl, "norm_topk_prob"); v && arch == HfArch::qwen3_moe) s.norm_topk_prob = *v;
    if (arch == HfArch::qwen3_moe && (member(tmpl, "mlp_only_layers") || member(tmpl, "decoder_sparse_step"))) {
      // Which layers are dense: the template's mlp_only_layers / decoder_sparse_step must say what the tensors hold.
      uint64_t step = 1;
      if (auto v = count_of(tmpl, "decoder_sparse_step", template_name)) step = *v;
      std::vector<uint64_t> only;
      if (const nlohmann::json* mol = member(tmpl, "mlp_only_layers"); mol && mol->is_array())
        for (const auto& x : *mol) only.push_back(x.get<uint64_t>());
      for (uint64_t l = 0; l < s.layers; ++l) {
        const bool moe = std::find(only.begin(), only.end(), l) == only.end() && step > 0 && (l + 1) % step == 0;
        if (moe != s.moe_layer[l])
          throw UsageError(fmt::format("{}: mlp_only_layers/decoder_sparse_step make layer {} {}, but the checkpoint's is {}",
                                       template_name, l, moe ? "MoE" : "dense", s.moe_layer[l] ? "MoE" : "dense"));
      }
    }
  }

  // ---- config.json ----
  nlohmann::json c = tmpl.is_object() ? tmpl : nlohmann::json::object();
  c["architectures"] = {ai.class_name};
  c["model_type"] = ai.name;
  c["hidden_size"] = s.hidden;
  c["num_hidden_layers"] = s.layers;
  c["num_attention_heads"] = s.heads;
  c["num_key_value_heads"] = s.kv_heads;
  c["head_dim"] = s.head_dim;
  c["vocab_size"] = s.vocab;
  c["tie_word_embeddings"] = s.tied;
  c["torch_dtype"] = dtype_name;
  if (!c.contains("hidden_act")) c["hidden_act"] = "silu";
  if (!c.contains("rms_norm_eps")) c["rms_norm_eps"] = eps;
  if (!c.contains("max_position_embeddings")) c["max_position_embeddings"] = positions;
  if (!c.contains("rope_theta") && !c.contains("rope_parameters")) c["rope_theta"] = rope_theta;
  if (!c.contains("attention_dropout")) c["attention_dropout"] = 0.0;
  if (!c.contains("initializer_range")) c["initializer_range"] = number_of(args, "init_method_std", targs).value_or(0.02);
  if (!c.contains("use_cache")) c["use_cache"] = true;
  switch (arch) {
    case HfArch::llama:
      if (!c.contains("attention_bias")) c["attention_bias"] = false;
      if (!c.contains("mlp_bias")) c["mlp_bias"] = false;
      if (auto v = flag_of(args, "use_rope_scaling"); v && *v && !c.contains("rope_scaling"))
        c["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", number_of(args, "rope_scaling_factor", targs).value_or(8.0)},
                             {"low_freq_factor", 1.0},
                             {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 8192}};
      break;
    case HfArch::mistral:
      if (!c.contains("sliding_window")) c["sliding_window"] = nullptr;
      break;
    case HfArch::qwen2:
    case HfArch::qwen3:
      if (!c.contains("use_sliding_window")) c["use_sliding_window"] = false;
      if (arch == HfArch::qwen3 && !c.contains("attention_bias")) c["attention_bias"] = false;
      break;
    case HfArch::mixtral:
      c["intermediate_size"] = s.moe_ffn;
      c["num_local_experts"] = s.experts;
      c["num_experts_per_tok"] = s.topk;
      if (!c.contains("sliding_window")) c["sliding_window"] = nullptr;
      if (!c.contains("router_jitter_noise")) c["router_jitter_noise"] = 0.0;
      break;
    case HfArch::qwen3_moe: {
      c["moe_intermediate_size"] = s.moe_ffn;
      c["num_experts"] = s.experts;
      c["num_experts_per_tok"] = s.topk;
      if (s.ffn || !c.contains("intermediate_size")) c["intermediate_size"] = s.ffn ? s.ffn : s.moe_ffn;
      c["norm_topk_prob"] = s.norm_topk_prob;
      if (!c.contains("attention_bias")) c["attention_bias"] = false;
      if (!c.contains("use_sliding_window")) c["use_sliding_window"] = false;
      if (!tmpl.is_object() || !member(tmpl, "mlp_only_layers")) {
        nlohmann::json dense = nlohmann::json::array();
        for (uint64_t l = 0; l < s.layers; ++l)
          if (!s.moe_layer[l]) dense.push_back(l);
        c["mlp_only_layers"] = dense;
        c["decoder_sparse_step"] = 1;
      }
      break;
    }
  }
  if (!ai.moe) c["intermediate_size"] = s.ffn;
  m.config = std::move(c);
  return m;
}

HfArch choose_hf_arch(const MegatronGptTensors& t, const nlohmann::json& tmpl, std::string& why) {
  if (const nlohmann::json* mt = member(tmpl, "model_type"); mt && mt->is_string())
    if (auto a = parse_hf_arch(mt->get<std::string>())) {
      why = "the config's model_type";
      return *a;
    }
  bool qk = false, bias = false, moe = false, dense = false;
  for (const auto& entry : t.by_name) {
    const std::string& name = entry.first;  // a structured binding cannot be captured in C++17
    if (name.rfind("decoder.layers.", 0) != 0) continue;
    const auto ends = [&](const char* s) {
      const std::string x(s);
      return name.size() >= x.size() && name.compare(name.size() - x.size(), x.size(), x) == 0;
    };
    qk |= ends(".self_attention.q_layernorm.weight");
    bias |= ends(".self_attention.linear_qkv.bias");
    moe |= ends(".mlp.router.weight");
    dense |= ends(".mlp.linear_fc1.weight") && name.find(".experts.") == std::string::npos;
  }
  why = "the tensors";
  if (qk) return moe ? HfArch::qwen3_moe : HfArch::qwen3;
  if (bias) return HfArch::qwen2;
  if (moe) return dense ? HfArch::qwen3_moe : HfArch::mixtral;
  return HfArch::llama;
}

}  // namespace fpg::app::convert
