// torch.lerp as PyTorch's CPU kernels round it (aten/src/ATen/native/cpu/LerpKernel.cpp, and the lerp
// inside the fused Adam kernel): out = start + w·(end − start) for |w| < 0.5, else
// end − (1 − w)·(end − start), each as ONE fused multiply-add. 1 − w is exact for w in [0.5, 2]
// (Sterbenz), so both branches are fma(coeff, end − start, base) with coeff = w or w − 1.
#pragma once

#include <cmath>

#include "core/hostdevice.h"

namespace fpg::optim {

// The weight as torch casts it (a Python double -> fp32), split into the fma's coefficient and base
// choice; computed once per step, not per element.
struct LerpWeight {
  float coeff = 0.0f;      // w, or w − 1 for |w| >= 0.5
  bool from_start = true;  // base = start (|w| < 0.5) or end
};

inline LerpWeight lerp_weight(double w) {
  const float wf = static_cast<float>(w);
  LerpWeight l;
  l.from_start = std::fabs(wf) < 0.5f;
  l.coeff = l.from_start ? wf : wf - 1.0f;
  return l;
}

FPG_HD float torch_lerp(float start, float end, const LerpWeight& w) {
  return fmaf(w.coeff, end - start, w.from_start ? start : end);
}

}  // namespace fpg::optim
