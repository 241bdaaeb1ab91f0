// Fused multi-tensor Adam, AdamW and Lion on the GPU against the CPU references, bit for bit: >= 100
// fragments of awkward sizes packed back to back in one buffer (so some chunks take the float4 path
// and some the scalar one), shards of parameters that straddle the torch tail, NaN/inf/subnormal
// gradients, several steps.
#include <cmath>
#include <limits>
#include <random>

#include "catch.h"
#include "core/float_codec.h"
#include "kernels/optim_fused.h"
#include "optim/adam.h"
#include "optim/lion.h"
#include "optim_device_util.h"

using fpg_gpu_test::Dev;
using fpg_gpu_test::mismatches;
namespace optim = fpg::optim;

namespace {

struct Layout {
  std::vector<int64_t> offset, numel, param_offset, param_numel;
  int64_t total = 0;
};

// 130 fragments: the awkward sizes, then random ones; every fifth is an interior or final shard of a
// larger parameter, so the parameter's tail begins inside, before or after the fragment.
Layout make_layout(std::mt19937_64& rng) {
  const int64_t awkward[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 127, 129, 4095, 4096, 4097, 16383, 16384, 16385, 40001, 65537};
  Layout l;
  std::uniform_int_distribution<int64_t> size(1, 3000), extra(0, 40);
  for (int i = 0; i < 130; ++i) {
    const int64_t n = i < int(std::size(awkward)) ? awkward[i] : size(rng);
    int64_t po = 0, pn = -1;
    if (i % 5 == 4) {  // a shard: the parameter extends `before` elements earlier and 0..40 later
      const int64_t before = extra(rng) * 3, after = i % 10 == 4 ? 0 : extra(rng);
      po = before;
      pn = before + n + after;
    }
    l.offset.push_back(l.total);
    l.numel.push_back(n);
    l.param_offset.push_back(po);
    l.param_numel.push_back(pn);
    l.total += n;
  }
  return l;
}

// Gradients spanning 1e-6..1 in magnitude, with zeros, subnormals and (optionally) inf/NaN.
std::vector<float> make_grads(int64_t n, std::mt19937_64& rng, bool specials) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ex(-6.0f, 0.0f);
  std::vector<float> g(n);
  for (auto& x : g) x = nd(rng) * std::pow(10.0f, ex(rng));
  for (int64_t i = 0; i < n; i += 97) g[i] = 0.0f;
  for (int64_t i = 5; i < n; i += 211) g[i] = (i & 1 ? -1.0f : 1.0f) * 1e-40f;  // subnormal
  if (specials) {
    g[1000] = std::numeric_limits<float>::quiet_NaN();
    g[70001] = std::numeric_limits<float>::infinity();
    g[90002] = -std::numeric_limits<float>::infinity();
  }
  return g;
}

std::vector<optim::Fragment> fragments(const Layout& l, float* p, const float* g, float* m, float* v) {
  std::vector<optim::Fragment> out(l.numel.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t o = l.offset[i];
    out[i] = optim::Fragment{p + o, g + o, m + o, v ? v + o : nullptr, l.numel[i], l.param_offset[i], l.param_numel[i]};
  }
  return out;
}

