// A param's stored bytes (RankPipeline::stored_bytes, DeviceRankPipeline::stored_bytes), which the
// invariant tests compare across ranks and across the host and device pipelines: raw bytes appended
// to a byte vector, and one layout for an FP8 param's scale state after its data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pipeline/rank_state.h"

namespace fpg::pipeline {

inline void append_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

template <class T>
void append_vec(std::vector<uint8_t>& out, const std::vector<T>& v) {
  append_bytes(out, v.data(), v.size() * sizeof(T));
}

// An FP8 param's scale state as it follows the param's data (and columnwise) bytes: scale,
// scale_inv, e8m0, e8m0_col, the amax history, then the delayed scale and scale_inv.
inline void append_fp8_state(std::vector<uint8_t>& out, const Fp8ParamState& st) {
  append_vec(out, st.scales.scale);
  append_vec(out, st.scales.scale_inv);
  append_vec(out, st.scales.e8m0);
  append_vec(out, st.scales.e8m0_col);
  append_vec(out, st.delayed.amax_history);
  append_bytes(out, &st.delayed.scale, 4);
  append_bytes(out, &st.delayed.scale_inv, 4);
}

}  // namespace fpg::pipeline
