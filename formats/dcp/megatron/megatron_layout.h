// Megatron-Core `torch_dist` checkpoints seen per parameter: the model keys unstacked into parameters in
// registration order, and the distributed optimizer's `dp_reshardable` bucket keys mapped back to those
// parameters by recomputing Megatron's buffer layout (layout/bucketed_layout.h) and checking it against
// the stored per_bucket_numel / per_bucket_numel_unpadded (Megatron-Core
// sharded_param_state_dp_reshardable; README.md "Megatron and PyTorch checkpoints").
//
// Registration order. A DCP `.metadata` lists the model's keys in the order of Megatron's sharded
// state dict, which follows module registration; per-layer parameters are stacked into one key per
// sub-module along a prepended layer axis ("decoder.layers.mlp.linear_fc1.weight" of shape [L, …]).
// The parameters in registration order are therefore: the unstacked keys before the first stacked
// one, then for each layer i the stacked keys in metadata order, then the remaining unstacked keys.
// A stacked MoE expert key ("…layers.mlp.experts.experts.linear_fc1.weight", [L, E, …]) stacks the
// experts along its second axis: each (layer, expert) is a parameter of its own, named by the global
// expert index ("decoder.layers.3.mlp.experts.experts.5.linear_fc1.weight").
// The recovered layout is accepted only if it reproduces every stored bucket size; otherwise the
// mismatch is reported and nothing is guessed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "formats/dcp/metadata/box_coverage.h"
#include "layout/bucketed_layout.h"
#include "model/model_spec.h"

namespace fpg::dcp {

// A model key of the checkpoint, as its metadata describes it.
struct ModelKey {
  std::string key;              // as stored, e.g. "module.decoder.layers.mlp.linear_fc1.weight"
  DType dtype = DType::BF16;
  std::vector<uint64_t> shape;  // global shape, the layer axis first when stacked
  std::vector<Box> chunks;      // the stored chunks (the tensor-parallel pieces), in the key's coordinates
};

// One parameter: a whole model key, or one layer (and expert) of a stacked key.
struct MegatronParam {
  std::string name;             // "decoder.layers.3.mlp.linear_fc1.weight": no "module." prefix
  std::string key;              // the stored key
  std::optional<uint64_t> layer;   // index along the stacked key's layer axis
  std::optional<uint64_t> expert;  // index along an expert key's expert axis
  std::vector<uint64_t> shape;  // the parameter's own shape (layer and expert axes removed)
  DType dtype = DType::BF16;
  uint64_t key_offset = 0;      // element of the key's flat extent where the parameter begins
  std::vector<Box> chunks;      // the key's chunks inside this parameter, in its own coordinates
  // Megatron's `shared_embedding` (a tied embedding or its output-layer copy at PP > 1): laid out in
  // a bucket of its own (layout::BucketedOptions::own_bucket). Set on a rank's local parameters.
  bool own_bucket = false;
};

// Whether a stored model key stacks layers along its first axis: a "layers." not followed by a
// layer index ("decoder.layers.mlp.…", not "decoder.layers.3.mlp.…").
bool is_stacked_key(const std::string& key);
// Whether a stacked key stacks MoE experts along its second axis ("….mlp.experts.…").
bool is_expert_key(const std::string& key);

// The key with a leading "module." (Megatron's DDP wrapper) removed.
std::string strip_module_prefix(const std::string& key);

// The parameters in registration order (see above). FormatError for a stacked key whose layer axis
// disagrees with the other stacked keys or that has no axis to unstack, or for a chunk that crosses
// a layer or expert.
std::vector<MegatronParam> megatron_params(const std::vector<ModelKey>& model_keys);

// The parameters as a model spec for the layout engine: names, shapes (a scalar as [1]) and dtypes.
model::ModelSpec megatron_spec(const std::vector<MegatronParam>& params);

// One distributed-optimizer buffer as the checkpoint records it: its dtypes (the key's
// "dtype_(torch.bfloat16, torch.float32)") and per bucket the padded and unpadded sizes.
struct StoredBuffer {
  DType param_dtype = DType::BF16;
  DType grad_dtype = DType::F32;
  std::vector<uint64_t> numel;           // per_bucket_numel
  std::vector<uint64_t> numel_unpadded;  // per_bucket_numel_unpadded
};

struct RecoveredLayout {
  model::ModelSpec spec;            // the parameters, registration order, named as MegatronParam::name
  layout::BucketedLayout layout;    // Megatron's buffers recomputed with the inferred options
  std::vector<uint32_t> gbuf;       // per layout buffer: the checkpoint's gbuf index
  // The bucket sizes consistent with the stored buckets: (lo, hi], hi absent when unbounded; the
  // layout uses lo + 1. Absent when every buffer is one bucket (bucket_size none also fits).
  std::optional<uint64_t> bucket_size_lo, bucket_size_hi;
};

// Whether the stored unpadded bucket sizes are those of `params` (registration order), at any DP size:
// the first disagreement in `mismatch` when not.
bool matches_unpadded(const std::vector<MegatronParam>& params, const std::vector<StoredBuffer>& stored,
                      std::string& mismatch);

// Recomputes the layout of `params` (registration order) on `dp` ranks and checks it against the
// stored buffers (in gbuf order). Returns the layout, or the first disagreement as a message naming
// the buffer, bucket and sizes in `mismatch`.
std::optional<RecoveredLayout> recover_layout(const std::vector<MegatronParam>& params,
                                              const std::vector<StoredBuffer>& stored, uint32_t dp,
                                              std::string& mismatch);

}  // namespace fpg::dcp
