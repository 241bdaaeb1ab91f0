// Timing helpers for `fpgather bench`: every figure is a ratio against a baseline measured in the
// same process (BENCHMARKS.md), so the helpers only need to time a callable robustly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "core/thread_pool.h"

namespace fpg::bench {

struct Timing {
  double best_s = 0;    // fastest repetition
  double median_s = 0;  // median repetition
  int reps = 0;
};

// Runs fn once to warm up, then repeats it at least `min_reps` times and until `min_seconds` have
// passed, and reports the fastest and the median repetition.
Timing time_it(const std::function<void()>& fn, int min_reps = 3, double min_seconds = 0.3);

// Bytes per second, in GB/s (1e9), for `bytes` moved in `seconds`.
inline double gbps(uint64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

// Copies `bytes` from src to dst, one contiguous slice per thread of `pool` — the memcpy baseline
// that quantize and optimizer figures are divided by. It uses the same pool as the measured code,
// so both pay the same dispatch cost.
void parallel_memcpy(ThreadPool& pool, void* dst, const void* src, size_t bytes);

}  // namespace fpg::bench
