#include "app/train/fp32_params.h"

#include <regex>

#include "core/printable.h"
#include "core/error.h"
#include "layout/layer_wise_layout.h"

namespace fpg::app::train {
namespace {

std::regex compile(const std::string& field, const std::string& regex) {
  try {
    return std::regex(regex, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw UsageError(Message(Field{field}, ": invalid regular expression ", quoted_name(regex), ": ", e.what()));
  }
}

bool is_matrix(const model::Param& p) { return p.role == model::Role::matrix && p.is_2d(); }

}  // namespace

std::vector<std::string> apply_fp32_params(model::ModelSpec& spec, const std::string& keep_fp32,
                                           const std::string& fp32_matrices, const pipeline::PipelineConfig& c) {
  std::vector<std::string> warnings;
  if (!keep_fp32.empty()) model::mark_keep_in_fp32(spec, keep_fp32);
  if (!fp32_matrices.empty()) {
    if (c.dist_opt != pipeline::DistOpt::layerwise)
      throw UsageError(Message(Field{"fp32_matrices"}, " needs the layer-wise distributed optimizer (", Field{"optimizer"},
                               " muon, or ", Field{"dist_opt"}, " layerwise): the bucketed one gathers no matrix whole"));
    if (!c.fp32_matrices)
      throw UsageError(Message(Field{"fp32_matrices"}, " ", quoted_name(fp32_matrices), " needs pipeline.fp32_matrices set"));
    const std::regex re = compile("fp32_matrices", fp32_matrices);
    // With fp32_matrices every fp32-kept matrix is layer-wise: one that only --keep-fp32 selects
    // would silently stay with Muon instead of going to the scalar optimizer.
    for (const model::Param& p : spec.params)
      if (p.keep_in_fp32 && is_matrix(p) && !std::regex_search(p.name, re))
        throw UsageError(Message(Field{"keep_fp32"}, " ", quoted_name(keep_fp32), " selects the matrix ", quoted_name(p.name),
                                 ", which ", Field{"fp32_matrices"}, " '", fp32_matrices, "' does not: with ",
                                 Field{"fp32_matrices"}, " every fp32 matrix stays with the layer-wise optimizer; select "
                                 "matrices with ", Field{"fp32_matrices"}, " only"));
    size_t matched = 0;
    for (model::Param& p : spec.params) {
      if (!is_matrix(p) || !std::regex_search(p.name, re)) continue;
      p.keep_in_fp32 = true;
      p.dtype = DType::F32;
      ++matched;
    }
    if (matched == 0)
      warnings.push_back("--fp32-matrices " + quoted_name(fp32_matrices) + " selects no matrix of model " + quoted_name(spec.name));
  }
  size_t matrices = 0, layer_wise = 0;
  for (const model::Param& p : spec.params) {
    matrices += is_matrix(p) ? 1 : 0;
    layer_wise += layout::layer_wise_managed(p, {c.fp32_matrices}) ? 1 : 0;
  }
  if (c.optimizer == optim::OptimizerKind::muon && !keep_fp32.empty() && matrices > 0 && layer_wise == 0)
    warnings.push_back("--keep-fp32 " + quoted_name(keep_fp32) + " selects every matrix, which leaves Muon none: the scalar "
                       "optimizer updates every param (--fp32-matrices keeps fp32 matrices with Muon)");
  return warnings;
}

}  // namespace fpg::app::train
