// Lion against the automl op order run in torch fp32 ops (testdata/optim), plus exact structural cases.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <vector>

#include "catch.h"
#include "optim/lion.h"
#include "unit/optim_goldens.h"

using namespace fpg::optim;
using fpg_test::bits_of;
using fpg_test::GoldenCase;

namespace {

LionHyper hyper_of(const GoldenCase& c) {
  LionHyper h;
  h.lr = c.hyper.at("lr").get<double>();
  h.beta1 = c.hyper.at("betas").at(0).get<double>();
  h.beta2 = c.hyper.at("betas").at(1).get<double>();
  h.weight_decay = c.hyper.at("weight_decay").get<double>();
  return h;
}

// The interpolation is "within an ulp of 0" when |u| is at most one ulp of its larger term: a
// different but equally valid rounding of the two products could then flip or zero its sign.
bool near_zero_interpolation(const LionScalars& s, float g, float m) {
  const float t1 = std::fabs(m * s.beta1), t2 = std::fabs(g * s.one_minus_beta1);
  const float big = std::max(t1, t2);
  const float ulp = std::nextafter(big, std::numeric_limits<float>::infinity()) - big;
  return std::fabs(lion_interpolation(s, g, m)) <= ulp;
}

}  // namespace

TEST_CASE("Lion equals the automl reference bitwise except at near-zero interpolations", "[optim][lion]") {
  const auto cases = fpg_test::golden_cases("lion");
  REQUIRE(cases.size() >= 12);
  int64_t exceptions = 0, exact_ties = 0, checked = 0;
  for (const GoldenCase* c : cases) {
    const LionHyper h = hyper_of(*c);
    const LionScalars s = lion_scalars(h);
    std::vector<float> p = c->get("param/0");
    std::vector<float> m(p.size(), 0.0f);
    const int64_t n = static_cast<int64_t>(p.size());
    for (int t = 1; t <= c->steps; ++t) {
      const std::vector<float> g = c->get("grad", t);
      const std::vector<float> m_old = m;
      lion_step(h, p.data(), g.data(), m.data(), n);
      const std::vector<float> want_p = c->get("param", t), want_m = c->get("exp_avg", t);
      int64_t bad_m = 0, bad_p = 0;
      for (int64_t i = 0; i < n; ++i) {
        ++checked;
        if (lion_interpolation(s, g[i], m_old[i]) == 0.0f) ++exact_ties;
        bad_m += bits_of(m[i]) != bits_of(want_m[i]);
        if (bits_of(p[i]) != bits_of(want_p[i])) {
          if (near_zero_interpolation(s, g[i], m_old[i])) {
            ++exceptions;
            p[i] = want_p[i];  // continue from torch's value
          } else {
            ++bad_p;
          }
        }
      }
      INFO(c->name << " step " << t);
      CHECK(bad_m == 0);
      CHECK(bad_p == 0);
    }
  }
  std::cout << "Lion goldens: " << checked << " element-steps, " << exact_ties
            << " exact zero interpolations (sign 0), " << exceptions << " near-zero sign exceptions\n";
  CHECK(exact_ties > 0);  // the goldens include sign(0) = 0 cases
  CHECK(exceptions == 0);  // same op order and rounding as torch: the exception clause is never needed
}

TEST_CASE("Lion order: decay, sign of the old-momentum interpolation, then the momentum", "[optim][lion]") {
  // Dyadic values: every product and sum below is exact.
  LionHyper h;
  h.lr = 0.25;
  h.beta1 = 0.5;
  h.beta2 = 0.75;
  h.weight_decay = 0.5;  // decay 1 − γλ = 0.875
  std::vector<float> p = {8.0f, 8.0f, 8.0f, 8.0f};
  std::vector<float> g = {1.0f, -2.0f, -4.0f, 0.0f};
  std::vector<float> m = {-4.0f, 1.0f, 4.0f, 0.0f};
  lion_step(h, p.data(), g.data(), m.data(), 4);
  // u = 0.5·m + 0.5·g = {−1.5, −0.5, 0, 0}: the sign uses the momentum BEFORE this step's update.
  CHECK(p[0] == 8.0f * 0.875f + 0.25f);
  CHECK(p[1] == 8.0f * 0.875f + 0.25f);
  CHECK(p[2] == 8.0f * 0.875f);  // sign(0) = 0: decay only
  CHECK(p[3] == 8.0f * 0.875f);
  // m ← 0.75·m + 0.25·g
  CHECK(m[0] == -2.75f);
  CHECK(m[1] == 0.25f);
  CHECK(m[2] == 2.0f);
  CHECK(m[3] == 0.0f);
}

TEST_CASE("Lion over fragments equals the whole-tensor step", "[optim][lion]") {
  const GoldenCase* c = fpg_test::golden_cases("lion").back();
  const LionHyper h = hyper_of(*c);
  std::vector<float> p = c->get("param/0"), m(p.size(), 0.0f);
  std::vector<float> p2 = p, m2 = m;
  const int64_t n = static_cast<int64_t>(p.size());
  for (int t = 1; t <= c->steps; ++t) {
    const std::vector<float> g = c->get("grad", t);
    lion_step(h, p.data(), g.data(), m.data(), n);
    std::vector<Fragment> frags;
    for (int64_t b = 0; b < n; b += 100) {
      Fragment f;
      f.param = p2.data() + b;
      f.grad = g.data() + b;
      f.exp_avg = m2.data() + b;
      f.numel = std::min<int64_t>(100, n - b);
      f.param_offset = b;
      f.param_numel = n;
      frags.push_back(f);
    }
    lion_step(h, frags);
  }
  CHECK(fpg_test::bit_mismatches(p, p2) == 0);
  CHECK(fpg_test::bit_mismatches(m, m2) == 0);
}
