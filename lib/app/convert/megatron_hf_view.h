// A Megatron-Core GPT checkpoint seen as a Hugging Face model's tensors: a ckpt::ParamSource whose
// tensors carry transformers' names and shapes, each read straight from the Megatron tensor it is
// part of, so that the streaming export (param_export.h) writes a model directory without holding
// more than its slabs.
//
// Every HF tensor is a sequence of row blocks of one Megatron tensor (a gather, never arithmetic):
//   model.embed_tokens.weight        embedding.word_embeddings.weight, the first vocab_size rows
//   lm_head.weight                   output_layer.weight, the first vocab_size rows (untied only)
//   model.norm.weight                decoder.final_layernorm.weight
//   per layer L (model.layers.L. ← decoder.layers.L.):
//   input_layernorm.weight           self_attention.linear_qkv.layer_norm_weight (TE spec) or
//                                    input_layernorm.weight (local spec)
//   self_attn.q_proj/k_proj/v_proj   self_attention.linear_qkv.weight (and .bias): Megatron stores per
//     .weight (.bias)                query group [the group's heads/kv_heads query heads, its key head,
//                                    its value head], head_dim rows each; q is every group's query
//                                    rows, k and v every group's key and value rows, in group order
//   self_attn.o_proj.weight          self_attention.linear_proj.weight
//   self_attn.q_norm/k_norm.weight   self_attention.q_layernorm/k_layernorm.weight (qwen3, qwen3_moe)
//   post_attention_layernorm.weight  mlp.linear_fc1.layer_norm_weight or pre_mlp_layernorm.weight
//   mlp.gate_proj/up_proj.weight     mlp.linear_fc1.weight: the first / second half of its rows (SwiGLU)
//   mlp.down_proj.weight             mlp.linear_fc2.weight
//   MoE layers (mixtral: block_sparse_moe.gate, .experts.E.w1/w3/w2; qwen3_moe: mlp.gate,
//   mlp.experts.E.gate_proj/up_proj/down_proj):
//     gate                           mlp.router.weight
//     expert E fc1 halves, fc2       mlp.experts.experts.E.linear_fc1/linear_fc2.weight (global E)
// A Megatron tensor this mapping does not consume (a linear bias, shared experts, a router's expert
// bias …) is refused by name: nothing is dropped silently.
#pragma once

#include <string>
#include <vector>

#include "app/convert/hf_model.h"
#include "ckpt/param_source.h"

namespace fpg::app::convert {

class MegatronHfView : public ckpt::ParamSource {
 public:
  // `t`: the Megatron tensors read (weights or masters) of `t.source`, which must outlive the view.
  // UsageError naming the Megatron tensors left unmapped.
  MegatronHfView(const MegatronGptTensors& t, const HfModelShape& shape);

  std::string describe() const override { return src_->describe(); }
  const std::vector<ckpt::ParamTensor>& tensors() const override { return tensors_; }
  void read(size_t t, uint64_t lo, uint64_t hi, void* out) const override;
  bool concurrent_reads() const override { return src_->concurrent_reads(); }
  void plan_reads(std::vector<ckpt::ParamRange> reads, uint64_t window) const override;
  void finish_reads() const override { src_->finish_reads(); }

  // The Megatron tensor each HF tensor reads (the first, where it reads several: none does).
  const std::string& source_name(size_t t) const { return src_->tensors()[map_[t].pieces.front().src].name; }

 private:
  // Elements [lo, lo + n) of source tensor `src`.
  struct Piece {
    size_t src = 0;
    uint64_t lo = 0, n = 0;
  };
  struct Mapped {
    std::vector<Piece> pieces;
    std::vector<uint64_t> starts;  // per piece: its first element in the HF tensor
  };
  // Adds HF tensor `name` of `shape` made of `pieces`.
  void add(const std::string& name, std::vector<uint64_t> shape, std::vector<Piece> pieces);
  // The (src, lo, n) pieces covering HF elements [lo, hi) of tensor t, in order.
  template <class F> void for_pieces(size_t t, uint64_t lo, uint64_t hi, F&& f) const;

  const ckpt::ParamSource* src_;
  std::vector<ckpt::ParamTensor> tensors_;
  std::vector<Mapped> map_;
};

}  // namespace fpg::app::convert
