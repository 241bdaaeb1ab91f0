// Adam / AdamW against torch.optim.Adam/AdamW(fused=True) on the CPU, bit for bit (testdata/optim).
#include <cmath>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "optim/adam.h"
#include "unit/optim_goldens.h"

using namespace fpg::optim;
using fpg_test::bit_mismatches;
using fpg_test::GoldenCase;

namespace {

AdamHyper hyper_of(const GoldenCase& c) {
  AdamHyper h;
  h.lr = c.hyper.at("lr").get<double>();
  h.beta1 = c.hyper.at("betas").at(0).get<double>();
  h.beta2 = c.hyper.at("betas").at(1).get<double>();
  h.eps = c.hyper.at("eps").get<double>();
  h.weight_decay = c.hyper.at("weight_decay").get<double>();
  h.decoupled = c.hyper.at("decoupled").get<bool>();
  h.torch_vec_width = fpg_test::optim_goldens().torch_vec_width;
  return h;
}

// Runs every step of a golden case through `step_fn` and requires p, m, v bitwise after each.
template <typename StepFn>
void check_case(const GoldenCase& c, StepFn step_fn) {
  std::vector<float> p = c.get("param/0");
  std::vector<float> m(p.size(), 0.0f), v(p.size(), 0.0f);
  for (int t = 1; t <= c.steps; ++t) {
    const std::vector<float> g = c.get("grad", t);
    step_fn(t, p, g, m, v);
    int64_t fm = 0, fv = 0, fp = 0;
    const int64_t bm = bit_mismatches(m, c.get("exp_avg", t), &fm);
    const int64_t bv = bit_mismatches(v, c.get("exp_avg_sq", t), &fv);
    const int64_t bp = bit_mismatches(p, c.get("param", t), &fp);
    INFO(c.name << " step " << t << ": first mismatch m " << fm << ", v " << fv << ", p " << fp);
    CHECK(bm == 0);
    CHECK(bv == 0);
    CHECK(bp == 0);
  }
}

}  // namespace

TEST_CASE("Adam/AdamW equal torch fused (CPU) bitwise on params and both moments", "[optim][adam]") {
  auto cases = fpg_test::golden_cases("adam");
  const auto adamw = fpg_test::golden_cases("adamw");
  cases.insert(cases.end(), adamw.begin(), adamw.end());
  REQUIRE(cases.size() >= 20);
  for (const GoldenCase* c : cases) {
    const AdamHyper h = hyper_of(*c);
    check_case(*c, [&](int t, std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m,
                       std::vector<float>& v) {
      adam_step(h, t, p.data(), g.data(), m.data(), v.data(), static_cast<int64_t>(p.size()));
    });
  }
}

TEST_CASE("Adam over fragments in one multi-tensor call equals the whole-tensor step", "[optim][adam]") {
  const GoldenCase* c = nullptr;
  for (const GoldenCase* x : fpg_test::golden_cases("adamw"))
    if (x->name == "adamw_wd_n4099") c = x;
  REQUIRE(c != nullptr);
  const AdamHyper h = hyper_of(*c);
  // Cuts inside the body, at the tail's start (4096 with width 8) and inside the tail.
  const std::vector<int64_t> cuts = {0, 1, 1000, 4093, 4096, 4098, 4099};
  check_case(*c, [&](int t, std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m,
                     std::vector<float>& v) {
    std::vector<Fragment> frags;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      Fragment f;
      f.param = p.data() + cuts[k];
      f.grad = g.data() + cuts[k];
      f.exp_avg = m.data() + cuts[k];
      f.exp_avg_sq = v.data() + cuts[k];
      f.numel = cuts[k + 1] - cuts[k];
      f.param_offset = cuts[k];
      f.param_numel = static_cast<int64_t>(p.size());
      frags.push_back(f);
    }
    // Reverse order: the result must not depend on the order of the fragment list.
    std::vector<Fragment> rev(frags.rbegin(), frags.rend());
    adam_step(h, t, rev);
  });
}

