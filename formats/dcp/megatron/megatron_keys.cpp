#include "formats/dcp/megatron/megatron_keys.h"

#include "formats/dcp/name_scanner.h"
#include "formats/dcp/torch_dtype.h"

namespace fpg::dcp {
namespace {

// "[chained_N.]optimizer.distributed.dp_group_idx_G", consumed from the start of `sc`.
bool scan_group(NameScanner& sc, std::optional<uint32_t>* chained, uint32_t* group, size_t max_chained_digits) {
  uint64_t v = 0;
  if (sc.literal("chained_")) {
    if (!sc.digits(&v, max_chained_digits) || !sc.literal(".")) return false;
    if (chained) *chained = static_cast<uint32_t>(v);
  }
  if (!sc.literal("optimizer.distributed.dp_group_idx_") || !sc.digits(&v, 9)) return false;
  *group = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

std::optional<BucketKey> parse_bucket_key(const std::string& key) {
  NameScanner sc(key);
  uint32_t group = 0;
  uint64_t gbuf = 0, bucket = 0;
  std::string_view pd, gd, state;
  if (!scan_group(sc, nullptr, &group, 20)) return std::nullopt;
  const size_t group_end = sc.pos();
  if (!sc.literal(".gbuf_idx_") || !sc.digits(&gbuf) || !sc.literal(".dtype_(torch.") || !sc.word(&pd) ||
      !sc.literal(", torch.") || !sc.word(&gd) || !sc.literal(").bucket_idx_") || !sc.digits(&bucket) ||
      !sc.literal(".") || !sc.word(&state) || !sc.done())
    return std::nullopt;
  BucketKey k;
  k.group = key.substr(0, group_end);
  k.gbuf = static_cast<uint32_t>(gbuf);
  k.param_dtype = std::string(pd);
  k.grad_dtype = std::string(gd);
  k.bucket = static_cast<uint32_t>(bucket);
  k.state = std::string(state);
  return k;
}

std::optional<GroupName> parse_group_name(const std::string& group) {
  NameScanner sc(group);
  GroupName g;
  if (!scan_group(sc, &g.chained, &g.dp_group, 9) || !sc.done()) return std::nullopt;
  return g;
}

std::string bucket_key_name(const std::string& group, uint32_t gbuf, DType param_dtype, DType grad_dtype,
                            uint32_t bucket, const std::string& state) {
  return group + ".gbuf_idx_" + std::to_string(gbuf) + ".dtype_(torch." + std::string(torch_dtype_name(param_dtype)) +
         ", torch." + std::string(torch_dtype_name(grad_dtype)) + ").bucket_idx_" + std::to_string(bucket) + "." + state;
}

std::optional<ModelSpaceStateKey> parse_model_space_state_key(const std::string& key) {
  NameScanner sc(key);
  uint64_t chained = 0;
  std::string_view state;
  if (sc.literal("chained_") && (!sc.digits(&chained, 20) || !sc.literal("."))) return std::nullopt;
  if (!sc.literal("optimizer.state.") || !sc.word(&state) || !sc.literal(".") || sc.done() ||
      !NameScanner::no_line_breaks(sc.rest()))
    return std::nullopt;
  return ModelSpaceStateKey{std::string(state), std::string(sc.rest())};
}

std::string model_space_state_key(const std::string& state, const std::string& model_key) {
  return std::string(kModelSpacePrefix) + "." + state + "." + model_key;
}

std::string group_name(uint32_t dp_group, std::optional<uint32_t> chained) {
  return (chained ? "chained_" + std::to_string(*chained) + "." : std::string()) + "optimizer.distributed.dp_group_idx_" +
         std::to_string(dp_group);
}

std::string group_object_key(const std::string& group, const std::string& name) { return group + "." + name + "/shard_0_1"; }

bool is_group_object(const std::string& key, const std::string& group, const std::string& name) {
  return key.rfind(group + "." + name + "/", 0) == 0;
}

bool is_chained_key(const std::string& key) { return key.rfind("chained_", 0) == 0; }

std::string megatron_state_name(const std::string& role) { return role == "master" ? "param" : role; }

}  // namespace fpg::dcp
