// Lion on fp32 masters: the CPU reference (automl op order; per-element math in lion_math.h).
// State: exp_avg only; no step counter, no bias correction, no eps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "optim/fragment.h"
#include "optim/lion_math.h"

namespace fpg::optim {

// One Lion step over many fragments in one pass; each needs param, grad and exp_avg (exp_avg_sq is
// ignored). Fragments must not overlap.
void lion_step(const LionHyper& h, const Fragment* fragments, size_t count);

inline void lion_step(const LionHyper& h, const std::vector<Fragment>& fragments) {
  lion_step(h, fragments.data(), fragments.size());
}

// One Lion step of one whole parameter.
void lion_step(const LionHyper& h, float* param, const float* grad, float* exp_avg, int64_t numel);

}  // namespace fpg::optim
