// The global gradient norm, exact and independent of how the elements are spread over ranks.
//
// A plain fp32/fp64 sum of squares depends on the order of additions, hence on the DP layout, and
// with clipping on that would break DP=N == DP=1 (lib/ARCHITECTURE.md invariant 3). Instead:
//   1. m = max |g| over every element of every rank: a local max, then an all-reduce MAX (exact,
//      order-free, NaN-propagating).
//   2. If m is not finite the gradients hold an inf or NaN: the step is skipped (found_inf, as
//      Megatron's mixed-precision optimizer does): no update, the optimizer step count is unchanged,
//      the norm is reported as inf/NaN.
//   3. E = the exponent with m < 2^E (frexp). Each element contributes
//        q(g) = floor((g / 2^E)^2 · 2^60)  as an integer < 2^60:
//      g / 2^E is exact (a power-of-two scale in double), its square is exact (an fp32 has 24
//      significant bits, its square 48 < 53), and the floor is per element, so q(g) does not depend
//      on which rank holds g. Sums are unsigned 128-bit integers: exact and associative.
//   4. The ranks' 128-bit sums are exchanged (all_gather_bytes) and added: S = Σ q(g), the same on
//      every rank whatever the partition.
//   5. norm = sqrt(double(S) · 2^(2E − 60)). The truncation loses < 1 unit of 2^(2E−60) per element,
//      a relative error below n·2^-60 of the norm² (norm ≥ m), far under fp32 resolution.
// Clipping (torch clip_grad_norm_ / Megatron clip_grad_by_total_norm_fp32): coef = max_norm /
// (norm + 1e-6) in double, rounded once to fp32; the grads are multiplied by it when it is < 1.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/communicator.h"

namespace fpg::pipeline {

using uint128 = unsigned __int128;

// max(acc, |x_i|) over n values; a NaN anywhere makes the result NaN (and keeps it): of several NaNs,
// the one with the largest payload (the max of the bit patterns with the sign cleared, as the GPU's).
float max_abs(const float* x, size_t n, float acc);

// x_i ← x_i / divisor (IEEE division), then max_abs of the results: one pass. With divisor 1 the values
// are left as they are (x / 1 == x; a signalling NaN stays unquieted) and only read.
float divide_and_max_abs(float* x, size_t n, float divisor, float acc);

// The exponent E of step 3 for a finite global max m > 0 (m < 2^E); 0 for m == 0.
int norm_exponent(float global_max);

// Adds Σ q(x_i) (step 3) to sum.
void add_scaled_squares(const float* x, size_t n, int exponent, uint128& sum);

// Step 4: every rank's sum, added (identical on every rank).
uint128 all_sum(comm::Communicator& comm, uint128 local);

// Step 5.
double norm_from_sum(uint128 sum, int exponent);

// fp32 clip coefficient for max_norm > 0: f32(max_norm / (norm + 1e-6)); 1 when that is >= 1.
float clip_coefficient(double norm, double max_norm);

// Two-phase helper used by the pipelines: collect max, then squares, from any number of parts.
struct GradNorm {
  float local_max = 0.0f;
  uint128 local_sum = 0;
  float global_max = 0.0f;  // after reduce_max
  int exponent = 0;
  double norm = 0.0;
  bool finite = true;

  void set_global_max(float m);  // the all-reduce MAX of every rank's local_max; sets finite, exponent
  void reduce_sum(comm::Communicator& comm);  // exact sum of local_sum; sets norm
};

}  // namespace fpg::pipeline
