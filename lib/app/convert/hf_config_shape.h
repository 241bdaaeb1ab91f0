// A Hugging Face model's shape from its config.json, for an import into Megatron: the fields
// transformers builds the model from (hidden_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, head_dim, intermediate_size, vocab_size, tie_word_embeddings; mixtral's
// num_local_experts and num_experts_per_tok; qwen3_moe's num_experts, moe_intermediate_size,
// mlp_only_layers, decoder_sparse_step, norm_topk_prob), with transformers' defaults where a field is
// absent, and q/k/v biases and q/k norms as the tensors hold them (checked against the architecture).
// Every tensor's shape is checked later, against the table (gpt_hf_table.h) this shape makes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/convert/hf_model.h"
#include "ckpt/param_source.h"

namespace fpg::app::convert {

// The architecture config.json's model_type names. UsageError naming the model_type (or its absence)
// when it is none of hf_arch_names().
HfArch hf_arch_of_config(const nlohmann::json& config, const std::string& config_name);

// The shape of `hf` (the model's tensors) as `arch` says `config` (named `config_name` in messages).
// padded_vocab is vocab_size: the caller pads it for the target. UsageError naming the field that is
// missing or not a size, a count of layers or experts the tensors cannot hold, or the tensor that
// disagrees with the architecture.
HfModelShape hf_config_shape(HfArch arch, const nlohmann::json& config, const std::string& config_name,
                             const ckpt::ParamSource& hf);

// Megatron's vocabulary rows for `vocab` at TP `tp`: padded up to a multiple of divisible_by × tp, as
// Megatron-LM's --make-vocab-size-divisible-by pads it.
uint64_t megatron_padded_vocab(uint64_t vocab, uint64_t divisible_by, uint32_t tp);

// The Megatron-LM arguments that build this model (pretrain_gpt.py), for the summary: the shape, the
// norms, rotary embeddings and MoE routing as config.json sets them, the parallel sizes.
std::vector<std::string> megatron_lm_args(const HfModelShape& s, const nlohmann::json& config, uint64_t divisible_by,
                                          uint32_t tp, uint32_t pp, uint32_t ep, bool te_spec);

}  // namespace fpg::app::convert
