// The GPU grad scaling and exact grad norm against lib/pipeline/grad_norm.h, bit for bit: the scaled
// grads, the max, the 128-bit fixed-point sum (including sums past 2^64, so the carry between the two
// atomic words is exercised) and the clip multiply, over >= 100 spans of awkward sizes.
#include <cmath>
#include <limits>
#include <random>

#include "catch.h"
#include "kernels/grad_norm.h"
#include "optim_device_util.h"
#include "pipeline/grad_norm.h"

using fpg_gpu_test::bits;
using fpg_gpu_test::Dev;
using fpg_gpu_test::mismatches;
namespace pl = fpg::pipeline;

namespace {

struct Spans {
  std::vector<int64_t> offset, numel;
  int64_t total = 0;
};

Spans make_spans(std::mt19937_64& rng) {
  const int64_t awkward[] = {1, 7, 8, 9, 4097, 16383, 16384, 16385, 100003};
  std::uniform_int_distribution<int64_t> size(0, 2500);
  Spans s;
  for (int i = 0; i < 120; ++i) {
    const int64_t n = i < int(std::size(awkward)) ? awkward[i] : size(rng);
    s.offset.push_back(s.total);
    s.numel.push_back(n);
    s.total += n;
  }
  return s;
}

std::vector<fpg::cuda::GradSpan> gpu_spans(const Spans& s, float* base) {
  std::vector<fpg::cuda::GradSpan> out;
  for (size_t i = 0; i < s.numel.size(); ++i) out.push_back({base + s.offset[i], s.numel[i]});
  return out;
}

}  // namespace

TEST_CASE("GPU grad scaling, max, exact 128-bit square sum and clip equal the CPU bit for bit", "[gpu][optim]") {
  std::mt19937_64 rng(5);
  const Spans s = make_spans(rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ex(-30.0f, 3.0f);
  for (const float divisor : {1.0f, 3.0f, 8.0f}) {
    std::vector<float> g(s.total);
    for (auto& x : g) x = nd(rng) * std::pow(2.0f, ex(rng));
    for (int64_t i = 0; i < s.total; i += 301) g[i] = 1e-42f;  // subnormal
    Dev<float> dg(g);
    const fpg::cuda::GradSpanTable t(gpu_spans(s, dg.get()));
    CHECK(t.elements() == s.total);

    float cpu_max = 0.0f;
    for (size_t i = 0; i < s.numel.size(); ++i) {
      float* gi = g.data() + s.offset[i];
      for (int64_t k = 0; k < s.numel[i]; ++k) gi[k] = gi[k] / divisor;
      cpu_max = pl::max_abs(gi, s.numel[i], cpu_max);
    }
    const float gpu_max = fpg::cuda::scale_and_max_abs(t, divisor, 0.0f, nullptr);
    INFO("divisor " << divisor);
    CHECK(bits(gpu_max) == bits(cpu_max));
    CHECK(mismatches(dg.host(), g) == 0);
    CHECK(bits(fpg::cuda::max_abs(t, 0.0f, nullptr)) == bits(cpu_max));

    const int e = pl::norm_exponent(cpu_max);
    pl::uint128 cpu_sum = 0;
    for (size_t i = 0; i < s.numel.size(); ++i)
      pl::add_scaled_squares(g.data() + s.offset[i], s.numel[i], e, cpu_sum);
    const pl::uint128 gpu_sum = fpg::cuda::scaled_squares(t, e, nullptr);
    CHECK(static_cast<uint64_t>(gpu_sum) == static_cast<uint64_t>(cpu_sum));
    CHECK(static_cast<uint64_t>(gpu_sum >> 64) == static_cast<uint64_t>(cpu_sum >> 64));
    CHECK(pl::norm_from_sum(gpu_sum, e) == pl::norm_from_sum(cpu_sum, e));

    const float coef = pl::clip_coefficient(pl::norm_from_sum(cpu_sum, e), 0.5);
    REQUIRE(coef < 1.0f);
    for (auto& x : g) x = x * coef;
    fpg::cuda::scale(t, coef, nullptr);
    FPG_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(mismatches(dg.host(), g) == 0);
  }
}

TEST_CASE("GPU 128-bit square sum carries past 2^64 exactly", "[gpu][optim]") {
  // 2^21 elements near the max: each q(g) is close to 2^60, the sum ~2^81.
  const int64_t n = int64_t(1) << 21;
  std::vector<float> g(n);
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> u(0.75f, 0.999f);
  for (auto& x : g) x = u(rng);
  Dev<float> dg(g);
  const fpg::cuda::GradSpanTable t({{dg.get(), n / 3}, {dg.get() + n / 3, n - n / 3}});
  const int e = pl::norm_exponent(pl::max_abs(g.data(), g.size(), 0.0f));
  pl::uint128 cpu = 0;
  pl::add_scaled_squares(g.data(), g.size(), e, cpu);
  REQUIRE((cpu >> 64) > 0);
  const pl::uint128 gpu = fpg::cuda::scaled_squares(t, e, nullptr);
  CHECK(static_cast<uint64_t>(gpu) == static_cast<uint64_t>(cpu));
  CHECK(static_cast<uint64_t>(gpu >> 64) == static_cast<uint64_t>(cpu >> 64));
}

TEST_CASE("GPU grad max is NaN or inf when a gradient is", "[gpu][optim]") {
  std::vector<float> g(50000, 0.25f);
  g[777] = -std::numeric_limits<float>::infinity();
  Dev<float> dg(g);
  const fpg::cuda::GradSpanTable t({{dg.get(), 40000}, {dg.get() + 40000, 10000}});
  CHECK(fpg::cuda::max_abs(t, 0.0f, nullptr) == std::numeric_limits<float>::infinity());
  g[44444] = std::numeric_limits<float>::quiet_NaN();
  Dev<float> dn(g);
  const fpg::cuda::GradSpanTable tn({{dn.get(), 40000}, {dn.get() + 40000, 10000}});
  const float m = fpg::cuda::max_abs(tn, 0.0f, nullptr);
  CHECK(m != m);
  CHECK(pl::max_abs(g.data(), g.size(), 0.0f) != pl::max_abs(g.data(), g.size(), 0.0f));
}
