#include "optim/muon.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"

namespace fpg::optim {

double muon_lr_scale(int64_t rows, int64_t cols, MuonLrAdjust adjust) {
  const double A = static_cast<double>(rows), B = static_cast<double>(cols);
  switch (adjust) {
    case MuonLrAdjust::original:
      return std::sqrt(std::max(1.0, A / B));
    case MuonLrAdjust::match_rms_adamw:
      return 0.2 * std::sqrt(std::max(A, B));
  }
  throw InternalError("muon_lr_scale: unknown adjustment");
}

MuonScalars muon_scalars(const MuonHyper& h, int64_t rows, int64_t cols) {
  MuonScalars s;
  s.buf_weight = lerp_weight(1.0 - h.momentum);
  s.nesterov_weight = lerp_weight(h.momentum);
  s.nesterov = h.nesterov;
  s.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  s.neg_lr = static_cast<float>(-(h.lr * muon_lr_scale(rows, cols, h.adjust_lr)));
  return s;
}

void muon_step(const MuonHyper& h, float* param, const float* grad, float* momentum_buf, int64_t rows,
               int64_t cols) {
  if (rows <= 0 || cols <= 0)
    throw UsageError("muon_step: a " + std::to_string(rows) + " x " + std::to_string(cols) +
                     " matrix has no elements (Muon takes non-empty 2-D parameters)");
  if (!param || !grad || !momentum_buf) throw UsageError("muon_step: missing parameter, gradient or momentum");
  const MuonScalars s = muon_scalars(h, rows, cols);
  const int64_t n = rows * cols;
  std::vector<float> u(n);
  for (int64_t i = 0; i < n; ++i) u[i] = muon_momentum(s, grad[i], momentum_buf[i]);
  if (h.orthogonalizer == MuonOrthogonalizer::newton_schulz) newton_schulz(u.data(), rows, cols, h.ns, u.data());
  for (int64_t i = 0; i < n; ++i) muon_apply(s, param[i], u[i]);
}

}  // namespace fpg::optim
