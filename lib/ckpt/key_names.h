// Names of optimizer-state keys, the contract between the pipeline's save/load and the layout check.
//   layout `model`:  "optimizer/<param name>/<state>", the param's shape, chunks = flat fragments;
//   layout `bucket`: "optimizer/buffer<b>/bucket<k>/<state>", 1-D of numel_unpadded, the 64-element
//                    alignment gaps declared padding (the tail padding belongs to the layout).
// <state> is the optimizer's state name ("exp_avg", "exp_avg_sq", "momentum_buffer", "master" ...).
// Model weights and FP8 state of a training checkpoint (app/checkpoint/state_save.h):
//   "weight/<param>"        BF16 or F32, the param's shape (kind weight): params that are not FP8;
//   "fp8/<param>"           F8_E4M3 / F8_E5M2 rowwise data, the param's shape (kind fp8_data);
//   "fp8/<param>/columnwise"  MXFP8 columnwise data, same shape and element order (kind fp8_data);
//   "fp8/<param>/<what>"    the FP8 scale state (kind fp8_scale), see fp8_state_key.
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

constexpr std::string_view kWeightPrefix = "weight/";
constexpr std::string_view kFp8Prefix = "fp8/";

inline std::string weight_key(const std::string& param) { return std::string(kWeightPrefix) + param; }
inline std::string fp8_data_key(const std::string& param) { return std::string(kFp8Prefix) + param; }
inline std::string fp8_columnwise_key(const std::string& param) { return fp8_data_key(param) + "/columnwise"; }
// <what>: "scale", "scale_inv" (F32, the scale grid the data was cast with: [1, 1] per tensor or the
// block grid), "scale_e8m0", "columnwise_scale_e8m0" (MXFP8 E8M0 grids), "amax_history" (F32 [L],
// delayed scaling) and "delayed_scale" (F32 [2]: the scale and scale_inv the next cast uses).
inline std::string fp8_state_key(const std::string& param, const std::string& what) {
  return fp8_data_key(param) + "/" + what;
}

}  // namespace fpg::ckpt
