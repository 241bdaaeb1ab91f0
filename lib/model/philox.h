// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11; the Random123 / cuRAND / torch generator). A draw is a pure function of
// (key, counter), so any rank can produce any element of any stream without state or coordination:
// micro-batch i, or parameter "blocks.3.fc1.weight", comes out the same whoever computes it.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace fpg::model {

using PhiloxKey = std::array<uint32_t, 2>;
using PhiloxCounter = std::array<uint32_t, 4>;

inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const uint64_t p0 = uint64_t(kM0) * c[0], p1 = uint64_t(kM1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
  }
  return c;
}

// SplitMix64's finalizer: spreads a seed and a domain tag over a key.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a, 64-bit: a stream id from a parameter name.
inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001B3ull;
  }
  return h;
}

// Independent generators for different purposes under one user seed: key = f(seed, domain).
inline PhiloxKey philox_key(uint64_t seed, uint64_t domain) {
  const uint64_t k = splitmix64(seed ^ splitmix64(domain));
  return {uint32_t(k), uint32_t(k >> 32)};
}

// The standard-normal pair of Philox block `block` of stream `stream` under `key`: Box–Muller in
// double, each value rounded to fp32 once. Uniforms are (u + 0.5)·2⁻³², never 0 or 1.
inline std::array<float, 2> philox_normal_pair(PhiloxKey key, uint64_t stream, uint64_t block) {
  const PhiloxCounter r = philox4x32_10(
      {uint32_t(block), uint32_t(block >> 32), uint32_t(stream), uint32_t(stream >> 32)}, key);
  constexpr double kTwoPow32Inv = 1.0 / 4294967296.0;
  const double u1 = (double(r[0]) + 0.5) * kTwoPow32Inv;
  const double u2 = (double(r[1]) + 0.5) * kTwoPow32Inv;
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double theta = 6.283185307179586 * u2;
  return {static_cast<float>(radius * std::cos(theta)), static_cast<float>(radius * std::sin(theta))};
}

// Element `elem` of the standard-normal stream `stream`: elements 2j and 2j+1 are block j's pair.
inline float philox_normal(PhiloxKey key, uint64_t stream, uint64_t elem) {
  return philox_normal_pair(key, stream, elem >> 1)[elem & 1];
}

// out[j - first] = scale · philox_normal(key, stream, j) for j in [first, first + n), first even, one
// Philox block per pair: any even split of a range fills what the whole range fills.
inline void philox_normal_fill(PhiloxKey key, uint64_t stream, uint64_t first, uint64_t n, float scale, float* out) {
  for (uint64_t j = 0; j < n; j += 2) {
    const std::array<float, 2> z = philox_normal_pair(key, stream, (first + j) >> 1);
    out[j] = scale * z[0];
    if (j + 1 < n) out[j + 1] = scale * z[1];
  }
}

inline void philox_normal_fill(PhiloxKey key, uint64_t stream, uint64_t n, float scale, float* out) {
  philox_normal_fill(key, stream, 0, n, scale, out);
}

}  // namespace fpg::model
