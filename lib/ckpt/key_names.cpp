#include "ckpt/key_names.h"

namespace fpg::ckpt {

std::string_view state_layout_name(StateLayout l) { return l == StateLayout::bucket ? "bucket" : "model"; }

std::optional<StateLayout> parse_state_layout(std::string_view name) {
  if (name == "bucket") return StateLayout::bucket;
  if (name == "model") return StateLayout::model;
  return std::nullopt;
}

}  // namespace fpg::ckpt
