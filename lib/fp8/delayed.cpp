#include "fp8/delayed.h"

#include <string>

#include "core/error.h"
#include "fp8/amax.h"

namespace fpg {
namespace fp8 {

void delayed_record(DelayedState& s, float amax) {
  if (s.amax_history.empty()) throw UsageError("fp8: delayed scaling state has an empty amax history");
  s.amax_history[0] = amax_fold(s.amax_history[0], amax);
}

void delayed_update(const DelayedConfig& c, DelayedState& s) {
  std::vector<float>& h = s.amax_history;
  if (h.empty() || (c.history_len && h.size() != c.history_len))
    throw UsageError("fp8: amax history of length " + std::to_string(h.size()) +
                     " does not match the configured length " + std::to_string(c.history_len));
  if (c.margin < -126 || c.margin > 126)
    throw UsageError("fp8: delayed scaling margin " + std::to_string(c.margin) + " is outside [-126, 126]");
  float amax = 0.0f;
  if (c.algo == AmaxAlgo::most_recent) {
    amax = amax_fold(0.0f, h[0]);
  } else {
    for (float a : h) amax = amax_fold(amax, a);
  }
  s.scale = delayed_scale(amax, s.scale, c.format, c.margin);
  s.scale_inv = scale_inv_of(s.scale);
  // Roll: everything moves one slot towards 0, the current amax goes to the end, slot 0 restarts.
  const float current = h[0];
  for (size_t i = 0; i + 1 < h.size(); ++i) h[i] = h[i + 1];
  h.back() = current;
  h[0] = 0.0f;
}

Scales delayed_scales(const DelayedState& s) {
  Scales out;
  out.scale = {s.scale};
  out.scale_inv = {s.scale_inv};
  return out;
}

}  // namespace fp8
}  // namespace fpg
