// Resident memory of this process, for the benchmarks' per-phase figures: the current RSS and the
// peak since the last reset (Linux's VmRSS and VmHWM; writing 5 to /proc/self/clear_refs resets the
// peak to the current RSS), so each phase reports its own peak rather than the process's so far.
#pragma once

#include <cstdint>

namespace fpg::bench {

struct Rss {
  uint64_t current = 0;  // bytes
  uint64_t peak = 0;     // bytes, since the last reset_peak_rss (or the process start)
};

Rss read_rss();

// Returns freed heap memory to the system (so `current` counts what is held), then resets the peak
// to the current RSS. False where the kernel refuses: the peak then counts from the process start.
bool reset_peak_rss();

}  // namespace fpg::bench
