// Delayed scaling (TE DelayedScaling, common/recipe/delayed_scaling.cu): the scale comes from an
// amax history of the previous steps, so a step can cast before its own amax is known.
//
// Order of one step t (every rank does the same, so all ranks stay identical):
//   1. cast each fragment with the current scale, delayed_scales(state), which was derived from the
//      history up to step t-1; take the fragments' partial amax (partial_amax, one cell);
//   2. all-reduce MAX the step's amax and fold it into history[0] (delayed_record);
//   3. delayed_update: amax = max(history) (algo max) or history[0] (most_recent);
//      scale = fp8_max * 2^-margin / amax when amax is finite and > 0, else the previous scale is
//      kept; an inf scale becomes FLT_MAX; no power-of-two rounding; scale_inv = 1/scale;
//      then roll the history: new[0] = 0, new[i] = old[i+1] (1 <= i <= L-2), new[L-1] = old[0].
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/hostdevice.h"
#include "fp8/recipe.h"
#include "fp8/scale_rules.h"
#include "fp8/shard.h"

namespace fpg {
namespace fp8 {

enum class AmaxAlgo : uint8_t { max, most_recent };

struct DelayedConfig {
  Format format = Format::e4m3;
  size_t history_len = 1024;  // TE's default; Megatron uses 1
  AmaxAlgo algo = AmaxAlgo::max;
  int margin = 0;
};

struct DelayedState {
  std::vector<float> amax_history;  // [L]; [0] collects the current step's amax
  float scale = 1.0f;
  float scale_inv = 1.0f;
  DelayedState() = default;
  explicit DelayedState(const DelayedConfig& c) : amax_history(c.history_len ? c.history_len : 1, 0.0f) {}
};

// The scale update of step 3 for one tensor (FPG_HD: the same rule in a CUDA kernel).
FPG_HD float delayed_scale(float amax, float prev_scale, Format f, int margin) {
  if (!(amax > 0.0f) || !is_finite_bits(amax)) return prev_scale;  // 0, NaN, inf: keep
  const float scaled_max = format_max(f) * bits_float(static_cast<uint32_t>(127 - margin) << 23);
  const float s = scaled_max / amax;
  return is_finite_bits(s) ? s : kFloatMax;
}

// Step 2: history[0] = max(history[0], amax) (NaN never enters).
void delayed_record(DelayedState& s, float amax);

// Step 3: new scale and scale_inv from the history, then the roll. Throws UsageError for a history
// that does not match the config, or a margin outside [-126, 126] (2^-margin must be normal).
void delayed_update(const DelayedConfig& c, DelayedState& s);

// The scales step 1 casts with (one cell: scale, scale_inv).
Scales delayed_scales(const DelayedState& s);

}  // namespace fp8
}  // namespace fpg
