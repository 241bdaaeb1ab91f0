// The model-parallel ranks of a Megatron torch_dist checkpoint, recovered from its model keys: which
// pieces of each parameter a tensor-parallel rank holds, which layers a pipeline stage holds and
// which experts an expert-parallel rank holds, and so each rank's local parameters in registration
// order: what Megatron's distributed optimizer laid that rank's buffers out over (megatron/FORMAT.md,
// "Model-parallel ranks").
//
// A model key's stored chunks are its tensor-parallel pieces (only the main replica of each is
// stored). Per parameter (one layer, one expert):
//   1 chunk          replicated over TP (norms, routers): every TP rank holds it whole;
//   T chunks         split along one axis: rank i holds the i-th by offset;
//   2T chunks        a gated linear_fc1, stored [w_0 … w_{T-1}, v_0 … v_{T-1}] along axis 0: rank i
//                    holds [w_i; v_i].
// A last pipeline stage of a model whose output layer is tied to the embedding also holds a copy of
// the embedding as "output_layer.weight" (Megatron's shared embedding on the last stage).
// T is the dense TP size (expert TP for expert keys): the smallest chunk count above 1 among the
// parameters other than linear_fc1 (linear_proj and linear_fc2 are always split), else linear_fc1's
// count / 2, else 1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/dcp/megatron/megatron_layout.h"

namespace fpg::dcp {

// A rank's local parameter: the pieces of one (whole) parameter it holds, in its local shape.
struct LocalParam {
  size_t param = 0;     // index into the whole parameters
  MegatronParam local;  // the whole parameter's name, key and dtype; the local shape
  struct Piece {
    Box box;                   // in the whole parameter's coordinates
    uint64_t local_start = 0;  // first element of the piece in the local (flattened) tensor
  };
  std::vector<Piece> pieces;   // by local_start; together the local tensor, row-major
  // Whether the local tensor is the whole parameter, element for element.
  bool whole() const;
};

// How experts are registered inside a layer: SequentialMLP registers expert by expert (fc1, fc2 of
// expert 0, then of expert 1 …), TEGroupedMLP weight by weight (fc1 of every expert, then fc2).
enum class ExpertOrder : uint8_t { sequential, grouped };

class ParallelModel {
 public:
  // FormatError (naming the key and its chunks) for a parameter whose chunks do not split over the
  // tensor-parallel ranks as above.
  explicit ParallelModel(const std::vector<MegatronParam>& params);

  uint32_t tp() const { return tp_; }
  uint32_t expert_tp() const { return etp_; }
  uint64_t layers() const { return layers_; }
  uint64_t experts() const { return experts_; }  // per MoE layer; 0 without experts
  bool has_experts() const { return experts_ > 0; }
  // Whether the output layer is tied to the embedding: the model keys hold the embedding and no
  // output layer (at PP > 1 the last stage holds a copy of the embedding in its buffers).
  bool tied_output() const { return embedding_.has_value() && !has_output_layer_; }

  // The dense (non-expert) local parameters of TP rank `tp` on the stage holding layers
  // [first, first + count), in registration order; the first stage holds the parameters registered
  // before the layers (embedding), the last those after them (final norm, output layer). With
  // `experts` every expert of each held layer too, registered in that order where the layer's first
  // expert key stands: a run at EP 1 whose expert TP is its TP registers its experts as parameters of
  // the dense buffers (Megatron marks them expert-parallel only at EP > 1 or another expert TP).
  std::vector<LocalParam> dense_rank(uint32_t tp, uint64_t first, uint64_t count, bool first_stage,
                                     bool last_stage, std::optional<ExpertOrder> experts = std::nullopt) const;
  // The expert local parameters of expert TP rank `etp`, expert-parallel rank `ep` of `eps`, on the
  // stage holding layers [first, first + count). FormatError when the experts do not divide by eps.
  std::vector<LocalParam> expert_rank(uint32_t etp, uint32_t ep, uint32_t eps, uint64_t first, uint64_t count,
                                      ExpertOrder order) const;

 private:
  LocalParam local_of(size_t p, uint32_t rank, uint32_t T) const;

  const std::vector<MegatronParam>& params_;
  uint32_t tp_ = 1, etp_ = 1;
  uint64_t layers_ = 0, experts_ = 0;
  size_t first_layered_ = 0;  // index of the first parameter of a layer (params_.size() if none)
  std::optional<size_t> embedding_;  // the parameter "embedding.word_embeddings.weight"
  bool has_output_layer_ = false;
};

// The dense parameters as a run at TP `tp` stores them: each parameter's chunks cut again into the
// pieces of `tp` ranks (1 chunk replicated, `tp` along its axis, 2 × `tp` for a gated linear_fc1),
// from how they are stored at `from_tp`. At `from_tp` = 1 every chunk is whole and the axis comes
// from Megatron's parallel linears: column-parallel (axis 0) linear_qkv, linear_fc1, the word
// embeddings and the output layer; row-parallel (axis 1) linear_proj and linear_fc2 weights; the
// rest (norms, the row-parallel biases) replicated. UsageError naming the parameter when its axis does
// not divide by `tp`. Expert parameters are cut alike from `from_expert_tp` into `expert_tp` pieces
// (each expert's linear_fc1 gated, linear_fc2 row-parallel).
std::vector<MegatronParam> tensor_parallel_params(const std::vector<MegatronParam>& params, uint32_t from_tp,
                                                  uint32_t tp, uint32_t from_expert_tp, uint32_t expert_tp);

}  // namespace fpg::dcp
