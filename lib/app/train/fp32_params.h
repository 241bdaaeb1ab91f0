// Which params of a train or step run stay native fp32: `--keep-fp32 REGEX` (any param; the matrices
// among them leave the layer-wise optimizer for the scalar one) and `--fp32-matrices REGEX` (2-D
// matrices only; they stay with the layer-wise optimizer, each updated by its owner and all-gathered
// in the F32 gather group, layout/layer_wise_layout.h). The layouts know one switch,
// PipelineConfig::fp32_matrices, for every fp32-kept matrix, so the two cannot both select matrices.
#pragma once

#include <string>
#include <vector>

#include "model/model_spec.h"
#include "pipeline/config.h"

namespace fpg::app::train {

// Marks the params keep_fp32 and fp32_matrices (empty: none) select, both ECMAScript regexes
// searched in the name, and returns warnings for the user: a `--keep-fp32` that leaves Muon no
// matrix, a `--fp32-matrices` that selects no matrix. UsageError for an invalid regex, for
// fp32_matrices without the layer-wise distributed optimizer or without c.fp32_matrices (which the
// caller sets with it; a spec marked by hand may set it alone), and for keep_fp32 selecting a matrix
// that fp32_matrices does not.
std::vector<std::string> apply_fp32_params(model::ModelSpec& spec, const std::string& keep_fp32,
                                           const std::string& fp32_matrices, const pipeline::PipelineConfig& c);

}  // namespace fpg::app::train
