// The GPU grad scaling and exact grad norm against lib/pipeline/grad_norm.h, bit for bit: the scaled
// grads, the max, the 128-bit fixed-point sum and the clip multiply, over spans at every 16-byte
// misalignment (1, 2, 3 floats past a boundary) with lengths around the kernels' vector and tile
// sizes, one span of more than 2^24 elements, tens of thousands of tiny spans, and inf/NaN in a span's
// unaligned head, vector body and tail. The spans lie in one buffer with gaps between some of them;
// the gaps hold a huge sentinel that must stay untouched and must not reach the max or the sum.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "catch.h"
#include "kernels/grad_norm.h"
#include "optim_device_util.h"
#include "pipeline/grad_norm.h"

using fpg_gpu_test::bits;
using fpg_gpu_test::Dev;
using fpg_gpu_test::mismatches;
namespace pl = fpg::pipeline;

namespace {

constexpr float kGapSentinel = 7e30f;

// Spans placed one after another in a buffer; before each, 0 to 3 gap floats put its start at the
// asked offset mod 4 from the buffer's (256-byte aligned) base: 1, 2 or 3 floats past a 16-byte
// boundary, or on it.
struct Layout {
  std::vector<int64_t> offset, numel;
  int64_t total = 0;

  void add(int64_t misalign, int64_t n) {
    total += ((misalign - total) % 4 + 4) % 4;
    offset.push_back(total);
    numel.push_back(n);
    total += n;
  }
  int64_t elements() const {
    int64_t s = 0;
    for (const int64_t n : numel) s += n;
    return s;
  }
  std::vector<fpg::cuda::GradSpan> spans(float* base) const {
    std::vector<fpg::cuda::GradSpan> out;
    for (size_t i = 0; i < numel.size(); ++i) out.push_back({base + offset[i], numel[i]});
    return out;
  }
  // The buffer: the sentinel in the gaps, value(rng) in the spans.
  template <typename Value>
  std::vector<float> fill(Value&& value) const {
    std::vector<float> g(total, kGapSentinel);
    for (size_t i = 0; i < numel.size(); ++i)
      for (int64_t k = 0; k < numel[i]; ++k) g[offset[i] + k] = value();
    return g;
  }
};

// Ordinary gradients over 34 binades, with some subnormals.
std::vector<float> ordinary_grads(const Layout& l, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ex(-30.0f, 3.0f);
  std::uniform_int_distribution<int> one_in(0, 300);
  return l.fill([&] { return one_in(rng) == 0 ? 1e-42f : nd(rng) * std::pow(2.0f, ex(rng)); });
}

void check_sum(pl::uint128 gpu, pl::uint128 cpu) {
  CHECK(static_cast<uint64_t>(gpu) == static_cast<uint64_t>(cpu));
  CHECK(static_cast<uint64_t>(gpu >> 64) == static_cast<uint64_t>(cpu >> 64));
}

// The device pipeline's sequence on every span of `l` (scale by 1/divisor with the max, the squares at
// the max's exponent, a clip multiply), each result against the CPU's bit for bit, gaps included.
// Returns the CPU's square sum.
pl::uint128 check_against_cpu(const Layout& l, std::vector<float> g, float divisor) {
  Dev<float> dg(g), dg_once(g);
  const fpg::cuda::GradSpanTable t(l.spans(dg.get())), t_once(l.spans(dg_once.get()));
  CHECK(t.elements() == l.elements());

  float cpu_max = 0.0f;
  for (size_t i = 0; i < l.numel.size(); ++i) {
    float* gi = g.data() + l.offset[i];
    for (int64_t k = 0; k < l.numel[i]; ++k) gi[k] = gi[k] / divisor;
    cpu_max = pl::max_abs(gi, l.numel[i], cpu_max);
  }
  REQUIRE(std::isfinite(cpu_max));
  CHECK(bits(fpg::cuda::scale_and_max_abs(t, divisor, 0.0f, nullptr)) == bits(cpu_max));
  CHECK(mismatches(dg.host(), g) == 0);
  CHECK(bits(fpg::cuda::max_abs(t, 0.0f, nullptr)) == bits(cpu_max));

  const int e = pl::norm_exponent(cpu_max);
  pl::uint128 cpu_sum = 0;
  for (size_t i = 0; i < l.numel.size(); ++i) pl::add_scaled_squares(g.data() + l.offset[i], l.numel[i], e, cpu_sum);
  const pl::uint128 gpu_sum = fpg::cuda::scaled_squares(t, e, nullptr);
  check_sum(gpu_sum, cpu_sum);
  CHECK(pl::norm_from_sum(gpu_sum, e) == pl::norm_from_sum(cpu_sum, e));

  // Both passes with one synchronisation, the exponent taken on the device: the same results.
  const fpg::cuda::MaxAndSquares once = fpg::cuda::scale_max_and_squares(t_once, divisor, 0.0f, nullptr);
  CHECK(bits(once.max) == bits(cpu_max));
  check_sum(once.sum, cpu_sum);
  CHECK(mismatches(dg_once.host(), g) == 0);

  const float coef = 0.7133f;
  for (size_t i = 0; i < l.numel.size(); ++i)
    for (int64_t k = 0; k < l.numel[i]; ++k) g[l.offset[i] + k] = g[l.offset[i] + k] * coef;
  fpg::cuda::scale(t, coef, nullptr);
  FPG_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(mismatches(dg.host(), g) == 0);
  return cpu_sum;
}

}  // namespace

