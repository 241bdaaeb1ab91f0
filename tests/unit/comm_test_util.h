// Helpers shared by the communicator tests (not a test file itself: the glob takes *_test.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/group.h"
#include "core/float_codec.h"

namespace comm_test {

using fpg::comm::CommOptions;
using fpg::comm::Completion;

inline const std::vector<int> kRanks = {1, 2, 3, 4, 8};

// Both completion modes, each with a hang guard: a broken abort path fails the test instead of
// hanging it.
inline std::vector<CommOptions> modes() {
  CommOptions immediate, deferred;
  immediate.timeout = deferred.timeout = std::chrono::seconds(60);
  deferred.completion = Completion::deferred;
  return {immediate, deferred};
}

inline uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

inline uint8_t byte_of(int rank, size_t i) { return static_cast<uint8_t>(mix(static_cast<uint64_t>(rank) << 40 | i)); }

// Values of mixed magnitudes, so the order of a sum changes its rounding.
inline float mixed_value(int rank, size_t i, uint64_t salt = 0) {
  static const float table[] = {1e8f, 1.0f, -1e8f, 0.5f, -3.0f, 1e-3f, 7e7f, -2.5e7f, 3.25f, -0.0f};
  return table[mix((static_cast<uint64_t>(rank) << 40) ^ (salt << 20) ^ i) % 10];
}

inline bool same_bits(const void* a, const void* b, size_t bytes) { return bytes == 0 || std::memcmp(a, b, bytes) == 0; }

}  // namespace comm_test
