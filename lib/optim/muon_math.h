// Per-element parts of a Muon step, shared by the CPU reference (muon.cpp) and the CUDA kernels:
// the momentum (before Newton–Schulz) and the decayed update (after). Rounded as torch.optim.Muon's
// CPU ops round (torch 2.11, `_single_tensor_muon`):
//   buf ← lerp(buf, g, 1 − μ)                   buf.lerp_(grad, 1 − momentum)
//   U   ← nesterov ? lerp(g, buf, μ) : buf       grad.lerp(buf, momentum)
//   p   ← p·f32(1 − γλ)                         param.mul_(1 − lr·wd)   (unadjusted lr)
//   p   ← fma(O, −f32(γ·s), p)                  param.add_(O, alpha=−adjusted_lr)
#pragma once

#include <cmath>

#include "core/hostdevice.h"
#include "optim/torch_lerp.h"

namespace fpg::optim {

struct MuonScalars {
  LerpWeight buf_weight;       // 1 − μ
  LerpWeight nesterov_weight;  // μ
  bool nesterov = true;
  float decay = 1.0f;          // 1 − γλ
  float neg_lr = 0.0f;         // −γ·s(A, B)
};

// Updates the momentum buffer and returns the matrix handed to Newton–Schulz.
FPG_HD float muon_momentum(const MuonScalars& s, float g, float& buf) {
  buf = torch_lerp(buf, g, s.buf_weight);
  return s.nesterov ? torch_lerp(g, buf, s.nesterov_weight) : buf;
}

// Decoupled decay of the old parameter, then the scaled orthogonalized update O.
FPG_HD void muon_apply(const MuonScalars& s, float& p, float o) {
  p = p * s.decay;
  p = fmaf(o, s.neg_lr, p);
}

}  // namespace fpg::optim
