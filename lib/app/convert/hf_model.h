// A Megatron-Core GPT model seen as one of the Hugging Face architectures it can be: which
// architecture, and its shape (the fields of the config.json transformers builds the model from).
//
// The shape comes from three places, each checked against the others:
//   the tensors      hidden size, layers, padded vocab rows, FFN sizes, experts, q/k norm, qkv bias,
//                    tied embeddings, which layers are MoE;
//   a template       --hf-config: a config.json (e.g. the one of the model the run started from),
//                    its fields kept, its shape fields checked against the tensors;
//   the saved args   Megatron-LM's training args in the checkpoint's common state (hidden_size,
//                    num_attention_heads, num_query_groups, kv_channels, rotary_base, norm_epsilon,
//                    max_position_embeddings, vocab_size, moe_router_topk …).
// What neither the template nor the args give and the tensors cannot tell (attention heads, rope
// theta, norm epsilon, positions, router top-k) is an error naming each missing field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/param_source.h"

namespace fpg::app::convert {

enum class HfArch { llama, mistral, qwen2, qwen3, mixtral, qwen3_moe };

// "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe"; nullopt otherwise.
std::optional<HfArch> parse_hf_arch(const std::string& name);
const char* hf_arch_name(HfArch a);
// "llama|mistral|qwen2|qwen3|mixtral|qwen3_moe", for messages.
std::string hf_arch_names();
bool hf_arch_is_moe(HfArch a);
bool hf_arch_has_qk_norm(HfArch a);   // q/k RMSNorms: qwen3, qwen3_moe
bool hf_arch_has_qkv_bias(HfArch a);  // q/k/v biases: qwen2

// The Megatron GPT tensors of a checkpoint, by name (ParamSource indices of one role: the weights,
// or the fp32 masters).
struct MegatronGptTensors {
  const ckpt::ParamSource* source = nullptr;
  std::vector<std::pair<std::string, size_t>> by_name;  // sorted by name
  // The tensor `name`, or nullptr.
  const ckpt::ParamTensor* find(const std::string& name) const;
  size_t index(const std::string& name) const;  // InternalError when absent
};

// role: "weight" or "master". FormatError when the source holds no such tensors.
MegatronGptTensors megatron_gpt_tensors(const ckpt::ParamSource& src, const std::string& role);

struct HfModelShape {
  HfArch arch = HfArch::llama;
  uint64_t hidden = 0, layers = 0;
  uint64_t heads = 0, kv_heads = 0, head_dim = 0;
  uint64_t ffn = 0;                  // dense layers' intermediate size (0: none)
  uint64_t vocab = 0, padded_vocab = 0;
  uint64_t experts = 0, moe_ffn = 0, topk = 0;
  std::vector<bool> moe_layer;       // per layer: its MLP is a mixture of experts
  bool tied = false, qkv_bias = false, qk_norm = false;
  bool norm_topk_prob = true;        // top-k router weights renormalized (Megatron's default router)
  std::vector<std::string> notes;    // what was assumed, for the summary
};

// The shape of the checkpoint's model as `arch`, and the config.json that describes it: the
// template's fields kept (or a fresh config), shape fields set. `args`: the saved training args (an
// object, or null), `template_json`: the parsed --hf-config (or null), `template_name` for messages.
// UsageError naming the field when the template or the args disagree with the tensors or the
// architecture (qkv bias for llama, no q/k norm for qwen3 …), or when a field is missing.
struct HfModel {
  HfModelShape shape;
  nlohmann::json config;
};
HfModel resolve_hf_model(HfArch arch, const MegatronGptTensors& t, const nlohmann::json& args,
                         const nlohmann::json& template_json, const std::string& template_name,
                         const std::string& dtype_name);

// The architecture `--arch auto` takes: the template's model_type when it names one of ours, else
// what the tensors show (q/k norms: qwen3 or qwen3_moe; q/k/v biases: qwen2; experts: mixtral, or
// qwen3_moe beside dense layers; otherwise llama). `why` says which.
HfArch choose_hf_arch(const MegatronGptTensors& t, const nlohmann::json& template_json, std::string& why);

}  // namespace fpg::app::convert
