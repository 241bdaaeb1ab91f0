// The clocks and summaries every benchmark of `fpgather bench` times with: a monotonic wall clock, the
// process's CPU clock, the median and fastest of repeated measurements, and a repeat-until-stable
// loop for host code. GPU work is timed with CUDA events (cuda_timing.h). Every figure is a ratio
// against a baseline measured in the same process (BENCHMARKS.md), so a callable need only be timed
// robustly.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace fpg::bench {

// Seconds on a monotonic clock; only differences mean anything.
double wall_seconds();

// CPU seconds this process has used so far, all threads together.
double cpu_seconds();

// The median of `samples`: the middle one, or the mean of the two middle ones for an even count;
// -1 for none.
double median(std::vector<double> samples);

// Repeated measurements summarized, in the unit the samples were taken in.
struct Timing {
  double best = 0;    // the fastest
  double median = 0;  // the median
  int reps = 0;       // how many
};

// The summary of `samples` (at least one).
Timing summarize(const std::vector<double>& samples);

// Runs fn once to warm up, then repeats it at least `min_reps` times and until `min_seconds` have
// passed (at most 1000 times); the repetitions' wall seconds, summarized.
Timing time_it(const std::function<void()>& fn, int min_reps = 3, double min_seconds = 0.3);

// Bytes per second, in GB/s (1e9), for `bytes` moved in `seconds`.
inline double gbps(uint64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

}  // namespace fpg::bench
