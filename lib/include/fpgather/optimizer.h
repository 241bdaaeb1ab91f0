// One optimizer step on fp32 arrays with fpgather's CPU reference: Adam and AdamW bitwise equal to
// torch.optim.Adam/AdamW(fused=True) on the CPU, Lion in the automl op order, Muon as torch.optim.Muon.
// Parameters and states are updated in place; states start at zero. Error(usage) when the arrays'
// sizes differ (or differ from rows * cols).
#pragma once

#include <cstdint>
#include <string>

#include <fpgather/span.h>

namespace fpgather {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW: p *= 1 - lr * weight_decay before the update

  // torch.optim.AdamW's defaults.
  static AdamOptions adamw() {
    AdamOptions o;
    o.weight_decay = 1e-2;
    o.decoupled_weight_decay = true;
    return o;
  }
};

// Step `step` (1 for the first) of Adam or AdamW.
void adam_step(const AdamOptions& options, int64_t step, Span<float> param, Span<const float> grad,
               Span<float> exp_avg, Span<float> exp_avg_sq);

struct LionOptions {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.0;
};

void lion_step(const LionOptions& options, Span<float> param, Span<const float> grad, Span<float> exp_avg);

struct MuonOptions {
  double lr = 1e-3;
  double weight_decay = 0.1;
  double momentum = 0.95;
  bool nesterov = true;
  int ns_steps = 5;  // Newton-Schulz iterations (in bf16, torch's coefficients)
  // "original": lr scaled by sqrt(max(1, rows/cols)); "match_rms_adamw": by 0.2 * sqrt(max(rows, cols)).
  std::string adjust_lr = "original";
};

// One Muon step of a rows x cols row-major matrix.
void muon_step(const MuonOptions& options, Span<float> param, Span<const float> grad, Span<float> momentum,
               uint64_t rows, uint64_t cols);

}  // namespace fpgather
