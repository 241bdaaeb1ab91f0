// Names of optimizer-state keys, the contract between the pipeline's save/load and the layout check.
//   layout `model`:  "optimizer/<param name>/<state>", the param's shape, chunks = flat fragments;
//   layout `bucket`: "optimizer/buffer<b>/bucket<k>/<state>", 1-D of numel_unpadded, the 64-element
//                    alignment gaps declared padding (the tail padding belongs to the layout).
// <state> is the optimizer's state name ("exp_avg", "exp_avg_sq", "momentum", "master" ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fpg::ckpt {

enum class StateLayout : uint8_t { bucket, model };
std::string_view state_layout_name(StateLayout l);
std::optional<StateLayout> parse_state_layout(std::string_view name);

constexpr std::string_view kOptimizerPrefix = "optimizer/";

inline std::string model_state_key(const std::string& param, const std::string& state) {
  return std::string(kOptimizerPrefix) + param + "/" + state;
}
inline std::string bucket_state_key(uint32_t buffer, uint32_t bucket, const std::string& state) {
  return std::string(kOptimizerPrefix) + "buffer" + std::to_string(buffer) + "/bucket" + std::to_string(bucket) +
         "/" + state;
}

}  // namespace fpg::ckpt
