// Per-element Adam / AdamW math, shared by the CPU reference (adam.cpp) and the CUDA kernels.
//
// The rounding is that of torch.optim.Adam/AdamW(fused=True) on the CPU in torch 2.11
// (aten/src/ATen/native/cpu/FusedAdamKernel.cpp, fp32 params), pinned bit for bit against torch by
// testdata/optim/gen_optim_goldens.py. Every hyperparameter is combined in double (as torch does with the
// Python floats and the step), then cast to fp32 once (AdamScalars); per element, in fp32:
//
//   Adam-L2:  g ← fma(p, λ, g)                  AdamW:  p ← p·f32(1 − γλ)        (only if λ != 0)
//   m ← fma(c, g − m, base)                     torch lerp, c = 1−β1 (or −β1), base = m (or g)
//   body:  v ← fma(f32((1−β2)·g), g, f32(v·β2))
//   tail:  v ← fma(v, β2, f32(f32((1−β2)·g)·g))
//   den ← f32(f32(sqrt(v) / sqrt(1−β2^t)) + ε)
//   p ← p + f32(f32(−γ/(1−β1^t) · m) / den)
//
// "tail" is the last numel % W elements of each parameter (W = 8 on an AVX2 torch build, 16 on AVX-512):
// torch runs those through a scalar loop that GCC contracted differently from the Vectorized<float>
// body: the fmas above are what GCC's default -ffp-contract=fast made of `v*β2 + c*g*g` in each loop of
// torch 2.11.0's x86 build (probed against it; the other contraction choices mismatch v on 15–40% of
// elements within 5 steps). Likewise `g += p*λ` and the lerp are single fmas in both loops.
// Every other product and sum rounds on its own: this code relies on -ffp-contract=off (CMakeLists.txt);
// CUDA kernels sharing it must be built with --fmad=false.
//
// torch's CUDA fused kernel (fused_adam_utils.cuh) rounds differently (scalars cast to fp32 *before*
// combining, powf, m ← fma(β1, m, fma(−β1, g, g)), AdamW p ← fma(−γλ, p, p), p ← p − (γ/bc1·m)/den;
// torch 2.11): it is not this path and is not bit-equal to it.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hostdevice.h"
#include "optim/torch_lerp.h"

namespace fpg::optim {

// torch.optim.Adam's hyperparameters and defaults; AdamW is `decoupled` (AdamHyper::adamw()).
struct AdamHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;  // false: Adam, L2 decay g += λp; true: AdamW, p *= 1 − γλ before the moments
  // Vector width of the torch CPU build being reproduced: its last numel % width elements take the
  // scalar-loop rounding. 8 = AVX2 (the goldens), 16 = AVX-512; 1 = every element rounds as the body.
  int torch_vec_width = 8;

  static AdamHyper adam() { return AdamHyper{}; }
  static AdamHyper adamw() {
    AdamHyper h;
    h.weight_decay = 1e-2;
    h.decoupled = true;
    return h;
  }
};

// The fp32 scalars of one step, derived as FusedAdamKernel.cpp derives them.
struct AdamScalars {
  float wd = 0.0f;               // λ (Adam-L2)
  float decay = 1.0f;            // 1 − γλ (AdamW)
  LerpWeight lerp;               // exp_avg.lerp_(grad, 1 − β1)
  float beta2 = 0.0f;            // β2
  float one_minus_beta2 = 0.0f;  // 1 − β2
  float bc2_sqrt = 1.0f;         // sqrt(1 − β2^t)
  float eps = 0.0f;
  float neg_step_size = 0.0f;    // −γ / (1 − β1^t)
  bool has_wd = false;           // torch skips decay entirely when λ == 0 (matters for the sign of zeros)
  bool decoupled = false;
};

// t is the step being taken: 1 for the first step (torch's state["step"] after its increment).
inline AdamScalars adam_scalars(const AdamHyper& h, int64_t t) {
  const double step = static_cast<double>(static_cast<float>(t));  // torch reads the step as fp32
  const double bc1 = 1.0 - std::pow(h.beta1, step);
  const double bc2 = 1.0 - std::pow(h.beta2, step);
  AdamScalars s;
  s.has_wd = h.weight_decay != 0.0;
  s.decoupled = h.decoupled;
  s.wd = static_cast<float>(h.weight_decay);
  s.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  s.lerp = lerp_weight(1.0 - h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.eps = static_cast<float>(h.eps);
  s.neg_step_size = static_cast<float>(-(h.lr / bc1));
  return s;
}

// First element index of a parameter's scalar tail (see the header comment).
FPG_HD int64_t adam_tail_begin(int64_t param_numel, int vec_width) {
  return param_numel - param_numel % vec_width;
}

// One element of one Adam step. `tail` selects the scalar-loop rounding of the second moment.
FPG_HD void adam_update(const AdamScalars& s, bool tail, float& p, float g, float& m, float& v) {
  if (s.has_wd) {
    if (s.decoupled) {
      p = p * s.decay;
    } else {
      g = fmaf(p, s.wd, g);
    }
  }
  m = torch_lerp(m, g, s.lerp);
  const float cg = s.one_minus_beta2 * g;
  v = tail ? fmaf(v, s.beta2, cg * g) : fmaf(cg, g, v * s.beta2);
  const float den = sqrtf(v) / s.bc2_sqrt + s.eps;
  p = p + (s.neg_step_size * m) / den;
}

}  // namespace fpg::optim
