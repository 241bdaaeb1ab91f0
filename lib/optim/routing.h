// Which optimizer updates which parameter when Muon is selected: Muon takes the 2-D hidden matrices;
// embeddings, the output head (2-D, but not hidden), vectors, scalars and higher-rank tensors go to
// the scalar optimizer (AdamW or Lion). This is Megatron-Core's `_is_muon_excluded` rule: excluded
// when `use_muon` is False, the param is the embedding or output layer, or ndim != 2.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fpg::optim {

enum class OptimizerKind { adam, adamw, lion, muon };

// The optimizer for the parameters Muon does not take.
enum class ScalarOptimizer { adamw, lion };

const char* optimizer_name(OptimizerKind k);
std::optional<OptimizerKind> parse_optimizer(const std::string& name);  // "adam", "adamw", "lion", "muon"
const char* scalar_optimizer_name(ScalarOptimizer k);
std::optional<ScalarOptimizer> parse_scalar_optimizer(const std::string& name);  // "adamw", "lion"

// What the routing needs to know of a parameter.
struct ParamRouting {
  std::vector<int64_t> shape;
  bool embedding_or_output = false;  // input embedding or output head/unembedding: never Muon
  bool allow_muon = true;            // Megatron's per-parameter `use_muon` attribute
};

// True when Muon updates this parameter: a 2-D matrix that is neither embedding nor output.
bool muon_takes(const ParamRouting& p);

// The optimizer that updates p when `main` is the configured optimizer.
OptimizerKind optimizer_for(const ParamRouting& p, OptimizerKind main, ScalarOptimizer scalar);

}  // namespace fpg::optim
