#include "pipeline/grad_norm.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace fpg::pipeline {

float max_abs(const float* x, size_t n, float acc) {
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    // a > acc picks larger values; a != a makes a NaN stick (acc NaN: nothing compares greater).
    acc = (a > acc || a != a) ? a : acc;
  }
  return acc;
}

int norm_exponent(float global_max) {
  if (!(global_max > 0.0f)) return 0;
  int e = 0;
  std::frexp(static_cast<double>(global_max), &e);  // m = f·2^e, f in [0.5, 1): m < 2^e
  return e;
}

void add_scaled_squares(const float* x, size_t n, int exponent, uint128& sum) {
  const double scale = std::ldexp(1.0, -exponent);  // exact power of two
  const double lift = std::ldexp(1.0, 60);
  size_t i = 0;
  // Blocks of 8 fit a uint64 (8 · 2^60 < 2^64), then fold into the 128-bit sum.
  while (i < n) {
    const size_t end = i + 8 < n ? i + 8 : n;
    uint64_t part = 0;
    for (; i < end; ++i) {
      const double r = static_cast<double>(x[i]) * scale;
      part += static_cast<uint64_t>((r * r) * lift);  // r*r < 1 exact; truncation = floor (>= 0)
    }
    sum += part;
  }
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
