// Muon as torch.optim.Muon (torch 2.11) defines it, on one whole fp32 matrix: EMA momentum (lerp),
// Nesterov by default, Newton–Schulz orthogonalization (newton_schulz.h; bf16 by default), decoupled
// decay p *= 1 − lr·wd, then p −= lr·s(A, B)·O. Only 2-D parameters; see routing.h for which ones.
#pragma once

#include <cstdint>

#include "optim/muon_math.h"
#include "optim/newton_schulz.h"

namespace fpg::optim {

// torch's adjust_lr_fn: "original" s = sqrt(max(1, A/B)) (Keller Jordan), "match_rms_adamw"
// s = 0.2·sqrt(max(A, B)) (Moonlight: update RMS ≈ AdamW's, so AdamW's lr and wd carry over).
enum class MuonLrAdjust { original, match_rms_adamw };

// What stands in for the orthogonalization. `identity` hands the momentum-mixed matrix through
// unchanged (fp32, no bf16 cast, no normalization): Muon then is SGD with EMA momentum, which the exact
// structural tests rely on.
enum class MuonOrthogonalizer { newton_schulz, identity };

// torch.optim.Muon's hyperparameters and defaults.
struct MuonHyper {
  double lr = 1e-3;
  double weight_decay = 0.1;
  double momentum = 0.95;
  bool nesterov = true;
  NsOptions ns;  // steps 5, (3.4445, −4.7750, 2.0315), eps 1e-7, bf16
  MuonLrAdjust adjust_lr = MuonLrAdjust::original;
  MuonOrthogonalizer orthogonalizer = MuonOrthogonalizer::newton_schulz;
};

// s(A, B) for a rows × cols (A × B) parameter, in double as torch's _adjust_lr.
double muon_lr_scale(int64_t rows, int64_t cols, MuonLrAdjust adjust);

MuonScalars muon_scalars(const MuonHyper& h, int64_t rows, int64_t cols);

// One Muon step of a rows × cols row-major matrix: param and momentum_buf (zero-initialised before
// the first step) are updated in place; grad is read only.
void muon_step(const MuonHyper& h, float* param, const float* grad, float* momentum_buf, int64_t rows,
               int64_t cols);

}  // namespace fpg::optim
