#include "pipeline/rank_state.h"

namespace fpg::pipeline {

uint32_t OptimizerState::add(uint32_t param, layout::Range range, uint64_t param_numel) {
  StateFragment f;
  f.param = param;
  f.param_range = range;
  f.param_numel = param_numel;
  f.offset = fragments.empty() ? 0 : fragments.back().offset + fragments.back().param_range.size();
  const uint32_t id = static_cast<uint32_t>(fragments.size());
  fragments.push_back(f);
  by_param[param].push_back(id);
  return id;
}

void OptimizerState::allocate() {
  const uint64_t n = fragments.empty() ? 0 : fragments.back().offset + fragments.back().param_range.size();
  master.assign(n, 0.0f);
  exp_avg.clear();
  exp_avg_sq.clear();
  momentum.clear();
  switch (kind) {
    case optim::OptimizerKind::adam:
    case optim::OptimizerKind::adamw:
      exp_avg.assign(n, 0.0f);
      exp_avg_sq.assign(n, 0.0f);
      break;
    case optim::OptimizerKind::lion: exp_avg.assign(n, 0.0f); break;
    case optim::OptimizerKind::muon: momentum.assign(n, 0.0f); break;
  }
}

const StateFragment* OptimizerState::find(uint32_t param, uint64_t element) const {
  const auto it = by_param.find(param);
  if (it == by_param.end()) return nullptr;
  for (uint32_t id : it->second) {
    const StateFragment& f = fragments[id];
    if (element >= f.param_range.begin && element < f.param_range.end) return &f;
  }
  return nullptr;
}

std::vector<const char*> state_keys(optim::OptimizerKind kind) {
  switch (kind) {
    case optim::OptimizerKind::adam:
    case optim::OptimizerKind::adamw: return {"exp_avg", "exp_avg_sq"};
    case optim::OptimizerKind::lion: return {"exp_avg"};
    case optim::OptimizerKind::muon: return {"momentum_buffer"};
  }
  return {};
}

}  // namespace fpg::pipeline