// Runs `steps` steps on the CPU and on the GPU from the same state and compares every buffer after each.
// grad_scale: the CPU steps on g * grad_scale (a clip pass), the GPU step gets grad_scale. bf16_out:
// every third fragment has a bf16 output on the GPU, compared with the CPU's params cast to bf16.
template <typename CpuStep, typename GpuStep>
void compare_steps(bool adam, bool specials, uint64_t seed, CpuStep cpu_step, GpuStep gpu_step,
                   float grad_scale = 1.0f, bool bf16_out = false) {
  std::mt19937_64 rng(seed);
  const Layout l = make_layout(rng);
  REQUIRE(l.total > 100000);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> p(l.total), m(l.total, 0.0f), v(l.total, 0.0f);
  for (auto& x : p) x = nd(rng);
  Dev<float> dp(p), dm(m), dv(v);
  const std::vector<float> g0 = make_grads(l.total, rng, false);
  Dev<float> dg(g0);
  const auto gpu_frags = fragments(l, dp.get(), dg.get(), dm.get(), adam ? dv.get() : nullptr);
  Dev<uint16_t> d16(std::vector<uint16_t>(size_t(l.total), 0));
  std::vector<uint16_t*> outs;
  if (bf16_out)
    for (size_t i = 0; i < gpu_frags.size(); ++i) outs.push_back(i % 3 == 0 ? d16.get() + l.offset[i] : nullptr);
  const fpg::cuda::FragmentTable table(gpu_frags, adam, outs);
  CHECK(table.writes_bf16() == bf16_out);
  CHECK(table.fragments() == 130);
  CHECK(table.elements() == l.total);
  for (int step = 1; step <= 5; ++step) {
    const std::vector<float> g = make_grads(l.total, rng, specials && step == 3);
    FPG_CUDA_CHECK(cudaMemcpy(dg.get(), g.data(), g.size() * 4, cudaMemcpyHostToDevice));
    std::vector<float> clipped = g;
    for (float& x : clipped) x = x * grad_scale;
    cpu_step(step, fragments(l, p.data(), grad_scale != 1.0f ? clipped.data() : g.data(), m.data(),
                             adam ? v.data() : nullptr));
    gpu_step(step, table, grad_scale);
    FPG_CUDA_CHECK(cudaDeviceSynchronize());
    INFO("step " << step << " grad scale " << grad_scale << (bf16_out ? ", bf16 outputs" : ""));
    CHECK(mismatches(dp.host(), p) == 0);
    CHECK(mismatches(dm.host(), m) == 0);
    if (adam) CHECK(mismatches(dv.host(), v) == 0);
    CHECK(mismatches(dg.host(), g) == 0);  // the grads themselves stay as they were
    if (bf16_out) {
      const std::vector<uint16_t> got = d16.host();
      size_t bad = 0, written = 0;
      for (size_t i = 0; i < l.numel.size(); ++i)
        for (int64_t e = l.offset[i]; e < l.offset[i] + l.numel[i]; ++e) {
          const uint16_t want = i % 3 == 0 ? fpg::bf16_from_float(p[size_t(e)]) : uint16_t{0};
          bad += got[size_t(e)] != want;
          written += i % 3 == 0;
        }
      CHECK(written > 0);
      CHECK(bad == 0);
    }
  }
  if (specials) {  // the inf/NaN did reach the state (the checks above covered them); Lion's p stays
    size_t nonfinite = 0;  // finite (sign(±inf) = ±1, sign(NaN) = 0), its momentum does not
    for (float x : m) nonfinite += !std::isfinite(x);
    CHECK(nonfinite > 0);
  }
}

}  // namespace

TEST_CASE("GPU fused Adam, Adam-L2 and AdamW equal the CPU reference bit for bit", "[gpu][optim]") {
  struct Case {
    const char* name;
    optim::AdamHyper h;
  };
  std::vector<Case> cases;
  cases.push_back({"adam", optim::AdamHyper::adam()});
  optim::AdamHyper l2 = optim::AdamHyper::adam();
  l2.weight_decay = 0.1;
  l2.lr = 3e-3;
  cases.push_back({"adam-l2", l2});
  cases.push_back({"adamw", optim::AdamHyper::adamw()});
  optim::AdamHyper w16 = optim::AdamHyper::adamw();
  w16.torch_vec_width = 16;
  w16.beta1 = 0.8;  // |1 - beta1| < 0.5 and >= 0.5 lerp branches are both covered below
  w16.weight_decay = 0.1;
  cases.push_back({"adamw-avx512-tail", w16});
  optim::AdamHyper big = optim::AdamHyper::adamw();
  big.beta1 = 0.3;  // lerp weight 0.7: the |w| >= 0.5 branch
  big.torch_vec_width = 1;
  cases.push_back({"adamw-beta1-0.3-no-tail", big});
  uint64_t seed = 11;
  for (const Case& c : cases) {
    for (const bool specials : {false, true}) {
      INFO(c.name << (specials ? " with inf/NaN grads" : ""));
      compare_steps(
          true, specials, seed++,
          [&](int step, const std::vector<optim::Fragment>& f) { optim::adam_step(c.h, step, f); },
          [&](int step, const fpg::cuda::FragmentTable& t, float gs) { fpg::cuda::adam_step(c.h, step, t, nullptr, gs); });
    }
  }
}

