// Layout self-consistency of a checkpoint's optimizer state (the hook of validate): given the layout
// the index records and the state layout, every key the layout implies exists with the implied
// extent, the declared padding equals the layout's alignment gaps, and every chunk was written by a
// rank that owns that range. Keys under "optimizer/" that the layout does not imply are reported too,
// and so is declared padding in any other key (weights and FP8 data are stored whole).
// Problems are layout_mismatch records naming key, range and file.
#pragma once

#include <string>
#include <vector>

#include "ckpt/index.h"
#include "ckpt/key_names.h"
#include "ckpt/problem.h"
#include "layout/bucketed_layout.h"
#include "layout/layer_wise_layout.h"

namespace fpg::ckpt {

// `states`: the optimizer's state names, e.g. {"exp_avg", "exp_avg_sq"}.
std::vector<Problem> check_layout(const Index& index, const layout::BucketedLayout& layout, StateLayout state_layout,
                                  const std::vector<std::string>& states);

// Muon matrices are owned whole: layout `model` keys whose chunks all come from the owner; the
// other params are checked against layout.scalar as above. `matrix_states`: the matrices' state
// names when their optimizer is not the scalar params' (Muon's momentum_buffer vs AdamW's moments).
std::vector<Problem> check_layout(const Index& index, const layout::LayerWiseLayout& layout,
                                  StateLayout state_layout, const std::vector<std::string>& states);
std::vector<Problem> check_layout(const Index& index, const layout::LayerWiseLayout& layout,
                                  StateLayout state_layout, const std::vector<std::string>& states,
                                  const std::vector<std::string>& matrix_states);

}  // namespace fpg::ckpt
