// Argument checks shared by the elementwise optimizers.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"
#include "optim/fragment.h"

namespace fpg::optim {

// Throws UsageError naming `who` if the fragment cannot be updated: missing buffers, negative sizes or
// a range outside its parameter. Returns the parameter's element count.
inline int64_t checked_param_numel(const Fragment& f, bool needs_exp_avg_sq, const char* who) {
  const std::string at = std::string(who) + ": fragment";
  if (f.numel < 0) throw UsageError(at + " has a negative size");
  const int64_t param_numel = f.param_numel < 0 ? f.numel : f.param_numel;
  if (f.param_offset < 0 || f.param_offset + f.numel > param_numel)
    throw UsageError(at + " [" + std::to_string(f.param_offset) + ", " +
                     std::to_string(f.param_offset + f.numel) + ") lies outside its parameter of " +
                     std::to_string(param_numel) + " elements");
  if (f.numel > 0 && (!f.param || !f.grad || !f.exp_avg || (needs_exp_avg_sq && !f.exp_avg_sq)))
    throw UsageError(at + " lacks a parameter, gradient or state buffer");
  return param_numel;
}

}  // namespace fpg::optim
