// The pipeline's gradient scaling and exact grad norm (lib/pipeline/grad_norm.h) on the GPU, over many
// gradient spans in one launch each. Every result equals the CPU's bit for bit: the max is order-free,
// each element's fixed-point square is the CPU's formula, and the 128-bit sum is integer (associative),
// so neither the launch shape nor the order the blocks' partials are added in can change it. Include
// from plain C++.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace fpg::cuda {

using uint128 = unsigned __int128;

struct GradSpan {
  float* data = nullptr;  // device pointer
  int64_t numel = 0;
};

// Device descriptors of a set of gradient spans (float-aligned pointers at any offset, any sizes), and
// the reductions' partials and result. Build once per layout. The reductions below synchronize
// `stream` to return their result; one table serves one call at a time.
class GradSpanTable {
 public:
  explicit GradSpanTable(const std::vector<GradSpan>& spans);
  ~GradSpanTable();
  GradSpanTable(GradSpanTable&&) noexcept;
  GradSpanTable& operator=(GradSpanTable&&) noexcept;
  int64_t elements() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// g ← g / divisor on every element (the pipeline's grad averaging), then max(acc, |g|) over all of them
// as pipeline::max_abs: NaN anywhere makes the result NaN. One fused launch; with divisor 1 the grads
// are only read (x / 1 == x), as pipeline::divide_and_max_abs does.
float scale_and_max_abs(const GradSpanTable& t, float divisor, float acc, cudaStream_t stream);

// max(acc, |g|) without scaling.
float max_abs(const GradSpanTable& t, float acc, cudaStream_t stream);

// Σ q(g) as pipeline::add_scaled_squares adds it (q(g) = floor((g/2^E)^2 · 2^60)), for finite grads
// and E = pipeline::norm_exponent of a max of every |g|.
uint128 scaled_squares(const GradSpanTable& t, int exponent, cudaStream_t stream);

// scale_and_max_abs, then scaled_squares at pipeline::norm_exponent of that max, which the squares
// pass takes from device memory: two launches, one copy back, one synchronisation. For a group of one
// rank, whose local max is the global one. sum is 0 when max is not finite (the step is skipped).
struct MaxAndSquares {
  float max = 0.0f;
  uint128 sum = 0;
};
MaxAndSquares scale_max_and_squares(const GradSpanTable& t, float divisor, float acc, cudaStream_t stream);

// g ← g · coef (the clip multiply). Asynchronous.
void scale(const GradSpanTable& t, float coef, cudaStream_t stream);

}  // namespace fpg::cuda