TEST_CASE("GPU grad norm: every misalignment and awkward length equals the CPU bit for bit", "[gpu][optim]") {
  // Lengths around a float4 (4), a block round and tile (1024 float4 = 4096 floats), and two tiles.
  const int64_t lengths[] = {0, 1, 2, 3, 4, 5, 7, 8, 1023, 1024, 1025, 4095, 4096, 4097, 4099, 4100, 8195, 12289, 100003};
  std::mt19937_64 rng(5);
  Layout l;
  for (int64_t mis = 0; mis < 4; ++mis)
    for (const int64_t n : lengths) l.add(mis, n);
  std::uniform_int_distribution<int64_t> size(0, 2500), mis(0, 3);
  for (int i = 0; i < 60; ++i) l.add(mis(rng), size(rng));
  for (const float divisor : {1.0f, 3.0f, 8.0f}) {
    INFO("divisor " << divisor);
    check_against_cpu(l, ordinary_grads(l, rng), divisor);
  }
}

TEST_CASE("GPU grad norm: tens of thousands of tiny spans equal the CPU bit for bit", "[gpu][optim]") {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int64_t> size(0, 6), mis(0, 3);
  Layout l;
  for (int i = 0; i < 30000; ++i) l.add(mis(rng), size(rng));
  check_against_cpu(l, ordinary_grads(l, rng), 3.0f);
}

TEST_CASE("GPU grad norm: a span of more than 2^24 elements, each thread's sum past 2^64", "[gpu][optim]") {
  // |g| in [0.75, 0.999] (halved, E halves too): every q(g) is at least 0.56·2^60. The ~4100 tiles of
  // 4096 elements (16 per thread) give each block at least two on a GPU of up to 2048 resident blocks
  // (an H200 has 132 SMs), so each thread adds 32 or more such squares: past 2^64 in its own 128-bit
  // sum, then again in the block and grid reductions.
  const int64_t n = (int64_t(1) << 24) + 4099;
  Layout l;
  l.add(1, 5);
  l.add(3, n);
  l.add(2, 1023);
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> u(0.75f, 0.999f);
  std::bernoulli_distribution negative(0.5);
  const pl::uint128 cpu = check_against_cpu(l, l.fill([&] { return negative(rng) ? -u(rng) : u(rng); }), 2.0f);
  CHECK(static_cast<uint64_t>(cpu >> 64) >= (uint64_t(1) << 19));  // 2^24 squares of at least 2^59
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
  check_sum(fpg::cuda::scaled_squares(t, e, nullptr), cpu);
}

