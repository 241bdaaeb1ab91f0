// The one table of how a Megatron-Core GPT model's tensors and a Hugging Face model's tensors are the
// same numbers, read in either direction: the export (megatron_hf_view.h) gathers each HF tensor from
// the Megatron row blocks listed for it, the import (hf_megatron_view.h) each Megatron tensor from the
// HF tensors whose blocks fall in it. Every HF tensor is a sequence of row blocks of Megatron tensors
// (a row being everything after the first dimension): a gather, never arithmetic.
//
//   model.embed_tokens.weight        embedding.word_embeddings.weight, the first vocab_size rows
//   lm_head.weight                   output_layer.weight, the first vocab_size rows (untied only)
//   model.norm.weight                decoder.final_layernorm.weight
//   per layer L (model.layers.L. ← decoder.layers.L.):
//   input_layernorm.weight           self_attention.linear_qkv.layer_norm_weight
//   self_attn.q_proj/k_proj/v_proj   self_attention.linear_qkv.weight (and .bias): Megatron stores per
//     .weight (.bias)                query group [the group's heads/kv_heads query heads, its key head,
//                                    its value head], head_dim rows each; q is every group's query
//                                    rows, k and v every group's key and value rows, in group order
//   self_attn.o_proj.weight          self_attention.linear_proj.weight
//   self_attn.q_norm/k_norm.weight   self_attention.q_layernorm/k_layernorm.weight (qwen3, qwen3_moe)
//   post_attention_layernorm.weight  mlp.linear_fc1.layer_norm_weight (a MoE layer of the TE spec:
//                                    pre_mlp_layernorm.weight)
//   mlp.gate_proj/up_proj.weight     mlp.linear_fc1.weight: the first / second half of its rows (SwiGLU)
//   mlp.down_proj.weight             mlp.linear_fc2.weight
//   MoE layers (mixtral: block_sparse_moe.gate, .experts.E.w1/w3/w2; qwen3_moe: mlp.gate,
//   mlp.experts.E.gate_proj/up_proj/down_proj):
//     gate                           mlp.router.weight
//     expert E fc1 halves, fc2       mlp.experts.experts.E.linear_fc1/linear_fc2.weight (global E)
//
// Megatron's rows beyond vocab_size in the embedding and output layer (its vocabulary padding) are in
// no HF tensor: the export drops them, the import fills them with zeros.
//
// Norm names. Megatron-Core's local spec stores its input and pre-MLP norms under the names of the TE
// spec's fused norms (its sharded_state_dict_keys_map): both specs store the names above, except the
// TE spec's MoE layers, whose pre-MLP norm is a module of its own (pre_mlp_layernorm.weight). An
// export also takes the unfused names of other specs (megatron_norm_alias).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/convert/hf_model.h"

namespace fpg::app::convert {

// The Megatron-Core layer spec whose names a model's tensors carry: the Transformer Engine spec
// (get_gpt_layer_with_transformer_engine_spec, Megatron-LM's default) or the local one
// (get_gpt_layer_local_spec).
enum class MegatronLayerSpec { te, local };

// "te", "local"; nullopt otherwise.
std::optional<MegatronLayerSpec> parse_megatron_layer_spec(const std::string& name);
const char* megatron_layer_spec_name(MegatronLayerSpec s);

// A tensor of the Megatron model, whole (the shape of a run at TP = PP = EP = 1).
struct GptTensor {
  std::string name;                // "decoder.layers.3.mlp.experts.experts.5.linear_fc1.weight"
  std::vector<uint64_t> shape;
  std::optional<uint64_t> layer;   // global layer index
  std::optional<uint64_t> expert;  // global expert index
  // The name within its layer (or expert), as Megatron keys it once layers and experts are stacked:
  // "self_attention.linear_qkv.weight", "mlp.experts.experts.linear_fc1.weight"; the whole name for a
  // tensor of no layer.
  std::string module_key;
  bool gated = false;  // a gated linear_fc1: stored as its w and v halves
};

// A module whose `_extra_state` Megatron keeps beside its weights (an empty object without FP8).
struct GptExtraState {
  std::optional<uint64_t> layer, expert;
  std::string module_key;  // "self_attention.linear_qkv", "mlp.experts.experts.linear_fc1", "decoder.final_layernorm"
};

// Rows [row, row + rows) of Megatron tensor `tensor` (an index into GptHfTable::megatron).
struct RowBlock {
  size_t tensor = 0;
  uint64_t row = 0, rows = 0;
};

struct HfTensorLink {
  std::string name;  // "model.layers.3.self_attn.q_proj.weight"
  std::vector<uint64_t> shape;
  std::vector<RowBlock> blocks;  // in order: the HF tensor's elements
};

struct GptHfTable {
  std::vector<GptTensor> megatron;  // Megatron's registration order
  std::vector<HfTensorLink> hf;     // transformers' order
  std::vector<GptExtraState> extra_states;
};

// The table of a model of `shape` with the names of `spec`.
GptHfTable gpt_hf_table(const HfModelShape& shape, MegatronLayerSpec spec);

// The other name a Megatron spec gives the norm `name` ("…linear_qkv.layer_norm_weight" ↔
// "…input_layernorm.weight", "…mlp.linear_fc1.layer_norm_weight" ↔ "…pre_mlp_layernorm.weight"), or ""
// when it has none.
std::string megatron_norm_alias(const std::string& name);

}  // namespace fpg::app::convert
