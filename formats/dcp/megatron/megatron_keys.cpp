#include "formats/dcp/megatron/megatron_keys.h"

#include <regex>

#include "formats/dcp/torch_dtype.h"

namespace fpg::dcp {
namespace {

const std::regex kBucketKey(
    R"(^((?:chained_\d+\.)?optimizer\.distributed\.dp_group_idx_\d+)\.gbuf_idx_(\d{1,9})\.dtype_\(torch\.(\w+), torch\.(\w+)\)\.bucket_idx_(\d{1,9})\.(\w+)$)");
const std::regex kGroupName(R"(^(?:chained_(\d{1,9})\.)?optimizer\.distributed\.dp_group_idx_(\d{1,9})$)");
const std::regex kModelSpaceState(R"(^(?:chained_\d+\.)?optimizer\.state\.(\w+)\.(.+)$)");

}  // namespace

std::optional<BucketKey> parse_bucket_key(const std::string& key) {
  std::smatch m;
  if (!std::regex_match(key, m, kBucketKey)) return std::nullopt;
  BucketKey k;
  k.group = m[1];
  k.gbuf = static_cast<uint32_t>(std::stoul(m[2]));
  k.param_dtype = m[3];
  k.grad_dtype = m[4];
  k.bucket = static_cast<uint32_t>(std::stoul(m[5]));
  k.state = m[6];
  return k;
}

std::optional<GroupName> parse_group_name(const std::string& group) {
  std::smatch m;
  if (!std::regex_match(group, m, kGroupName)) return std::nullopt;
  GroupName g;
  if (m[1].matched) g.chained = static_cast<uint32_t>(std::stoul(m[1]));
  g.dp_group = static_cast<uint32_t>(std::stoul(m[2]));
  return g;
}

std::string bucket_key_name(const std::string& group, uint32_t gbuf, DType param_dtype, DType grad_dtype,
                            uint32_t bucket, const std::string& state) {
  return group + ".gbuf_idx_" + std::to_string(gbuf) + ".dtype_(torch." + std::string(torch_dtype_name(param_dtype)) +
         ", torch." + std::string(torch_dtype_name(grad_dtype)) + ").bucket_idx_" + std::to_string(bucket) + "." + state;
}

std::optional<ModelSpaceStateKey> parse_model_space_state_key(const std::string& key) {
  std::smatch m;
  if (!std::regex_match(key, m, kModelSpaceState)) return std::nullopt;
  return ModelSpaceStateKey{m[1], m[2]};
}

std::string model_space_state_key(const std::string& state, const std::string& model_key) {
  return std::string(kModelSpacePrefix) + "." + state + "." + model_key;
}

std::string group_object_key(const std::string& group, const std::string& name) { return group + "." + name + "/shard_0_1"; }

bool is_group_object(const std::string& key, const std::string& group, const std::string& name) {
  return key.rfind(group + "." + name + "/", 0) == 0;
}

bool is_chained_key(const std::string& key) { return key.rfind("chained_", 0) == 0; }

std::string megatron_state_name(const std::string& role) { return role == "master" ? "param" : role; }

}  // namespace fpg::dcp