TEST_CASE("Adam scalars follow torch's double-then-fp32 derivation and step counting", "[optim][adam]") {
  AdamHyper h = AdamHyper::adamw();
  CHECK(h.weight_decay == 1e-2);
  CHECK(h.decoupled);
  h.lr = 0.5;
  h.beta1 = 0.5;
  h.beta2 = 0.75;
  h.weight_decay = 0.25;
  const AdamScalars s3 = adam_scalars(h, 3);
  CHECK(s3.neg_step_size == static_cast<float>(-0.5 / (1.0 - 0.125)));   // bias correction 1 at t = 3
  CHECK(s3.bc2_sqrt == static_cast<float>(std::sqrt(1.0 - 0.421875)));  // sqrt(1 − β2^3)
  CHECK(s3.decay == 0.875f);                                             // 1 − γλ
  CHECK(s3.one_minus_beta2 == 0.25f);
  CHECK_FALSE(s3.lerp.from_start);  // 1 − β1 = 0.5 takes torch's "large weight" branch
  CHECK(s3.lerp.coeff == -0.5f);
  // Exact first step: with these dyadic values every rounding is exact.
  float p = 2.0f, m = 0.0f, v = 0.0f;
  h.eps = 0.0;
  const AdamScalars s1 = adam_scalars(h, 1);
  adam_update(s1, false, p, 4.0f, m, v);
  CHECK(m == 2.0f);                    // (1 − β1)·g
  CHECK(v == 4.0f);                    // (1 − β2)·g²
  CHECK(p == 2.0f * 0.875f - 0.5f);    // decay first, then γ·m̂/sqrt(v̂) = γ·sign(g) at t = 1
}

TEST_CASE("Adam rejects bad steps and fragments", "[optim][adam]") {
  std::vector<float> p(4), g(4), m(4), v(4);
  CHECK_THROWS_AS(adam_step(AdamHyper{}, 0, p.data(), g.data(), m.data(), v.data(), 4), fpg::UsageError);
  Fragment f;
  f.param = p.data();
  f.grad = g.data();
  f.exp_avg = m.data();
  f.exp_avg_sq = v.data();
  f.numel = 4;
  f.param_offset = 2;
  f.param_numel = 5;
  CHECK_THROWS_AS(adam_step(AdamHyper{}, 1, {f}), fpg::UsageError);
  f.param_offset = 0;
  f.exp_avg_sq = nullptr;
  CHECK_THROWS_AS(adam_step(AdamHyper{}, 1, {f}), fpg::UsageError);
}

TEST_CASE("The goldens exercise torch's scalar-tail rounding", "[optim][adam]") {
  // Rounding every element as the vector body (width 1) must miss torch somewhere in the tails, or the
  // tail rule in adam_math.h would be untested.
  int64_t tail_mismatches = 0, body_mismatches = 0;
  for (const char* kind : {"adam", "adamw"}) {
    for (const GoldenCase* c : fpg_test::golden_cases(kind)) {
      AdamHyper h = hyper_of(*c);
      const int width = h.torch_vec_width;
      h.torch_vec_width = 1;
      std::vector<float> p = c->get("param/0");
      std::vector<float> m(p.size(), 0.0f), v(p.size(), 0.0f);
      const int64_t n = static_cast<int64_t>(p.size());
      for (int t = 1; t <= c->steps; ++t) {
        const std::vector<float> g = c->get("grad", t);
        adam_step(h, t, p.data(), g.data(), m.data(), v.data(), n);
        const std::vector<float> want = c->get("exp_avg_sq", t);
        for (int64_t i = 0; i < n; ++i) {
          const bool same = fpg_test::bits_of(v[i]) == fpg_test::bits_of(want[i]);
          (i < adam_tail_begin(n, width) ? body_mismatches : tail_mismatches) += same ? 0 : 1;
        }
        v = want;  // continue from torch's state so one difference does not spread
      }
    }
  }
  CHECK(body_mismatches == 0);  // the body is unaffected
  CHECK(tail_mismatches > 0);
}
