// The gradient-norm passes of lib/pipeline/grad_norm (written for the vectorizer: integer max over bit
// patterns, fixed blocks of squares) against their definitions computed element by element.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "catch.h"
#include "pipeline/grad_norm.h"

using namespace fpg;
using pipeline::uint128;

namespace {

uint32_t bits(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  return u;
}

// Finite values of every magnitude the gradients take, subnormals and zeros of both signs included.
std::vector<float> values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> exp(-149, 20);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = std::ldexp(mant(rng), exp(rng)) * (rng() & 1 ? -1.0f : 1.0f);
    if (i % 97 == 0) v[i] = (i % 2) ? -0.0f : 0.0f;
  }
  return v;
}

}  // namespace

TEST_CASE("grad norm passes: the max, the divided max and the squares equal their definitions", "[gradnorm]") {
  for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{15}, size_t{16}, size_t{1000},
                         size_t{4099}}) {
    INFO("n = " << n);
    const std::vector<float> g = values(n, static_cast<uint32_t>(n) + 1);
    float want = 0.5f;  // acc
    for (float x : g) want = std::max(want, std::fabs(x));
    REQUIRE(bits(pipeline::max_abs(g.data(), n, 0.5f)) == bits(want));

    std::vector<float> a = g, b = g;
    for (float& x : a) x = x / 3.0f;
    float want_div = 0.0f;
    for (float x : a) want_div = std::max(want_div, std::fabs(x));
    REQUIRE(bits(pipeline::divide_and_max_abs(b.data(), n, 3.0f, 0.0f)) == bits(want_div));
    for (size_t i = 0; i < n; ++i) REQUIRE(bits(a[i]) == bits(b[i]));

    const int e = pipeline::norm_exponent(want);
    uint128 sum = 5, ref = 5;
    pipeline::add_scaled_squares(g.data(), n, e, sum);
    for (float x : g) {
      const double r = static_cast<double>(x) * std::ldexp(1.0, -e);
      ref += static_cast<uint64_t>((r * r) * std::ldexp(1.0, 60));
    }
    REQUIRE(sum == ref);
  }
}

TEST_CASE("grad norm passes: infinities and NaNs make the max infinite or NaN, whatever their place", "[gradnorm]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t at : {size_t{0}, size_t{5}, size_t{8}, size_t{99}}) {
    INFO("at " << at);
    std::vector<float> g = values(100, 7);
    g[at] = -inf;
    REQUIRE(pipeline::max_abs(g.data(), g.size(), 0.0f) == inf);
    g[(at + 50) % 100] = -nan;
    REQUIRE(std::isnan(pipeline::max_abs(g.data(), g.size(), 0.0f)));
    REQUIRE(std::isnan(pipeline::divide_and_max_abs(g.data(), g.size(), 2.0f, 0.0f)));
  }
  // A NaN accumulator stays NaN; of two NaNs the larger payload wins (as the GPU's bit max).
  const std::vector<float> g = values(20, 3);
  REQUIRE(std::isnan(pipeline::max_abs(g.data(), g.size(), nan)));
  float small_nan = 0, big_nan = 0;
  const uint32_t s = 0x7fc00001u, l = 0x7fc00100u;
  std::memcpy(&small_nan, &s, 4);
  std::memcpy(&big_nan, &l, 4);
  const std::vector<float> two = {big_nan, 1.0f, small_nan};
  REQUIRE(bits(pipeline::max_abs(two.data(), two.size(), 0.0f)) == l);
}

TEST_CASE("grad norm passes: dividing by 1 only reads, a signalling NaN left as it is", "[gradnorm]") {
  std::vector<float> g = values(64, 5);
  float snan = 0;
  const uint32_t sbits = 0xff800123u;  // negative, quiet bit clear
  std::memcpy(&snan, &sbits, 4);
  g[17] = snan;
  const std::vector<float> before = g;
  const float m = pipeline::divide_and_max_abs(g.data(), g.size(), 1.0f, 0.0f);
  REQUIRE(bits(m) == (sbits & 0x7fffffffu));
  REQUIRE(std::memcmp(g.data(), before.data(), g.size() * sizeof(float)) == 0);
}
