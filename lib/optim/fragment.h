// A fragment: one contiguous piece of one parameter that a rank updates. The elementwise optimizers
// take a list of fragments and update them all in one pass ("multi-tensor"), so a rank's whole shard
// of many parameters is a single call, on the CPU as in a CUDA kernel.
#pragma once

#include <cstdint>

namespace fpg::optim {

struct Fragment {
  float* param = nullptr;       // fp32 master, `numel` elements
  const float* grad = nullptr;  // fp32 gradient of the same elements
  float* exp_avg = nullptr;     // first moment (Adam, Lion)
  float* exp_avg_sq = nullptr;  // second moment (Adam only; Lion leaves it null)
  int64_t numel = 0;
  // Where the fragment lies in its parameter: elements [param_offset, param_offset + numel) of a
  // parameter of param_numel elements (-1: the fragment is the whole parameter). Torch's CPU fused
  // Adam rounds the last param_numel % 8 elements of every parameter differently from the rest
  // (adam_math.h), so a shard is bitwise equal to the whole-tensor update only if it knows where it is.
  int64_t param_offset = 0;
  int64_t param_numel = -1;
};

}  // namespace fpg::optim
