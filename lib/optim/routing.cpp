#include "optim/routing.h"

namespace fpg::optim {

const char* optimizer_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::adamw: return "adamw";
    case OptimizerKind::lion: return "lion";
    case OptimizerKind::muon: return "muon";
  }
  return "?";
}

std::optional<OptimizerKind> parse_optimizer(const std::string& name) {
  for (OptimizerKind k : {OptimizerKind::adam, OptimizerKind::adamw, OptimizerKind::lion, OptimizerKind::muon})
    if (name == optimizer_name(k)) return k;
  return std::nullopt;
}

const char* scalar_optimizer_name(ScalarOptimizer k) {
  return k == ScalarOptimizer::lion ? "lion" : "adamw";
}

std::optional<ScalarOptimizer> parse_scalar_optimizer(const std::string& name) {
  if (name == "adamw") return ScalarOptimizer::adamw;
  if (name == "lion") return ScalarOptimizer::lion;
  return std::nullopt;
}

bool muon_takes(const ParamRouting& p) {
  return p.shape.size() == 2 && !p.embedding_or_output && p.allow_muon;
}

OptimizerKind optimizer_for(const ParamRouting& p, OptimizerKind main, ScalarOptimizer scalar) {
  if (main != OptimizerKind::muon || muon_takes(p)) return main;
  return scalar == ScalarOptimizer::lion ? OptimizerKind::lion : OptimizerKind::adamw;
}

}  // namespace fpg::optim
