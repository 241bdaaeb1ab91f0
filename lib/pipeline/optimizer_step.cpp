#include "pipeline/optimizer_step.h"

#include <string>

#include "core/error.h"
#include "optim/adam.h"
#include "optim/fragment.h"
#include "optim/lion.h"

namespace fpg::pipeline {

Hypers make_hypers(const PipelineConfig& c, optim::OptimizerKind kind) {
  Hypers h;
  h.adam.lr = c.lr;
  h.adam.beta1 = c.beta1;
  h.adam.beta2 = c.beta2;
  h.adam.eps = c.eps;
  h.adam.weight_decay = c.weight_decay;
  h.adam.decoupled = kind == optim::OptimizerKind::adamw;
  h.adam.torch_vec_width = c.torch_vec_width;
  h.lion.lr = c.lr;
  h.lion.beta1 = c.beta1;
  h.lion.beta2 = c.beta2;
  h.lion.weight_decay = c.weight_decay;
  h.muon.lr = c.lr;
  h.muon.weight_decay = c.weight_decay;
  h.muon.momentum = c.muon_momentum;
  h.muon.nesterov = c.muon_nesterov;
  h.muon.ns.steps = c.muon_ns_steps;
  h.muon.adjust_lr = c.muon_adjust_lr;
  return h;
}

void optimizer_step(OptimizerState& st, const std::vector<const float*>& grads, const Hypers& h,
                    const std::vector<std::pair<int64_t, int64_t>>& shapes) {
  if (grads.size() != st.fragments.size())
    throw InternalError("pipeline: " + std::to_string(grads.size()) + " gradients for " +
                        std::to_string(st.fragments.size()) + " fragments");
  ++st.step;
  if (st.kind == optim::OptimizerKind::muon) {
    if (shapes.size() != st.fragments.size()) throw InternalError("pipeline: Muon needs every matrix's shape");
    for (size_t i = 0; i < st.fragments.size(); ++i) {
      const StateFragment& f = st.fragments[i];
      if (f.param_range.begin != 0 || f.param_range.size() != f.param_numel)
        throw InternalError("pipeline: Muon needs whole matrices");
      optim::muon_step(h.muon, st.master.data() + f.offset, grads[i], st.momentum.data() + f.offset,
                       shapes[i].first, shapes[i].second);
    }
    return;
  }
  // One table, one call: the multi-tensor pass over everything this part owns.
  std::vector<optim::Fragment> table(st.fragments.size());
  const bool adam = st.kind != optim::OptimizerKind::lion;
  for (size_t i = 0; i < st.fragments.size(); ++i) {
    const StateFragment& f = st.fragments[i];
    optim::Fragment& o = table[i];
    o.param = st.master.data() + f.offset;
    o.grad = grads[i];
    o.exp_avg = st.exp_avg.data() + f.offset;
    o.exp_avg_sq = adam ? st.exp_avg_sq.data() + f.offset : nullptr;
    o.numel = static_cast<int64_t>(f.param_range.size());
    o.param_offset = static_cast<int64_t>(f.param_range.begin);
    o.param_numel = static_cast<int64_t>(f.param_numel);
  }
  if (adam) optim::adam_step(h.adam, st.step, table);
  else optim::lion_step(h.lion, table);
}

}  // namespace fpg::pipeline
