#include "optim/adam.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "optim/fragment_check.h"
#include "optim/simd_clones.h"

namespace fpg::optim {
namespace {

// The loops are specialised on the decay mode and on body/tail so the compiler sees branch-free
// element math and vectorizes it (the branches in adam_update fold away).
template <bool kHasWd, bool kDecoupled, bool kTail>
FPG_SIMD_CLONES void adam_loop(const AdamScalars& sc, float* __restrict p, const float* __restrict g,
                               float* __restrict m, float* __restrict v, int64_t n) {
  AdamScalars s = sc;
  s.has_wd = kHasWd;
  s.decoupled = kDecoupled;
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i], mi = m[i], vi = v[i];
    adam_update(s, kTail, pi, g[i], mi, vi);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

template <bool kHasWd, bool kDecoupled>
void adam_fragment(const AdamScalars& s, const Fragment& f, int64_t tail_begin) {
  // Split the fragment at the parameter's tail: [begin, split) body, [split, end) tail.
  const int64_t begin = f.param_offset, end = f.param_offset + f.numel;
  const int64_t split = std::clamp(tail_begin, begin, end);
  const int64_t nb = split - begin;
  adam_loop<kHasWd, kDecoupled, false>(s, f.param, f.grad, f.exp_avg, f.exp_avg_sq, nb);
  adam_loop<kHasWd, kDecoupled, true>(s, f.param + nb, f.grad + nb, f.exp_avg + nb, f.exp_avg_sq + nb,
                                      end - split);
}

}  // namespace

void adam_step(const AdamHyper& h, int64_t step, const Fragment* fragments, size_t count) {
  if (step < 1) throw UsageError("adam_step: step must be >= 1 (got " + std::to_string(step) + ")");
  if (h.torch_vec_width < 1) throw UsageError("adam_step: torch_vec_width must be >= 1");
  const AdamScalars s = adam_scalars(h, step);
  for (size_t k = 0; k < count; ++k) {
    const Fragment& f = fragments[k];
    const int64_t tail_begin = adam_tail_begin(checked_param_numel(f, true, "adam_step"), h.torch_vec_width);
    if (!s.has_wd) {
      adam_fragment<false, false>(s, f, tail_begin);
    } else if (s.decoupled) {
      adam_fragment<true, true>(s, f, tail_begin);
    } else {
      adam_fragment<true, false>(s, f, tail_begin);
    }
  }
}

void adam_step(const AdamHyper& h, int64_t step, float* param, const float* grad, float* exp_avg,
               float* exp_avg_sq, int64_t numel) {
  Fragment f;
  f.param = param;
  f.grad = grad;
  f.exp_avg = exp_avg;
  f.exp_avg_sq = exp_avg_sq;
  f.numel = numel;
  adam_step(h, step, &f, 1);
}

}  // namespace fpg::optim