TEST_CASE("GPU fused Lion equals the CPU reference bit for bit", "[gpu][optim]") {
  for (const double wd : {0.0, 0.1}) {
    for (const bool specials : {false, true}) {
      optim::LionHyper h;
      h.weight_decay = wd;
      h.lr = 3e-4;
      INFO("wd " << wd << (specials ? " with inf/NaN grads" : ""));
      compare_steps(
          false, specials, 100 + uint64_t(wd * 10) + specials,
          [&](int, const std::vector<optim::Fragment>& f) { optim::lion_step(h, f); },
          [&](int, const fpg::cuda::FragmentTable& t, float gs) { fpg::cuda::lion_step(h, t, nullptr, gs); });
    }
  }
}

// The clip folded into the optimizer's read of the grads, and the copy-back of bf16 params into its
// stores (`--compute bf16`): the same bits as a clip pass, the CPU step and a bf16 cast.
TEST_CASE("GPU fused optimizers with a grad scale and bf16 outputs equal clip + step + cast", "[gpu][optim][bf16]") {
  uint64_t seed = 101;
  for (const float coef : {1.0f, 0.37f}) {
    for (const bool out16 : {false, true}) {
      if (coef == 1.0f && !out16) continue;  // the cases above
      const optim::AdamHyper h = optim::AdamHyper::adamw();
      compare_steps(
          true, true, seed++, [&](int step, const std::vector<optim::Fragment>& f) { optim::adam_step(h, step, f); },
          [&](int step, const fpg::cuda::FragmentTable& t, float gs) { fpg::cuda::adam_step(h, step, t, nullptr, gs); },
          coef, out16);
      optim::LionHyper lh;
      lh.lr = 1e-3;
      lh.weight_decay = 0.1;
      compare_steps(
          false, false, seed++, [&](int, const std::vector<optim::Fragment>& f) { optim::lion_step(lh, f); },
          [&](int, const fpg::cuda::FragmentTable& t, float gs) { fpg::cuda::lion_step(lh, t, nullptr, gs); }, coef,
          out16);
    }
  }
}

TEST_CASE("GPU fused optimizers refuse what the CPU refuses", "[gpu][optim]") {
  Dev<float> d(std::vector<float>(16, 0.0f));
  optim::Fragment f{d.get(), d.get(), d.get(), nullptr, 8, 0, -1};
  REQUIRE_THROWS_AS(fpg::cuda::FragmentTable(&f, 1, true), fpg::UsageError);  // Adam without exp_avg_sq
  f.param_offset = 4;
  f.param_numel = 10;
  REQUIRE_THROWS_AS(fpg::cuda::FragmentTable(&f, 1, false), fpg::UsageError);  // outside its parameter
  f.param_offset = 0;
  const fpg::cuda::FragmentTable lion(&f, 1, false);
  REQUIRE_THROWS_AS(fpg::cuda::adam_step(optim::AdamHyper{}, 1, lion, nullptr), fpg::UsageError);
  f.exp_avg_sq = d.get() + 8;
  f.exp_avg = d.get() + 8;
  const fpg::cuda::FragmentTable adam(&f, 1, true);
  REQUIRE_THROWS_AS(fpg::cuda::adam_step(optim::AdamHyper{}, 0, adam, nullptr), fpg::UsageError);
}