TEST_CASE("GPU grad max is NaN or inf when a gradient is, in a span's head, body or tail", "[gpu][optim]") {
  // The second span starts 1 float past a boundary: elements 0-2 are its head, 3-4102 its float4 body
  // (1025 vectors), 4103-4104 its tail.
  Layout l;
  l.add(0, 50000);
  l.add(1, 4105);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const int64_t at : {int64_t{1}, int64_t{2000}, int64_t{4104}}) {
    for (const float special : {inf, -inf, nan}) {
      INFO("element " << at << " of the misaligned span is " << special);
      std::vector<float> g = l.fill([] { return 0.25f; });
      g[l.offset[1] + at] = special;
      Dev<float> dg(g);
      const fpg::cuda::GradSpanTable t(l.spans(dg.get()));
      const float m = fpg::cuda::max_abs(t, 0.0f, nullptr);
      if (special != special) {
        CHECK(m != m);
      } else {
        CHECK(m == inf);
      }
      float cpu_max = 0.0f;
      for (size_t i = 0; i < l.numel.size(); ++i) {
        float* gi = g.data() + l.offset[i];
        for (int64_t k = 0; k < l.numel[i]; ++k) gi[k] = gi[k] / 2.0f;
        cpu_max = pl::max_abs(gi, l.numel[i], cpu_max);
      }
      const float scaled_max = fpg::cuda::scale_and_max_abs(t, 2.0f, 0.0f, nullptr);
      CHECK((scaled_max != scaled_max) == (cpu_max != cpu_max));
      if (cpu_max == cpu_max) CHECK(bits(scaled_max) == bits(cpu_max));
      CHECK(mismatches(dg.host(), g) == 0);
      // One synchronisation: a non-finite max comes back with a zero sum (the step is skipped).
      const fpg::cuda::MaxAndSquares once = fpg::cuda::scale_max_and_squares(t, 1.0f, 0.0f, nullptr);
      CHECK((once.max != once.max) == (cpu_max != cpu_max));
      if (cpu_max == cpu_max) CHECK(bits(once.max) == bits(cpu_max));
      check_sum(once.sum, 0);
    }
  }
}

TEST_CASE("GPU grad max starts from acc; an empty table leaves everything as it was", "[gpu][optim]") {
  std::vector<float> g(1000, -0.5f);
  Dev<float> dg(g);
  const fpg::cuda::GradSpanTable t({{dg.get() + 1, 999}});
  CHECK(fpg::cuda::max_abs(t, 0.0f, nullptr) == 0.5f);
  CHECK(fpg::cuda::max_abs(t, 1e30f, nullptr) == 1e30f);
  const float nan_acc = fpg::cuda::max_abs(t, std::numeric_limits<float>::quiet_NaN(), nullptr);
  CHECK(nan_acc != nan_acc);

  for (const auto& spans : {std::vector<fpg::cuda::GradSpan>{}, std::vector<fpg::cuda::GradSpan>{{dg.get() + 3, 0}}}) {
    const fpg::cuda::GradSpanTable empty(spans);
    CHECK(empty.elements() == 0);
    CHECK(fpg::cuda::scale_and_max_abs(empty, 4.0f, 0.25f, nullptr) == 0.25f);
    check_sum(fpg::cuda::scaled_squares(empty, 3, nullptr), 0);
    const fpg::cuda::MaxAndSquares once = fpg::cuda::scale_max_and_squares(empty, 4.0f, 0.25f, nullptr);
    CHECK(once.max == 0.25f);
    check_sum(once.sum, 0);
    fpg::cuda::scale(empty, 0.5f, nullptr);
  }
  FPG_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(mismatches(dg.host(), g) == 0);
}
