// The model section of a Megatron-Core GPT checkpoint, written as Megatron-Core's dist_checkpointing
// saves it (torch_dist): the seam between a use case that makes one from whole parameters
// (app/convert's import of a Hugging Face model) and the format that stores it (formats/dcp/megatron),
// handed to lib/ by megatron_model_writer(), defined in formats/registry.cpp, so lib/ names no format.
//
// What is written is what `dist_checkpointing.load(model.sharded_state_dict(), DIR)` and Megatron-LM's
// `--finetune` / `--no-load-optim` load: every parameter in Megatron's key grammar and in the pieces a
// run at the given TP × PP × EP stores (main replicas only), each module's `_extra_state` object, and a
// common state without optimizer; no optimizer state, no RNG state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/param_source.h"

namespace fpg::ckpt {

// One parameter, whole: the shape of a run at TP = PP = EP = 1.
struct MegatronModelParam {
  size_t tensor = 0;               // its data: tensor `tensor` of the section's source, in the dtype written
  std::optional<uint64_t> layer;   // global index of its decoder layer
  std::optional<uint64_t> expert;  // global index of its MoE expert
  // Its name within its layer (and expert) once Megatron stacks them, or its whole name outside the
  // layers: "self_attention.linear_qkv.weight", "mlp.experts.experts.linear_fc1.weight",
  // "embedding.word_embeddings.weight". Megatron's parallel linears are told by it.
  std::string module_key;
  bool gated = false;  // a gated linear_fc1: stored as its w and v halves, each split over TP
};

// A module whose `_extra_state` Megatron keeps: written as the empty state (None) that Megatron-Core's
// own linears save, and that Transformer Engine's modules load as "no FP8 state".
struct MegatronExtraState {
  std::optional<uint64_t> layer, expert;
  std::string module_key;  // "self_attention.linear_qkv", "decoder.final_layernorm"
};

struct MegatronModelSection {
  const ParamSource* source = nullptr;
  std::vector<MegatronModelParam> params;  // registration order: the embedding first, the layers, then the rest
  std::vector<MegatronExtraState> extra_states;
  // The parallelism whose pieces are stored. Expert tensor parallelism is `tp` (Megatron's default).
  uint32_t tp = 1, pp = 1, ep = 1;
};

struct MegatronModelWriteOptions {
  std::string checkpoint_id;  // the path the checkpoint is known by once in place; default: the directory written
  bool progress = false;
};

struct MegatronModelWriteSummary {
  uint64_t keys = 0, chunks = 0, objects = 0, files = 0;
  uint64_t bytes_read = 0, bytes_written = 0;
  bool stacked_layers = true;  // layers stacked on a prepended axis (false: keyed per layer, as Megatron keys mixed dense/MoE models)
};

class MegatronModelWriter {
 public:
  virtual ~MegatronModelWriter() = default;
  // Writes `section` as a torch_dist checkpoint into the directory `dir` (created; committed
  // atomically: nothing is left behind on failure). UsageError when a parameter does not split over the
  // parallelism (naming it and the sizes), FormatError for a failed read or write.
  virtual MegatronModelWriteSummary write(const MegatronModelSection& section, const std::string& dir,
                                          const MegatronModelWriteOptions& options) const = 0;
};

// Megatron-Core's torch_dist writer of this build (formats/registry.cpp).
const MegatronModelWriter& megatron_model_writer();

}  // namespace fpg::ckpt
