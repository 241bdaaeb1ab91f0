#include "pipeline/grad_norm.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/float_codec.h"
#include "optim/simd_clones.h"

namespace fpg::pipeline {

namespace {

// |x| as its bit pattern: for non-negative floats, and NaNs with the sign cleared (which sort above
// +inf), integer order is float order, so an integer max is the float max with any NaN winning.
// Integer max vectorizes; the float compare-and-select with its NaN rule does not.
uint32_t abs_bits(float x) { return float_bits(x) & 0x7fffffffu; }

}  // namespace

FPG_SIMD_CLONES float max_abs(const float* x, size_t n, float acc) {
  uint32_t mx = abs_bits(acc);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = abs_bits(x[i]);
    mx = a > mx ? a : mx;
  }
  return bits_float(mx);
}

FPG_SIMD_CLONES float divide_and_max_abs(float* x, size_t n, float divisor, float acc) {
  if (divisor == 1.0f) return max_abs(x, n, acc);  // x / 1 == x: nothing to write
  uint32_t mx = abs_bits(acc);
  for (size_t i = 0; i < n; ++i) {
    x[i] = x[i] / divisor;
    const uint32_t a = abs_bits(x[i]);
    mx = a > mx ? a : mx;
  }
  return bits_float(mx);
}

int norm_exponent(float global_max) {
  if (!(global_max > 0.0f)) return 0;
  int e = 0;
  std::frexp(static_cast<double>(global_max), &e);  // m = f·2^e, f in [0.5, 1): m < 2^e
  return e;
}

FPG_SIMD_CLONES void add_scaled_squares(const float* x, size_t n, int exponent, uint128& sum) {
  const double scale = std::ldexp(1.0, -exponent);  // exact power of two
  const double lift = std::ldexp(1.0, 60);
  // Blocks of 8 fit a uint64 (8 · 2^60 < 2^64), then fold into the 128-bit sum; a whole block is a
  // fixed-length loop the compiler turns into vector code. Integer sums: the order cannot change them.
  auto q = [&](float v) {
    const double r = static_cast<double>(v) * scale;
    return static_cast<uint64_t>((r * r) * lift);  // r*r < 1 exact; truncation = floor (>= 0)
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t part = 0;
    for (size_t k = 0; k < 8; ++k) part += q(x[i + k]);
    sum += part;
  }
  uint64_t part = 0;
  for (; i < n; ++i) part += q(x[i]);
  sum += part;
}

uint128 all_sum(comm::Communicator& comm, uint128 local) {
  std::vector<uint8_t> blob(sizeof(uint128));
  std::memcpy(blob.data(), &local, sizeof(uint128));
  uint128 total = 0;
  for (const auto& b : comm.all_gather_bytes(blob)) {
    uint128 v = 0;
    std::memcpy(&v, b.data(), sizeof(uint128));
    total += v;
  }
  return total;
}

double norm_from_sum(uint128 sum, int exponent) {
  return std::sqrt(std::ldexp(static_cast<double>(sum), 2 * exponent - 60));
}

float clip_coefficient(double norm, double max_norm) {
  const float c = static_cast<float>(max_norm / (norm + 1e-6));
  return c < 1.0f ? c : 1.0f;
}

void GradNorm::set_global_max(float m) {
  global_max = m;
  finite = std::isfinite(m);
  exponent = finite ? norm_exponent(m) : 0;
  if (!finite) norm = static_cast<double>(m);
}

void GradNorm::reduce_sum(comm::Communicator& comm) {
  const uint128 total = all_sum(comm, local_sum);
  norm = norm_from_sum(total, exponent);
}

}  // namespace fpg::pipeline
