#include "cmd/bench/timing.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace fpg::bench {

Timing time_it(const std::function<void()>& fn, int min_reps, double min_seconds) {
  using clock = std::chrono::steady_clock;
  fn();  // warm-up: page faults, caches, lazy pool start
  std::vector<double> samples;
  const auto start = clock::now();
  while (static_cast<int>(samples.size()) < min_reps ||
         std::chrono::duration<double>(clock::now() - start).count() < min_seconds) {
    const auto t0 = clock::now();
    fn();
    samples.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    if (samples.size() >= 1000) break;
  }
  std::sort(samples.begin(), samples.end());
  Timing t;
  t.best_s = samples.front();
  t.median_s = samples[samples.size() / 2];
  t.reps = static_cast<int>(samples.size());
  return t;
}

void parallel_memcpy(ThreadPool& pool, void* dst, const void* src, size_t bytes) {
  const size_t parts = pool.size();
  const size_t slice = (bytes + parts - 1) / parts;
  pool.parallel_for(parts, [&](size_t t) {
    const size_t lo = std::min(bytes, t * slice), hi = std::min(bytes, lo + slice);
    std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
  });
}

}  // namespace fpg::bench
