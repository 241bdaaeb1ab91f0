// Adam and AdamW on fp32 masters: the CPU reference, bitwise equal to torch.optim.Adam/AdamW(fused=True)
// on the CPU (torch 2.11). The per-element math and its rounding are in adam_math.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "optim/adam_math.h"
#include "optim/fragment.h"

namespace fpg::optim {

// One Adam step over many fragments of many parameters in one pass. `step` is the step being taken
// (1 for the first: torch's state["step"] after its increment); all fragments share it. Each fragment
// needs param, grad, exp_avg and exp_avg_sq (moments start at zero). Fragments must not overlap.
void adam_step(const AdamHyper& h, int64_t step, const Fragment* fragments, size_t count);

inline void adam_step(const AdamHyper& h, int64_t step, const std::vector<Fragment>& fragments) {
  adam_step(h, step, fragments.data(), fragments.size());
}

// One Adam step of one whole parameter.
void adam_step(const AdamHyper& h, int64_t step, float* param, const float* grad, float* exp_avg,
               float* exp_avg_sq, int64_t numel);

}  // namespace fpg::optim
