// fpgather/optimizer.h over the CPU references of lib/optim.
#include <fpgather/optimizer.h>

#include "api/boundary.h"
#include "optim/adam.h"
#include "optim/lion.h"
#include "optim/muon.h"

namespace fpgather {
namespace {

// UsageError unless every array holds `numel` elements.
void require_sizes(const char* op, uint64_t numel, std::initializer_list<std::size_t> sizes) {
  for (std::size_t n : sizes)
    if (n != numel)
      throw fpg::UsageError(std::string(op) + ": the parameter, gradient and state arrays must hold " +
                            std::to_string(numel) + " elements each, one holds " + std::to_string(n));
}

}  // namespace

void adam_step(const AdamOptions& options, int64_t step, Span<float> param, Span<const float> grad,
               Span<float> exp_avg, Span<float> exp_avg_sq) {
  api::at_boundary([&] {
    require_sizes("adam_step", param.size(), {grad.size(), exp_avg.size(), exp_avg_sq.size()});
    if (step < 1) throw fpg::UsageError("adam_step: step must be >= 1 (1 for the first), not " + std::to_string(step));
    fpg::optim::AdamHyper h;
    h.lr = options.lr;
    h.beta1 = options.beta1;
    h.beta2 = options.beta2;
    h.eps = options.eps;
    h.weight_decay = options.weight_decay;
    h.decoupled = options.decoupled_weight_decay;
    fpg::optim::adam_step(h, step, param.data(), grad.data(), exp_avg.data(), exp_avg_sq.data(),
                          static_cast<int64_t>(param.size()));
  });
}

void lion_step(const LionOptions& options, Span<float> param, Span<const float> grad, Span<float> exp_avg) {
  api::at_boundary([&] {
    require_sizes("lion_step", param.size(), {grad.size(), exp_avg.size()});
    fpg::optim::LionHyper h;
    h.lr = options.lr;
    h.beta1 = options.beta1;
    h.beta2 = options.beta2;
    h.weight_decay = options.weight_decay;
    fpg::optim::lion_step(h, param.data(), grad.data(), exp_avg.data(), static_cast<int64_t>(param.size()));
  });
}

void muon_step(const MuonOptions& options, Span<float> param, Span<const float> grad, Span<float> momentum,
               uint64_t rows, uint64_t cols) {
  api::at_boundary([&] {
    if (rows == 0 || cols == 0 || rows > (1ull << 31) || cols > (1ull << 31))
      throw fpg::UsageError("muon_step: a matrix of " + std::to_string(rows) + " x " + std::to_string(cols) +
                            " (each dimension 1 to 2^31)");
    require_sizes("muon_step", rows * cols, {param.size(), grad.size(), momentum.size()});
    if (options.ns_steps < 1) throw fpg::UsageError("muon_step: ns_steps must be >= 1");
    fpg::optim::MuonHyper h;
    h.lr = options.lr;
    h.weight_decay = options.weight_decay;
    h.momentum = options.momentum;
    h.nesterov = options.nesterov;
    h.ns.steps = options.ns_steps;
    if (options.adjust_lr == "original") h.adjust_lr = fpg::optim::MuonLrAdjust::original;
    else if (options.adjust_lr == "match_rms_adamw") h.adjust_lr = fpg::optim::MuonLrAdjust::match_rms_adamw;
    else throw fpg::UsageError("muon_step: adjust_lr must be original or match_rms_adamw, not '" + options.adjust_lr + "'");
    fpg::optim::muon_step(h, param.data(), grad.data(), momentum.data(), static_cast<int64_t>(rows),
                          static_cast<int64_t>(cols));
  });
}

}  // namespace fpgather
