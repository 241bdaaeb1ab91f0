// Appending raw bytes to a byte vector: how both pipelines build RankPipeline::stored_bytes (a
// param's stored bytes and FP8 state), which the invariant tests compare across ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fpg::pipeline {

inline void append_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

template <class T>
void append_vec(std::vector<uint8_t>& out, const std::vector<T>& v) {
  append_bytes(out, v.data(), v.size() * sizeof(T));
}

}  // namespace fpg::pipeline
