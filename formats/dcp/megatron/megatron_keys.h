// Megatron-Core's key grammar in torch_dist checkpoints, in one place: what each stored key of the
// distributed optimizer means, parsed and built (FORMAT.md beside this file, "Keys"). The readers
// (../dcp_params.h) and the writers (megatron_reshard.h) go through these and spell no key themselves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace fpg::dcp {

// The bytes entry of the non-sharded state: "common_state/shard_0_1"; its content_metadata's
// `distrib_optim_sharding_type` names the optimizer's form.
constexpr const char* kCommonStatePrefix = "common_state/";
constexpr const char* kShardingTypeField = "distrib_optim_sharding_type";
// The optimizer group of a model-parallel rank's first (or only) data-parallel group.
constexpr const char* kFirstGroup = "optimizer.distributed.dp_group_idx_0";
// The prefix of model-space (fully_reshardable, layer-wise) optimizer keys.
constexpr const char* kModelSpacePrefix = "optimizer.state";

// "[chained_N.]optimizer.distributed.dp_group_idx_G.gbuf_idx_B.dtype_(torch.P, torch.Q).bucket_idx_K.STATE"
struct BucketKey {
  std::string group;  // "[chained_N.]optimizer.distributed.dp_group_idx_G"
  uint32_t gbuf = 0, bucket = 0;
  std::string param_dtype, grad_dtype;  // torch names: "bfloat16", "float32"
  std::string state;                    // "param" (the master), "exp_avg", …
};
std::optional<BucketKey> parse_bucket_key(const std::string& key);
std::string bucket_key_name(const std::string& group, uint32_t gbuf, DType param_dtype, DType grad_dtype,
                            uint32_t bucket, const std::string& state);

// An optimizer group "[chained_N.]optimizer.distributed.dp_group_idx_G": G is the rank in the
// model-parallel group (TP × PP; expert TP × EP × PP for the expert optimizer), N the child of a
// chained optimizer (with MoE: 0 dense, 1 expert).
struct GroupName {
  std::optional<uint32_t> chained;
  uint32_t dp_group = 0;
};
std::optional<GroupName> parse_group_name(const std::string& group);
// "[chained_N.]optimizer.distributed.dp_group_idx_G" (without `chained`: a distributed optimizer's
// group, not chained).
std::string group_name(uint32_t dp_group, std::optional<uint32_t> chained = std::nullopt);

// "[chained_N.]optimizer.state.STATE.MODEL_KEY"
struct ModelSpaceStateKey {
  std::string state;      // "param" / "fp32_param" (the master), "exp_avg", "momentum_buffer" …
  std::string model_key;  // the model key it has the shape of
};
std::optional<ModelSpaceStateKey> parse_model_space_state_key(const std::string& key);
std::string model_space_state_key(const std::string& state, const std::string& model_key);

// A ShardedObject of an optimizer group: "GROUP.NAME/shard_0_1", NAME one of the below.
constexpr const char* kPerBucketNumel = "per_bucket_numel";
constexpr const char* kPerBucketNumelUnpadded = "per_bucket_numel_unpadded";
constexpr const char* kParamGroups = "optimizer";
std::string group_object_key(const std::string& group, const std::string& name);
// Whether `key` is one of `group`'s objects NAME (any shard suffix).
bool is_group_object(const std::string& key, const std::string& group, const std::string& name);

// Whether a key belongs to a chained optimizer's child ("chained_N.…").
bool is_chained_key(const std::string& key);

// Megatron's name of a state in its distributed optimizer's keys: the master is "param".
std::string megatron_state_name(const std::string& role);

}  // namespace fpg::dcp
