#include "optim/lion.h"

#include "optim/fragment_check.h"
#include "optim/simd_clones.h"

namespace fpg::optim {
namespace {

FPG_SIMD_CLONES void lion_loop(const LionScalars& sc, float* __restrict p, const float* __restrict g,
                               float* __restrict m, int64_t n) {
  const LionScalars s = sc;
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i], mi = m[i];
    lion_update(s, pi, g[i], mi);
    p[i] = pi;
    m[i] = mi;
  }
}

}  // namespace

void lion_step(const LionHyper& h, const Fragment* fragments, size_t count) {
  const LionScalars s = lion_scalars(h);
  for (size_t k = 0; k < count; ++k) {
    const Fragment& f = fragments[k];
    checked_param_numel(f, false, "lion_step");
    lion_loop(s, f.param, f.grad, f.exp_avg, f.numel);
  }
}

void lion_step(const LionHyper& h, float* param, const float* grad, float* exp_avg, int64_t numel) {
  Fragment f;
  f.param = param;
  f.grad = grad;
  f.exp_avg = exp_avg;
  f.numel = numel;
  lion_step(h, &f, 1);
}

}  // namespace fpg::optim
