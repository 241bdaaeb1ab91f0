// Multi-tensor fused Adam/AdamW and Lion on the GPU: every fragment of a rank's shard in ONE launch,
// bitwise equal to the CPU references (lib/optim/adam.h, lion.h), whose per-element math
// (adam_math.h, lion_math.h) the kernels call. Include from plain C++: no CUDA headers needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "optim/adam_math.h"
#include "optim/fragment.h"
#include "optim/lion_math.h"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace fpg::cuda {

// The device descriptor table of a set of fragments (their pointers are DEVICE pointers) and its
// balanced chunk list. Build it once per layout and reuse it every step: a step is then one launch
// and no host-to-device traffic. Checks the fragments as the CPU reference does (UsageError).
class FragmentTable {
 public:
  // needs_exp_avg_sq: Adam (true) or Lion (false). bf16_out: empty, or one device pointer per
  // fragment, null or an array of the fragment's numel where the step also writes bf16(new param)
  // (core/float_codec.h's bf16_from_float, as cuda::cast_f32_to_bf16 writes it): the copy-back of a
  // bf16-stored param fused into the optimizer's pass.
  FragmentTable(const optim::Fragment* fragments, size_t count, bool needs_exp_avg_sq,
                const std::vector<uint16_t*>& bf16_out = {});
  FragmentTable(const std::vector<optim::Fragment>& f, bool needs_exp_avg_sq,
                const std::vector<uint16_t*>& bf16_out = {})
      : FragmentTable(f.data(), f.size(), needs_exp_avg_sq, bf16_out) {}
  ~FragmentTable();
  FragmentTable(FragmentTable&&) noexcept;
  FragmentTable& operator=(FragmentTable&&) noexcept;

  size_t fragments() const;
  size_t chunks() const;  // blocks per launch
  int64_t elements() const;
  bool has_exp_avg_sq() const;
  bool writes_bf16() const;  // some fragment has a bf16 output

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// One Adam/AdamW step (as optim::adam_step: `step` is the step being taken, >= 1) over the table.
// Asynchronous on `stream`. grad_scale (the clip coefficient): each gradient is read as g * grad_scale,
// the value a clip pass storing g * grad_scale would leave, so clipping costs no pass of its own; the
// grads in memory stay unscaled.
void adam_step(const optim::AdamHyper& h, int64_t step, const FragmentTable& table, cudaStream_t stream,
               float grad_scale = 1.0f);

// One Lion step (as optim::lion_step) over the table, grad_scale as adam_step's. Asynchronous on `stream`.
void lion_step(const optim::LionHyper& h, const FragmentTable& table, cudaStream_t stream, float grad_scale = 1.0f);

}  // namespace fpg::cuda
