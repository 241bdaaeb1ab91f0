// One optimizer step over an OptimizerState: every fragment in one multi-tensor call for the
// elementwise optimizers (adam_step / lion_step take the whole fragment table), Muon per whole
// matrix (Newton-Schulz needs it).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "optim/adam_math.h"
#include "optim/lion_math.h"
#include "optim/muon.h"
#include "pipeline/config.h"
#include "pipeline/rank_state.h"

namespace fpg::pipeline {

struct Hypers {
  optim::AdamHyper adam;
  optim::LionHyper lion;
  optim::MuonHyper muon;
};

// The hyperparameters of `kind` from the config (Adam: decoupled for adamw; Muon: its own momentum,
// Nesterov, NS steps and lr adjustment, the shared lr and weight decay).
Hypers make_hypers(const PipelineConfig& c, optim::OptimizerKind kind);

// Increments st.step and updates every fragment: grads[i] is fragment i's fp32 gradient (same
// numel). Muon needs shapes[i] = (rows, cols) of fragment i, a whole matrix.
void optimizer_step(OptimizerState& st, const std::vector<const float*>& grads, const Hypers& h,
                    const std::vector<std::pair<int64_t, int64_t>>& shapes = {});

}  // namespace fpg::pipeline
