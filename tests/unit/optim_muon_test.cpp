// Muon against torch.optim.Muon (testdata/optim) and against an fp64 Newton–Schulz reference, plus exact
// structural cases with the orthogonalization replaced by the identity (as Emerging-Optimizers tests it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "core/float_codec.h"
#include "optim/muon.h"
#include "unit/optim_goldens.h"

using namespace fpg::optim;
using fpg_test::GoldenCase;

namespace {

MuonHyper hyper_of(const GoldenCase& c) {
  MuonHyper h;
  h.lr = c.hyper.at("lr").get<double>();
  h.weight_decay = c.hyper.at("weight_decay").get<double>();
  h.momentum = c.hyper.at("momentum").get<double>();
  h.nesterov = c.hyper.at("nesterov").get<bool>();
  h.ns.steps = c.hyper.at("ns_steps").get<int>();
  h.ns.eps = c.hyper.at("eps").get<double>();
  const std::string adjust = c.hyper.at("adjust_lr_fn").get<std::string>();
  h.adjust_lr = adjust == "match_rms_adamw" ? MuonLrAdjust::match_rms_adamw : MuonLrAdjust::original;
  return h;
}

double rel_frobenius(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0.0 ? (num == 0.0 ? 0.0 : INFINITY) : std::sqrt(num / den);
}

std::vector<float> gaussian(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("Muon's update is within 5% of torch.optim.Muon and of an fp64 reference", "[optim][muon]") {
  const auto cases = fpg_test::golden_cases("muon");
  REQUIRE(cases.size() >= 8);
  double worst_torch = 0.0, worst_ref = 0.0, worst_torch_vs_ref = 0.0;
  for (const GoldenCase* c : cases) {
    const MuonHyper h = hyper_of(*c);
    const int64_t rows = c->shape.at(0), cols = c->shape.at(1), n = rows * cols;
    const MuonScalars s = muon_scalars(h, rows, cols);
    std::vector<float> buf(n, 0.0f);
    for (int t = 1; t <= c->steps; ++t) {
      // Each step starts from torch's parameter, so the comparison is of one update, not of drift.
      const std::vector<float> p_in = c->get("param", t - 1), g = c->get("grad", t);
      const std::vector<float> want = c->get("param", t);

      // The fp64 reference: same momentum (exact), orthogonalized in double.
      std::vector<float> buf_ref = buf;
      std::vector<double> u64(n), o64(n);
      for (int64_t i = 0; i < n; ++i) u64[i] = muon_momentum(s, g[i], buf_ref[i]);
      newton_schulz_fp64(u64.data(), rows, cols, h.ns, o64.data());

      std::vector<float> p = p_in;
      muon_step(h, p.data(), g.data(), buf.data(), rows, cols);
      if (c->has("momentum_buffer/" + std::to_string(t))) {
        INFO(c->name << " step " << t);
        CHECK(fpg_test::bit_mismatches(buf, c->get("momentum_buffer", t)) == 0);
      }

      // Compare the scaled orthogonalized update: the delta less the (identical) decay term.
      std::vector<double> d_ours(n), d_torch(n), d_ref(n);
      const double adj = h.lr * muon_lr_scale(rows, cols, h.adjust_lr);
      for (int64_t i = 0; i < n; ++i) {
        const double decayed = p_in[i] * s.decay;  // fp32 product, rounded as the step rounds it
        d_ours[i] = p[i] - decayed;
        d_torch[i] = want[i] - decayed;
        d_ref[i] = -adj * o64[i];
      }
      const double e_torch = rel_frobenius(d_ours, d_torch), e_ref = rel_frobenius(d_ours, d_ref);
      const double e_tr = rel_frobenius(d_torch, d_ref);
      INFO(c->name << " step " << t << ": vs torch " << e_torch << ", vs fp64 " << e_ref);
      CHECK(e_torch <= 0.05);
      CHECK(e_ref <= 0.05);
      worst_torch = std::max(worst_torch, e_torch);
      worst_ref = std::max(worst_ref, e_ref);
      worst_torch_vs_ref = std::max(worst_torch_vs_ref, e_tr);
    }
  }
  std::printf("Muon update, worst relative Frobenius error over %zu cases x 5 steps: vs torch %.4f, "
              "vs fp64 reference %.4f (torch itself vs fp64: %.4f)\n",
              cases.size(), worst_torch, worst_ref, worst_torch_vs_ref);
}

TEST_CASE("Muon with the orthogonalization disabled is SGD with EMA momentum, exactly", "[optim][muon]") {
  // Dyadic values: every lerp, decay and update below is exact, so equality is bitwise.
  for (const bool nesterov : {true, false}) {
    for (const auto shape : {std::pair<int64_t, int64_t>{4, 8}, std::pair<int64_t, int64_t>{8, 2}}) {
      MuonHyper h;
      h.orthogonalizer = MuonOrthogonalizer::identity;
      h.nesterov = nesterov;
      h.momentum = 0.75;
      h.lr = 0.125;
      h.weight_decay = 0.5;
      const int64_t rows = shape.first, cols = shape.second, n = rows * cols;
      const double scale = rows > cols ? std::sqrt(static_cast<double>(rows) / cols) : 1.0;  // 2 for 8×2
      std::vector<float> p(n), buf(n, 0.0f), p_sgd(n), buf_sgd(n, 0.0f);
      for (int64_t i = 0; i < n; ++i) p[i] = p_sgd[i] = static_cast<float>((i % 7) - 3) * 4.0f;
      for (int step = 0; step < 3; ++step) {
        std::vector<float> g(n);
        for (int64_t i = 0; i < n; ++i) g[i] = static_cast<float>(((i * 5 + step * 3) % 9) - 4);
        muon_step(h, p.data(), g.data(), buf.data(), rows, cols);
        for (int64_t i = 0; i < n; ++i) {
          buf_sgd[i] = 0.75f * buf_sgd[i] + 0.25f * g[i];
          const float u = nesterov ? 0.25f * g[i] + 0.75f * buf_sgd[i] : buf_sgd[i];
          p_sgd[i] = p_sgd[i] * 0.9375f - static_cast<float>(0.125 * scale) * u;
        }
      }
      INFO("nesterov " << nesterov << ", " << rows << "x" << cols);
      CHECK(fpg_test::bit_mismatches(buf, buf_sgd) == 0);
      CHECK(fpg_test::bit_mismatches(p, p_sgd) == 0);
    }
  }
}

TEST_CASE("Muon decays the old parameter with the unadjusted lr, then adds the scaled update", "[optim][muon]") {
  MuonHyper h;
  h.orthogonalizer = MuonOrthogonalizer::identity;
  h.nesterov = false;
  h.momentum = 0.5;
  h.lr = 0.125;
  h.weight_decay = 0.5;
  h.adjust_lr = MuonLrAdjust::match_rms_adamw;  // 4 × 100: s = 0.2·sqrt(100) = 2
  const int64_t rows = 4, cols = 100, n = rows * cols;
  std::vector<float> p(n, 16.0f), g(n, 8.0f), buf(n, 0.0f);
  muon_step(h, p.data(), g.data(), buf.data(), rows, cols);
  // buf = 0.5·g = 4; p = 16·(1 − 0.125·0.5) − 0.125·2·4 (decay by lr·wd, not by the adjusted lr)
  for (int64_t i = 0; i < n; ++i) {
    REQUIRE(buf[i] == 4.0f);
    REQUIRE(p[i] == 16.0f * 0.9375f - 1.0f);
  }
}

TEST_CASE("Muon lr scale factors are torch's adjust_lr_fn", "[optim][muon]") {
  CHECK(muon_lr_scale(64, 16, MuonLrAdjust::original) == 2.0);
  CHECK(muon_lr_scale(16, 64, MuonLrAdjust::original) == 1.0);
  CHECK(muon_lr_scale(37, 53, MuonLrAdjust::original) == 1.0);
  CHECK(muon_lr_scale(53, 37, MuonLrAdjust::original) == std::sqrt(53.0 / 37.0));
  CHECK(muon_lr_scale(128, 384, MuonLrAdjust::match_rms_adamw) == 0.2 * std::sqrt(384.0));
  CHECK(muon_lr_scale(384, 128, MuonLrAdjust::match_rms_adamw) == 0.2 * std::sqrt(384.0));
  const MuonHyper d;
  CHECK(d.lr == 1e-3);
  CHECK(d.weight_decay == 0.1);
  CHECK(d.momentum == 0.95);
  CHECK(d.nesterov);
  CHECK(d.ns.steps == 5);
  CHECK(d.ns.eps == 1e-7);
  CHECK(d.ns.precision == NsPrecision::bf16);
}

TEST_CASE("Newton-Schulz: orientation, zeros, bf16 output and accuracy against fp64", "[optim][muon]") {
  const int64_t r = 48, c = 160, n = r * c;
  const std::vector<float> u = gaussian(n, 7);
  std::vector<float> ut(n);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) ut[j * r + i] = u[i * c + j];
  std::vector<double> u64(u.begin(), u.end()), o64(n);
  NsOptions opt;
  newton_schulz_fp64(u64.data(), r, c, opt, o64.data());
  for (const NsPrecision prec : {NsPrecision::bf16, NsPrecision::fp32}) {
    opt.precision = prec;
    std::vector<float> o(n), ot(n);
    newton_schulz(u.data(), r, c, opt, o.data());
    newton_schulz(ut.data(), c, r, opt, ot.data());  // tall input: iterated transposed
    int64_t bad = 0;
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) bad += fpg_test::bits_of(o[i * c + j]) != fpg_test::bits_of(ot[j * r + i]);
    CHECK(bad == 0);
    const double e = rel_frobenius(std::vector<double>(o.begin(), o.end()), o64);
    if (prec == NsPrecision::bf16) {
      CHECK(e < 0.03);  // torch's bf16 addmm-form NS is within ~1% of the same polynomial in high precision
      bool bf16_valued = true;
      for (float x : o) bf16_valued = bf16_valued && fpg::float_from_bf16(fpg::bf16_from_float(x)) == x;
      CHECK(bf16_valued);
    } else {
      CHECK(e < 1e-4);
    }
  }
  // A zero matrix stays zero: the norm is clamped to eps, no division by zero.
  std::vector<float> z(n, 0.0f);
  opt.precision = NsPrecision::bf16;
  newton_schulz(z.data(), r, c, opt, z.data());
  CHECK(std::all_of(z.begin(), z.end(), [](float x) { return x == 0.0f; }));
  CHECK_THROWS_AS(muon_step(MuonHyper{}, z.data(), z.data(), z.data(), 0, 4), fpg::UsageError);
}
