// Per-element Lion math, shared by the CPU reference (lion.cpp) and the CUDA kernels.
//
// The reference op order (google/automl lion/lion_pytorch.py), rounded as those torch
// ops round on fp32 tensors with Python-float hyperparameters (each cast to fp32 by the kernel):
//   p ← p·f32(1 − γλ)                              p.mul_(1 − lr·wd)
//   u ← f32(f32(m·β1) + f32(g·(1 − β1)))            exp_avg * β1 + grad * (1 − β1)
//   p ← fma(sign(u), −γ, p)                        p.add_(u.sign(), alpha=−lr); sign(0) = 0
//   m ← fma(g, 1 − β2, f32(m·β2))                  exp_avg.mul_(β2).add_(grad, alpha=1 − β2)
// torch's add-with-alpha is a single fma (the Vectorized path uses fmadd); the update u is formed from
// the OLD momentum, before m is updated.
#pragma once

#include <cmath>

#include "core/hostdevice.h"

namespace fpg::optim {

// torch-free hyperparameters; defaults as automl's Lion (lr 1e-4, betas (0.9, 0.99), wd 0).
struct LionHyper {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.0;
};

struct LionScalars {
  float decay = 1.0f;  // 1 − γλ
  float beta1 = 0.0f, one_minus_beta1 = 0.0f;
  float beta2 = 0.0f, one_minus_beta2 = 0.0f;
  float neg_lr = 0.0f;
};

inline LionScalars lion_scalars(const LionHyper& h) {
  LionScalars s;
  s.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  s.beta1 = static_cast<float>(h.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  s.neg_lr = static_cast<float>(-h.lr);
  return s;
}

// The interpolation whose sign is the update (exposed for tests that compare signs).
FPG_HD float lion_interpolation(const LionScalars& s, float g, float m) {
  return m * s.beta1 + g * s.one_minus_beta1;
}

FPG_HD float sign_or_zero(float x) {
  return static_cast<float>((x > 0.0f) - (x < 0.0f));
}

FPG_HD void lion_update(const LionScalars& s, float& p, float g, float& m) {
  p = p * s.decay;  // by 1.0f when λ = 0: exact, as automl's unconditional mul_
  const float u = lion_interpolation(s, g, m);
  p = fmaf(sign_or_zero(u), s.neg_lr, p);
  m = fmaf(g, s.one_minus_beta2, m * s.beta2);
}

}  // namespace fpg::optim
